import type { FastifyBaseLogger } from 'fastify';
import type { Redis } from 'ioredis';
import type { Clock } from '../clock.ts';
import { ApiError } from '../errors.ts';

/** The window of the tokens-per-minute limit. */
const WINDOW_MS = 60_000;
/** At most one "counting in memory" warning this often while Redis fails. */
const WARN_EVERY_MS = 10_000;

/** A user's tokens in the current window and what is left of the window, in ms. */
interface Window {
  used: number;
  ttlMs: number;
}

/**
 * Takes `n` tokens if they fit under the limit: returns {taken (1 or 0), tokens used, ms left in
 * the window}. A window starts with the first tokens taken and lasts WINDOW_MS; tokens refused are
 * not counted.
 */
const TAKE_SCRIPT = `
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local ttl = redis.call('PTTL', KEYS[1])
local n = tonumber(ARGV[1])
if used + n > tonumber(ARGV[2]) then return {0, used, ttl} end
used = redis.call('INCRBY', KEYS[1], n)
if ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  ttl = tonumber(ARGV[3])
end
return {1, used, ttl}
`;

/** Tokens used and ms left, without taking any. */
const PEEK_SCRIPT = `
return {tonumber(redis.call('GET', KEYS[1]) or '0'), redis.call('PTTL', KEYS[1])}
`;

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

  peek(user: string): Window {
    const now = this.#now();
    const w = this.#current(user, now);
    return w === undefined ? { used: 0, ttlMs: WINDOW_MS } : { used: w.used, ttlMs: w.endsAt - now };
  }

  take(user: string, n: number, limit: number): Window & { taken: boolean } {
    const now = this.#now();
    this.#sweep(now);
    const w = this.#current(user, now);
    const used = w?.used ?? 0;
    const ttlMs = w === undefined ? WINDOW_MS : w.endsAt - now;
    if (used + n > limit) return { taken: false, used, ttlMs };
    if (w === undefined) this.#windows.set(user, { used: n, endsAt: now + WINDOW_MS });
    else w.used += n;
    return { taken: true, used: used + n, ttlMs };
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
  let warnedAt = 0;
  const fallBack = (err: unknown) => {
    if (Date.now() - warnedAt < WARN_EVERY_MS) return;
    warnedAt = Date.now();
    deps.log.warn(
      { err: { message: (err as Error).message } },
      'redis unavailable: embeddings tokens per minute counted per instance',
    );
  };

  async function peek(user: string): Promise<Window> {
    const redis = deps.redis;
    if (redis === undefined) return memory.peek(user);
    try {
      const [used, ttl] = (await redis.eval(PEEK_SCRIPT, 1, key(user))) as [number, number];
      return { used, ttlMs: ttl < 0 ? WINDOW_MS : ttl };
    } catch (err) {
      fallBack(err);
      return memory.peek(user);
    }
  }

  async function take(user: string, n: number): Promise<Window & { taken: boolean }> {
    const redis = deps.redis;
    if (redis === undefined) return memory.take(user, n, limit);
    try {
      const [taken, used, ttl] = (await redis.eval(TAKE_SCRIPT, 1, key(user), n, limit, WINDOW_MS)) as number[];
      return { taken: taken === 1, used: used as number, ttlMs: (ttl as number) < 0 ? WINDOW_MS : (ttl as number) };
    } catch (err) {
      fallBack(err);
      return memory.take(user, n, limit);
    }
  }

  const limited = (w: Window, requested: number | undefined) => {
    const seconds = Math.max(1, Math.ceil(w.ttlMs / 1000));
    const asked = requested === undefined ? '' : `, this request needs ${requested.toLocaleString('en-US')}`;
    return new ApiError(
      429,
      'RATE_LIMITED',
      `Too many embeddings tokens: ${w.used.toLocaleString('en-US')} of ${limit.toLocaleString('en-US')} per minute used${asked}; try again in ${seconds} s`,
      { 'retry-after': String(seconds) },
    );
  };

  return {
    limit,
    /**
     * Refuses (429 with Retry-After) a user whose tokens this minute are all used, before their
     * request's inputs are counted.
     */
    async checkNotExhausted(user: string): Promise<void> {
      const w = await peek(user);
      if (w.used >= limit) throw limited(w, undefined);
    },
    /**
     * Counts `tokens` against the user's minute: a request larger than the whole limit is a 400
     * (it could never pass), one that does not fit in what is left a 429 with Retry-After (its
     * tokens not counted).
     */
    async take(user: string, tokens: number): Promise<void> {
      if (tokens > limit) {
        throw new ApiError(
          400,
          'INVALID_INPUT',
          `body.input has ${tokens.toLocaleString('en-US')} tokens, more than the ${limit.toLocaleString('en-US')} tokens per minute allowed: split it`,
        );
      }
      const w = await take(user, tokens);
      if (!w.taken) throw limited(w, tokens);
    },
  };
}

export type TokenRateLimit = ReturnType<typeof createTokenRateLimit>;
