import type { FastifyBaseLogger } from 'fastify';
import type { Redis } from 'ioredis';
import type { Config } from './config.ts';

/**
 * The Redis client that the rate limits and the sign-in throttle share, or undefined without
 * REDIS_URL. Waits (at most 2 s) for the connection before returning; the caller closes it with
 * closeRedis when the app closes.
 */
export async function connectRedis(
  config: Readonly<Pick<Config, 'redisUrl'>>,
  log: FastifyBaseLogger,
): Promise<Redis | undefined> {
  if (config.redisUrl === undefined) return undefined;
  const { Redis } = await import('ioredis'); // loaded only when configured: 13 MB and 40 ms at start
  const client = new Redis(config.redisUrl, {
    connectTimeout: 2000,
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
    lazyConnect: false,
  });
  client.on('error', (err) => log.warn({ err: { message: err.message } }, 'redis error'));
  // Commands fail while the connection is not ready (no offline queue) and would be counted in
  // this process only: so the service waits for Redis before taking requests, until it is ready,
  // refuses (down: no point waiting) or 2 s pass.
  await new Promise<void>((resolve) => {
    const settle = (why?: string) => {
      clearTimeout(timer);
      client.off('ready', onReady).off('error', onError);
      if (why !== undefined) log.warn(`redis not ready (${why}): counting in memory until it is`);
      resolve();
    };
    const onReady = () => settle();
    const onError = (err: Error) => settle(err.message);
    const timer = setTimeout(() => settle('no answer in 2 s'), 2_000);
    client.once('ready', onReady).once('error', onError);
  });
  return client;
}

/** Closes a client from connectRedis: politely when Redis answers, at once when it does not. */
export async function closeRedis(client: Redis): Promise<void> {
  await client.quit().catch(() => client.disconnect());
}

/** What the health check says of Redis: whether the shared client answers PING within `timeoutMs`. */
export async function redisStatus(
  client: Redis | undefined,
  timeoutMs: number,
): Promise<'up' | 'down' | 'not configured'> {
  if (client === undefined) return 'not configured';
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'down'>((resolve) => {
    timer = setTimeout(() => resolve('down'), timeoutMs);
  });
  const answer = client.ping().then(
    (reply) => (reply === 'PONG' ? ('up' as const) : ('down' as const)),
    () => 'down' as const,
  );
  try {
    return await Promise.race([answer, late]);
  } finally {
    clearTimeout(timer);
  }
}
