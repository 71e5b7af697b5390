import type { FastifyBaseLogger } from 'fastify';
import type { Redis } from 'ioredis';

/** At most one "redis unavailable" warning this often, per store, unless the store says otherwise. */
export const WARN_EVERY_MS = 10_000;

export interface RedisFallbackOptions {
  /** The shared client (connectRedis); undefined: every operation runs in memory. */
  redis: Redis | undefined;
  log: Pick<FastifyBaseLogger, 'warn'>;
  /** What the store counts, for its warning: `redis unavailable: <counts> counted per instance`. */
  counts: string;
  warnEveryMs?: number;
  /** Milliseconds since the epoch (the app's clock); Date.now by default. */
  now?: () => number;
  /** Told of every failed Redis command, after the warning (when one is due). */
  onFailure?: (err: unknown) => void;
}

/**
 * A store kept in Redis, shared by every instance, with an in-memory stand-in for the time Redis
 * does not answer (down, not connected yet, too slow): each instance then counts on its own, so a
 * client spread over N instances gets up to N times a limit, never an unlimited number.
 */
export interface RedisFallback {
  readonly redis: Redis | undefined;
  /**
   * `inRedis` with the client; should it fail, a (throttled) warning and `inMemory(true)`. Without
   * Redis, `inMemory(false)` at once: `offline` tells a fallback from the memory-only store.
   */
  run<T>(inRedis: (redis: Redis) => Promise<T>, inMemory: (offline: boolean) => T | Promise<T>): Promise<T>;
  /** A Redis command run outside `run` (a renewal, a release in the background) failed: warns, throttled. */
  failed(err: unknown): void;
}

/** One store's Redis with its in-memory fallback and its one throttled warning (see RedisFallback). */
export function redisFallback(options: RedisFallbackOptions): RedisFallback {
  const { redis, log } = options;
  const now = options.now ?? Date.now;
  const every = options.warnEveryMs ?? WARN_EVERY_MS;
  let warnedAt: number | undefined;
  const failed = (err: unknown) => {
    const at = now();
    if (warnedAt === undefined || Math.abs(at - warnedAt) >= every) {
      warnedAt = at;
      const message = err instanceof Error ? err.message : String(err);
      log.warn({ err: { message } }, `redis unavailable: ${options.counts} counted per instance`);
    }
    options.onFailure?.(err);
  };
  return {
    redis,
    failed,
    async run(inRedis, inMemory) {
      if (redis === undefined) return inMemory(false);
      try {
        return await inRedis(redis);
      } catch (err) {
        failed(err);
        return inMemory(true);
      }
    },
  };
}
