import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';

/** The local Redis the tests use (shared rate-limit counters). */
export const TEST_REDIS_URL = 'redis://127.0.0.1:6379';

/** A short-lived client that gives up at once when Redis is not there. */
async function shortLivedClient(url: string) {
  const { Redis } = await import('ioredis');
  const client = new Redis(url, {
    lazyConnect: true,
    connectTimeout: 1_000,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  client.on('error', () => {});
  return client;
}

/** Whether a Redis server answers PING at `url` within about a second. */
export async function redisAvailable(url = TEST_REDIS_URL): Promise<boolean> {
  const client = await shortLivedClient(url);
  try {
    await client.connect();
    return (await client.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    client.disconnect();
  }
}

/** Deletes every key under `prefix` (what a test's instances wrote); returns how many there were. */
export async function deleteRedisKeys(url: string, prefix: string): Promise<number> {
  const client = await shortLivedClient(url);
  try {
    await client.connect();
    const keys: string[] = [];
    let cursor = '0';
    do {
      const [next, batch] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      keys.push(...batch);
    } while (cursor !== '0');
    if (keys.length > 0) await client.del(...keys);
    return keys.length;
  } finally {
    client.disconnect();
  }
}

/** A redis-server of the test's own on a loopback port, which the test stops and starts again. */
export interface PrivateRedis {
  url: string;
  port: number;
  /** Stops the server (SIGTERM, waits for it to exit); it keeps nothing (no persistence). */
  stop(): Promise<void>;
  /** Starts it again on the same port, empty, and waits until it answers PING. */
  start(): Promise<void>;
}

/** Starts a private `redis-server` (no persistence) on a free loopback port; stopped when `t` ends. */
export async function startPrivateRedis(t: { teardown(fn: () => unknown): void }): Promise<PrivateRedis> {
  const port = await new Promise<number>((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
  const url = `redis://127.0.0.1:${port}`;
  let child: ChildProcess | undefined;
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--daemonize', 'no'];

  async function start(): Promise<void> {
    const started = spawn('redis-server', args, { stdio: 'ignore' });
    child = started;
    for (const deadline = Date.now() + 10_000; ; await new Promise((r) => setTimeout(r, 50))) {
      if (started.exitCode !== null) throw new Error(`redis-server exited with ${started.exitCode}`);
      if (await redisAvailable(url)) return;
      if (Date.now() > deadline) throw new Error(`redis-server did not answer on ${url} in 10 s`);
    }
  }

  async function stop(): Promise<void> {
    const running = child;
    child = undefined;
    if (running === undefined || running.exitCode !== null) return;
    await new Promise<void>((resolve) => {
      running.once('exit', () => resolve());
      running.kill('SIGTERM');
    });
  }

  await start();
  t.teardown(stop);
  return { url, port, stop, start };
}
