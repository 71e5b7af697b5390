import type { FastifyBaseLogger } from 'fastify';
import type { Redis } from 'ioredis';
import { ApiError } from '../errors.ts';
import { sha256Hex } from './crypto.ts';

/**
 * Per-address back-off of failed sign-ins (the createSession description in openapi.yaml).
 *
 * The first FREE_FAILURES failures in a row cost nothing; after failure n (n > FREE_FAILURES) the
 * next attempt must wait 2^(n - FREE_FAILURES - 1) s, at most MAX_DELAY_MS; an attempt made sooner
 * is refused without being counted. A success clears the record; a record also lapses
 * RECORD_LIFETIME_MS after its last failure. Keyed by the lower-cased address whether or not an
 * account has it, so the throttle says nothing about which addresses exist.
 *
 * Failures are counted after the password check (recordFailure), so right passwords sent at once
 * (several devices) never hold each other back. Once the address is backing off, the attempt
 * that goes ahead takes the slot in the same atomic step as the check: attempts sent at once then
 * cannot share it, and at most one per delay gets through. Below the threshold, guesses sent at
 * once all go ahead before any is counted; the per-IP rate limits bound such a burst.
 */
export const FREE_FAILURES = 5;
export const BASE_DELAY_MS = 1_000;
export const MAX_DELAY_MS = 15 * 60 * 1_000;
export const RECORD_LIFETIME_MS = 24 * 60 * 60 * 1_000;
/** Addresses kept in process memory (without Redis, or while it is away); the oldest go first. */
export const MAX_MEMORY_RECORDS = 100_000;
/** How long a Redis command may take before the attempt is counted in memory instead. */
export const REDIS_TIMEOUT_MS = 1_000;
const WARN_INTERVAL_MS = 10_000;

/** The wait (ms) before the next attempt after `failures` failures in a row. */
export function delayAfter(failures: number): number {
  if (failures <= FREE_FAILURES) return 0;
  return Math.min(BASE_DELAY_MS * 2 ** (failures - FREE_FAILURES - 1), MAX_DELAY_MS);
}

export interface SignInThrottleOptions {
  /** Shares the records between instances (connectRedis); undefined keeps them in memory. */
  redis: Redis | undefined;
  /** config.redisKeyPrefix: records live under `${redisKeyPrefix}sign-in-failures:<sha256 of the address>`. */
  redisKeyPrefix: string;
  log: Pick<FastifyBaseLogger, 'warn'>;
  /** Milliseconds since the epoch (the app's clock); Date.now by default. */
  now?: () => number;
  maxMemoryRecords?: number;
  redisTimeoutMs?: number;
}

export interface SignInThrottle {
  /**
   * Call before checking the password. Returns the whole seconds (at least 1) to wait when the
   * address must not try yet (answer 429 with Retry-After, do not check the password); otherwise
   * undefined. Once the address is backing off, an attempt that goes ahead takes the slot: others
   * wait a full delay from then, so attempts made at once cannot share one slot.
   */
  beginAttempt(email: string): Promise<number | undefined>;
  /** The password was wrong: one more failure, and the delay starts again from now. */
  recordFailure(email: string): Promise<void>;
  /** The password was right: clears the address's failures. */
  recordSuccess(email: string): Promise<void>;
}

/** The answer to an attempt made too soon: 429 RATE_LIMITED with Retry-After (from beginAttempt). */
export function signInThrottledError(retryAfterSeconds: number): ApiError {
  return new ApiError(
    429,
    'RATE_LIMITED',
    `Too many failed sign-ins for this address; try again in ${retryAfterSeconds} s`,
    { 'retry-after': String(retryAfterSeconds) },
  );
}

interface FailureRecord {
  failures: number;
  lastAt: number;
}

// KEYS[1]: the address's record. ARGV: now (ms), free failures, base delay (ms), max delay (ms),
// record lifetime (ms). Returns the ms still to wait, or 0 when the attempt may go ahead (taking
// the slot when the address is backing off). Mirrors MemoryRecords.begin below.
const BEGIN_ATTEMPT_SCRIPT = `
local now = tonumber(ARGV[1])
local free = tonumber(ARGV[2])
local lifetime = tonumber(ARGV[5])
local record = redis.call('HMGET', KEYS[1], 'failures', 'last')
local failures = tonumber(record[1]) or 0
local last = tonumber(record[2]) or 0
if now - last >= lifetime then return 0 end
if failures > free then
  local delay = math.min(tonumber(ARGV[3]) * 2 ^ (failures - free - 1), tonumber(ARGV[4]))
  local wait = math.min(last + delay - now, delay)
  if wait > 0 then return math.ceil(wait) end
  redis.call('HSET', KEYS[1], 'last', ARGV[1])
end
return 0
`;

// KEYS[1]: the address's record. ARGV: now (ms), record lifetime (ms). One more failure, from now.
// Mirrors MemoryRecords.fail below.
const RECORD_FAILURE_SCRIPT = `
local now = tonumber(ARGV[1])
local lifetime = tonumber(ARGV[2])
local record = redis.call('HMGET', KEYS[1], 'failures', 'last')
local failures = tonumber(record[1]) or 0
if now - (tonumber(record[2]) or 0) >= lifetime then failures = 0 end
redis.call('HSET', KEYS[1], 'failures', failures + 1, 'last', ARGV[1])
redis.call('PEXPIRE', KEYS[1], lifetime)
return failures + 1
`;

/** Records in process memory, in order of last failure, so the oldest are dropped or swept first. */
class MemoryRecords {
  readonly #records = new Map<string, FailureRecord>();
  readonly maxRecords: number;
  constructor(maxRecords: number) {
    this.maxRecords = maxRecords;
  }

  /** The ms still to wait, or 0 when the attempt may go ahead (taking the slot when backing off). */
  begin(key: string, now: number): number {
    this.#sweep(now);
    const record = this.#records.get(key);
    if (record === undefined || now - record.lastAt >= RECORD_LIFETIME_MS) return 0;
    const delay = delayAfter(record.failures);
    if (delay === 0) return 0;
    // Capped at the delay itself, in case the clock went back.
    const wait = Math.min(record.lastAt + delay - now, delay);
    if (wait > 0) return wait;
    this.#put(key, { failures: record.failures, lastAt: now });
    return 0;
  }

  /** One more failure, from now. */
  fail(key: string, now: number): void {
    const record = this.#records.get(key);
    const live = record !== undefined && now - record.lastAt < RECORD_LIFETIME_MS;
    this.#put(key, { failures: (live ? record.failures : 0) + 1, lastAt: now });
  }

  #put(key: string, record: FailureRecord): void {
    this.#records.delete(key);
    this.#records.set(key, record);
    if (this.#records.size > this.maxRecords) {
      const oldest = this.#records.keys().next().value as string;
      this.#records.delete(oldest);
    }
  }

  clear(key: string): void {
    this.#records.delete(key);
  }

  // The map is in order of last failure: drop lapsed records from the front.
  #sweep(now: number): void {
    for (const [key, record] of this.#records) {
      if (now - record.lastAt < RECORD_LIFETIME_MS) return;
      this.#records.delete(key);
    }
  }
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer in ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * The sign-in back-off, in Redis when given a client (atomically, shared by every instance) or in
 * process memory. While Redis does not answer, attempts are counted in memory (each instance on
 * its own) rather than let through uncounted.
 */
export function createSignInThrottle(options: SignInThrottleOptions): SignInThrottle {
  const { redis, log } = options;
  const now = options.now ?? Date.now;
  const timeoutMs = options.redisTimeoutMs ?? REDIS_TIMEOUT_MS;
  const memory = new MemoryRecords(options.maxMemoryRecords ?? MAX_MEMORY_RECORDS);
  const keyOf = (email: string) => sha256Hex(email.toLowerCase());
  const redisKey = (key: string) => `${options.redisKeyPrefix}sign-in-failures:${key}`;

  let warnedAt: number | undefined;
  const onRedisFailure = (err: unknown) => {
    const at = now();
    if (warnedAt !== undefined && Math.abs(at - warnedAt) < WARN_INTERVAL_MS) return;
    warnedAt = at;
    const message = err instanceof Error ? err.message : String(err);
    log.warn({ err: { message } }, 'redis unavailable: sign-in failures counted per instance');
  };
  const toSeconds = (waitMs: number) => (waitMs > 0 ? Math.max(1, Math.ceil(waitMs / 1000)) : undefined);

  return {
    async beginAttempt(email) {
      const key = keyOf(email);
      const at = Math.floor(now());
      if (redis !== undefined) {
        try {
          const args = [at, FREE_FAILURES, BASE_DELAY_MS, MAX_DELAY_MS, RECORD_LIFETIME_MS];
          const waitMs = await withTimeout(redis.eval(BEGIN_ATTEMPT_SCRIPT, 1, redisKey(key), ...args), timeoutMs);
          return toSeconds(Number(waitMs));
        } catch (err) {
          onRedisFailure(err);
        }
      }
      return toSeconds(memory.begin(key, at));
    },

    async recordFailure(email) {
      const key = keyOf(email);
      const at = Math.floor(now());
      if (redis !== undefined) {
        try {
          await withTimeout(redis.eval(RECORD_FAILURE_SCRIPT, 1, redisKey(key), at, RECORD_LIFETIME_MS), timeoutMs);
          return;
        } catch (err) {
          onRedisFailure(err);
        }
      }
      memory.fail(key, at);
    },

    async recordSuccess(email) {
      const key = keyOf(email);
      // Both places: the failures may have been counted in memory while Redis was away.
      memory.clear(key);
      if (redis !== undefined) {
        await withTimeout(redis.del(redisKey(key)), timeoutMs).catch(onRedisFailure);
      }
    },
  };
}
