import { type ChildProcess, spawn } from 'node:child_process';
import { freePort } from '../../scripts/lib/service-process.ts';
import { redisAvailable } from './redis.ts';

interface Teardown {
  teardown(fn: () => unknown): void;
}

/**
 * A Redis server of a test's own (the machine's `redis-server`, 127.0.0.1, nothing saved to disk),
 * which the test may stop and start again on the same port without disturbing the shared Redis that
 * other test files use. Stopped when the test ends.
 */
export interface PrivateRedis {
  /** redis://127.0.0.1:<port> */
  readonly url: string;
  readonly port: number;
  /** Starts the server and waits until it answers PING. */
  start(): Promise<void>;
  /** Stops the server (SIGKILL: connections drop at once, as when its host goes away). */
  stop(): Promise<void>;
  /** Suspends the server (SIGSTOP): connections stay open and nothing answers. thaw() resumes it. */
  freeze(): void;
  thaw(): void;
  readonly running: boolean;
}

/** Whether this machine has `redis-server` to start. */
export async function redisServerInstalled(): Promise<boolean> {
  return new Promise((resolve) => {
    const child = spawn('redis-server', ['--version'], { stdio: 'ignore' });
    child.on('error', () => resolve(false));
    child.on('exit', (code) => resolve(code === 0));
  });
}

/** Starts a private Redis server for the test `t`. */
export async function startPrivateRedis(t: Teardown): Promise<PrivateRedis> {
  const port = await freePort();
  const url = `redis://127.0.0.1:${port}`;
  let child: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();

  const stop = async () => {
    if (child === undefined) return;
    const running = child;
    child = undefined;
    running.kill('SIGKILL');
    await exited;
  };
  const signal = (name: NodeJS.Signals) => {
    if (child === undefined) throw new Error('the private Redis is not running');
    child.kill(name);
  };
  const start = async () => {
    if (child !== undefined) return;
    const started = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--daemonize', 'no'],
      { stdio: 'ignore' },
    );
    child = started;
    exited = new Promise((resolve) => started.once('exit', () => resolve()));
    const deadline = Date.now() + 10_000;
    while (!(await redisAvailable(url))) {
      if (Date.now() > deadline) throw new Error(`redis-server on port ${port} did not answer within 10 s`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  };
  t.teardown(stop);
  await start();
  return {
    url,
    port,
    start,
    stop,
    freeze: () => signal('SIGSTOP'),
    thaw: () => signal('SIGCONT'),
    get running() {
      return child !== undefined;
    },
  };
}
