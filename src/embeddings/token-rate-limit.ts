import type { FastifyBaseLogger } from 'fastify';
import type { Redis } from 'ioredis';
import type { Clock } from '../clock.ts';
import { ApiError } from '../errors.ts';
import { redisFallback } from '../redis-fallback.ts';

/** The window of the tokens-per-minute limit. */
const WINDOW_MS = 60_000;

/** A user's tokens in the current window and what is left of the window, in ms. */
interface Window {
  used: number;
  ttlMs: number;
}

/**
 * Reserves up to ARGV[1] tokens (a request's upper bound) of what is left of the minute: returns
 * {tokens reserved (0: none left), tokens used, ms left in the window}. A window starts with the
 * first tokens taken and lasts WINDOW_MS.
 */
const RESERVE_SCRIPT = `
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local ttl = redis.call('PTTL', KEYS[1])
local n = math.min(tonumber(ARGV[1]), tonumber(ARGV[2]) - used)
if n <= 0 then return {0, used, ttl} end
used = redis.call('INCRBY', KEYS[1], n)
if ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  ttl = tonumber(ARGV[3])
end
return {n, used, ttl}
`;

/**
 * Adds ARGV[1] tokens (negative: gives them back, down to 0). ARGV[4] 'fit': only if they fit under
 * the limit; 'charge': whatever is left, up to the limit. Returns {applied (1 or 0), tokens used,
 * ms left in the window}.
 */
const ADJUST_SCRIPT = `
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local ttl = redis.call('PTTL', KEYS[1])
local n = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
if ARGV[4] == 'fit' and used + n > limit then return {0, used, ttl} end
local after = math.max(0, used + n)
if n > 0 then after = math.max(used, math.min(used + n, limit)) end
if after ~= used then redis.call('INCRBY', KEYS[1], after - used) end
if ttl < 0 and after > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  ttl = tonumber(ARGV[3])
end
return {1, after, ttl}
`;

/** 'fit': add the tokens only if they fit under the limit; 'charge': add them, up to the limit. */
type AdjustMode = 'fit' | 'charge';

/** The counts of one process: the store without Redis, and the fallback while Redis fails. */
class MemoryWindows {
  readonly #windows = new Map<string, { used: number; endsAt: number }>();
  readonly #now: () => number;
  #sweptAt = 0;

  constructor(now: () => number) {
    this.#now = now;
  }

  #current(user: string, now: number) {
    const w = this.#windows.get(user);
    if (w !== undefined && w.endsAt <= now) {
      this.#windows.delete(user);
      return undefined;
    }
    return w;
  }

  /** Sets the user's tokens used to `used` (a window starts if none has). */
  #set(user: string, used: number, now: number): Window {
    const w = this.#current(user, now);
    if (w !== undefined) {
      w.used = used;
      return { used, ttlMs: w.endsAt - now };
    }
    if (used > 0) this.#windows.set(user, { used, endsAt: now + WINDOW_MS });
    return { used, ttlMs: WINDOW_MS };
  }

  reserve(user: string, bound: number, limit: number): Window & { reserved: number } {
    const now = this.#now();
    this.#sweep(now);
    const used = this.#current(user, now)?.used ?? 0;
    const n = Math.min(bound, limit - used);
    if (n <= 0) return { reserved: 0, ...this.#set(user, used, now) };
    return { reserved: n, ...this.#set(user, used + n, now) };
  }

  adjust(user: string, n: number, limit: number, mode: AdjustMode): Window & { applied: boolean } {
    const now = this.#now();
    const used = this.#current(user, now)?.used ?? 0;
    if (mode === 'fit' && used + n > limit) return { applied: false, ...this.#set(user, used, now) };
    const after = n > 0 ? Math.max(used, Math.min(used + n, limit)) : Math.max(0, used + n);
    return { applied: true, ...this.#set(user, after, now) };
  }

  /** Drops ended windows, at most once a window. */
  #sweep(now: number) {
    if (now - this.#sweptAt < WINDOW_MS) return;
    this.#sweptAt = now;
    for (const [user, w] of this.#windows) if (w.endsAt <= now) this.#windows.delete(user);
  }
}

/**
 * The per-user tokens-per-minute limit of embeddings (EMBEDDINGS_TOKENS_PER_MINUTE), counted with
 * the service's own cl100k_base count before anything is sent anywhere. Shared by every instance
 * through Redis when it is configured; in this process otherwise. While Redis fails, each instance
 * counts in its own memory (and warns): a user spread over N instances then gets up to N times the
 * limit, never an unlimited number.
 */
export function createTokenRateLimit(deps: {
  tokensPerMinute: number;
  redis: Redis | undefined;
  redisKeyPrefix: string;
  clock: Clock;
  log: FastifyBaseLogger;
}) {
  const limit = deps.tokensPerMinute;
  const memory = new MemoryWindows(() => deps.clock.now().getTime());
  const key = (user: string) => `${deps.redisKeyPrefix}embeddings-tokens:${user}`;
  const shared = redisFallback({ redis: deps.redis, log: deps.log, counts: 'embeddings tokens per minute' });

  /** Runs a script in Redis, or in this process's memory without Redis or while it fails. */
  const run = (inRedis: (redis: Redis) => Promise<number[]>, inMemory: () => Window & { n: number }) =>
    shared.run(async (redis) => {
      const [n, used, ttl] = (await inRedis(redis)) as [number, number, number];
      return { n, used, ttlMs: ttl < 0 ? WINDOW_MS : ttl };
    }, inMemory);

  const reserve = (user: string, bound: number) =>
    run(
      (redis) => redis.eval(RESERVE_SCRIPT, 1, key(user), bound, limit, WINDOW_MS) as Promise<number[]>,
      () => {
        const w = memory.reserve(user, bound, limit);
        return { ...w, n: w.reserved };
      },
    );

  /** Adds `n` tokens (negative: gives them back); `applied` false when they did not fit ('fit'). */
  const adjust = async (user: string, n: number, mode: AdjustMode) => {
    const w = await run(
      (redis) => redis.eval(ADJUST_SCRIPT, 1, key(user), n, limit, WINDOW_MS, mode) as Promise<number[]>,
      () => {
        const w = memory.adjust(user, n, limit, mode);
        return { ...w, n: w.applied ? 1 : 0 };
      },
    );
    return { ...w, applied: w.n === 1 };
  };

  const limited = (w: Window, requested: number | undefined) => {
    const seconds = Math.max(1, Math.ceil(w.ttlMs / 1000));
    const asked = requested === undefined ? '' : `, this request needs ${requested.toLocaleString('en-US')}`;
    return new ApiError(
      'RATE_LIMITED',
      `Too many embeddings tokens: ${w.used.toLocaleString('en-US')} of ${limit.toLocaleString('en-US')} per minute used${asked}; try again in ${seconds} s`,
      { 'retry-after': String(seconds) },
    );
  };

  return {
    limit,
    /**
     * Before a request's inputs are counted: reserves up to `bound` tokens (an upper bound of its
     * tokens, at least 1) of what is left of the user's minute and returns how many. A user with
     * none left is refused (429 with Retry-After), before any counting work.
     */
    async reserve(user: string, bound: number): Promise<number> {
      const w = await reserve(user, Math.max(1, bound));
      if (w.n <= 0) throw limited(w, undefined);
      return w.n;
    },
    /** Gives back a reservation whose request was never counted. */
    async release(user: string, reserved: number): Promise<void> {
      await adjust(user, -reserved, 'charge');
    },
    /**
     * Settles a reservation once the request's `tokens` are counted. The tokens are charged to the
     * user's minute (up to the limit) even when the request is refused: a request larger than the
     * whole limit is a 400 (it could never pass), one that does not fit in what is left a 429 with
     * Retry-After (after which nothing is left).
     */
    async settle(user: string, reserved: number, tokens: number): Promise<void> {
      const extra = tokens - reserved;
      if (tokens > limit) {
        await adjust(user, extra, 'charge');
        throw new ApiError(
          'INVALID_INPUT',
          `body.input has ${tokens.toLocaleString('en-US')} tokens, more than the ${limit.toLocaleString('en-US')} tokens per minute allowed: split it`,
        );
      }
      if (extra <= 0) {
        if (extra < 0) await adjust(user, extra, 'charge');
        return;
      }
      const w = await adjust(user, extra, 'fit');
      if (w.applied) return;
      await adjust(user, extra, 'charge');
      throw limited(w, tokens);
    },
  };
}

export type TokenRateLimit = ReturnType<typeof createTokenRateLimit>;
