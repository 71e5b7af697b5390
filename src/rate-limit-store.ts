import { createRequire } from 'node:module';
import type { FastifyRateLimitStore, FastifyRateLimitStoreCtor } from '@fastify/rate-limit';
import type { Redis } from 'ioredis';
import type { RedisFallback } from './redis-fallback.ts';

type Count = { current: number; ttl: number };
type Callback = (error: Error | null, result?: Count) => void;
interface Store extends FastifyRateLimitStore {
  child(routeOptions: unknown): Store;
}
type StoreCtor = new (...args: unknown[]) => Store;

// The plugin's own stores (not in its typings): the Redis one counts atomically in a Lua script.
const require = createRequire(import.meta.url);
const RedisStore = require('@fastify/rate-limit/store/RedisStore') as StoreCtor;
const LocalStore = require('@fastify/rate-limit/store/LocalStore') as StoreCtor;

type StoreParams = { continueExceeding?: boolean; exponentialBackoff?: boolean };

/**
 * The plugin's `store` option: counts in Redis under `nameSpace`, shared by every instance; when
 * Redis does not answer, counts in this process (`fallback`) instead of letting the request through
 * uncounted.
 */
export function redisStoreWithFallback(redis: Redis, nameSpace: string, fallback: RedisFallback) {
  const counted = (store: Store, key: string, timeWindow: number, max: number) =>
    new Promise<Count>((resolve, reject) =>
      store.incr(
        key,
        (err, result) => (err === null && result !== undefined ? resolve(result) : reject(err)),
        timeWindow,
        max,
      ),
    );
  class RedisWithLocalFallback implements Store {
    readonly #redis: Store;
    readonly #local: Store;

    constructor(params: StoreParams, stores?: { redis: Store; local: Store }) {
      this.#redis =
        stores?.redis ?? new RedisStore(params.continueExceeding, params.exponentialBackoff, redis, nameSpace);
      this.#local = stores?.local ?? new LocalStore(params.continueExceeding, params.exponentialBackoff);
    }

    incr(key: string, callback: Callback, timeWindow: number, max: number): void {
      fallback
        .run(
          () => counted(this.#redis, key, timeWindow, max),
          () => counted(this.#local, key, timeWindow, max),
        )
        .then((result) => callback(null, result), callback);
    }

    /** The store of one route (the plugin calls this per route). */
    child(routeOptions: unknown): Store {
      return new RedisWithLocalFallback(
        {},
        { redis: this.#redis.child(routeOptions), local: this.#local.child(routeOptions) },
      );
    }
  }
  return RedisWithLocalFallback as unknown as FastifyRateLimitStoreCtor;
}
