import type { FastifyBaseLogger } from 'fastify';
import type { Redis } from 'ioredis';
import { withTimeout } from '../deadline.ts';
import { ApiError } from '../errors.ts';
import { redisFallback } from '../redis-fallback.ts';
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
   *
   * `device`: the id of a known device of the address's account (known-device.ts). Its attempts
   * have a back-off record of their own (OWASP's device cookies): strangers' failures do not hold
   * it back, and its own failures back it off without holding back anyone else.
   */
  beginAttempt(email: string, device?: string): Promise<number | undefined>;
  /** The password was wrong: one more failure, and the delay starts again from now. */
  recordFailure(email: string, device?: string): Promise<void>;
  /** The password was right: clears the failures of the address (of the device only, for a known device). */
  recordSuccess(email: string, device?: string): Promise<void>;
}

/** The answer to an attempt made too soon: 429 RATE_LIMITED with Retry-After (from beginAttempt). */
export function signInThrottledError(retryAfterSeconds: number): ApiError {
  return new ApiError(
    'RATE_LIMITED',
    `Too many failed sign-ins for this address; try again in ${retryAfterSeconds} s`,
    { 'retry-after': String(retryAfterSeconds) },
  );
}

interface FailureRecord {
  failures: number;
  lastAt: number;
  /** With Redis: the count of Redis outages this instance had seen when Redis last confirmed the record. */
  epoch: number;
}

// KEYS[1]: the address's record. ARGV: now (ms), free failures, base delay (ms), max delay (ms),
// record lifetime (ms). Returns {the ms still to wait, or 0 when the attempt may go ahead (taking
// the slot when the address is backing off); failures; last}. Mirrors MemoryRecords.begin below.
const BEGIN_ATTEMPT_SCRIPT = `
local now = tonumber(ARGV[1])
local free = tonumber(ARGV[2])
local lifetime = tonumber(ARGV[5])
local record = redis.call('HMGET', KEYS[1], 'failures', 'last')
local failures = tonumber(record[1]) or 0
local last = tonumber(record[2]) or 0
if now - last >= lifetime then return {0, 0, 0} end
if failures > free then
  local delay = math.min(tonumber(ARGV[3]) * 2 ^ (failures - free - 1), tonumber(ARGV[4]))
  local wait = math.min(last + delay - now, delay)
  if wait > 0 then return {math.ceil(wait), failures, last} end
  redis.call('HSET', KEYS[1], 'last', ARGV[1])
  last = now
end
return {0, failures, last}
`;

// KEYS[1]: the address's record. ARGV: now (ms), record lifetime (ms). One more failure, from now.
// Returns {failures, last}. Mirrors MemoryRecords.fail below.
const RECORD_FAILURE_SCRIPT = `
local now = tonumber(ARGV[1])
local lifetime = tonumber(ARGV[2])
local record = redis.call('HMGET', KEYS[1], 'failures', 'last')
local failures = tonumber(record[1]) or 0
if now - (tonumber(record[2]) or 0) >= lifetime then failures = 0 end
redis.call('HSET', KEYS[1], 'failures', failures + 1, 'last', ARGV[1])
redis.call('PEXPIRE', KEYS[1], lifetime)
return {failures + 1, now}
`;

// KEYS[1]: the address's record. ARGV: cleared (1 or 0), failures counted meanwhile, the count this
// instance holds, its last (ms), now (ms), record lifetime (ms). Brings what an instance knew and
// counted while Redis was away into Redis once it answers: a success meanwhile deletes the record
// first; then the count becomes the larger of Redis's plus the failures counted meanwhile and the
// instance's own (so that a Redis that came back empty learns the count again), and the later
// `last` is kept.
const SYNC_SCRIPT = `
if ARGV[1] == '1' then redis.call('DEL', KEYS[1]) end
local now = tonumber(ARGV[5])
local lifetime = tonumber(ARGV[6])
local record = redis.call('HMGET', KEYS[1], 'failures', 'last')
local failures = tonumber(record[1]) or 0
local last = tonumber(record[2]) or 0
if now - last >= lifetime then failures = 0 end
failures = math.max(failures + tonumber(ARGV[2]), tonumber(ARGV[3]))
last = math.max(last, tonumber(ARGV[4]))
if failures > 0 and now - last < lifetime then
  redis.call('HSET', KEYS[1], 'failures', failures, 'last', last)
  redis.call('PEXPIRE', KEYS[1], lifetime)
end
return 1
`;

/**
 * Records in process memory, in order of last change, so the oldest are dropped or swept first.
 * With Redis, they mirror what Redis answered for the addresses this instance saw, so that an
 * address already backing off stays backed off here while Redis does not answer; what was counted
 * meanwhile (`added`, `cleared`) goes to Redis once it answers again (toSync).
 */
class MemoryRecords {
  readonly #records = new Map<string, FailureRecord>();
  /** Failures counted here while Redis did not answer, by key. */
  readonly #added = new Map<string, number>();
  /** Keys whose record a success cleared while Redis did not answer. */
  readonly #cleared = new Set<string>();
  /** How many times Redis stopped answering: records confirmed before the last time are synced again. */
  outages = 0;
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
    this.#put(key, { ...record, lastAt: now });
    return 0;
  }

  /** One more failure, from now; `offline`: counted here because Redis did not answer. */
  fail(key: string, now: number, offline = false): void {
    const record = this.#records.get(key);
    const live = record !== undefined && now - record.lastAt < RECORD_LIFETIME_MS;
    this.#put(key, { failures: (live ? record.failures : 0) + 1, lastAt: now, epoch: record?.epoch ?? -1 });
    if (offline) this.#added.set(key, (this.#added.get(key) ?? 0) + 1);
  }

  /** What Redis answered for the key (after toSync's, if any, went in): kept in case Redis stops answering. */
  mirror(key: string, failures: number, lastAt: number): void {
    this.#added.delete(key);
    this.#cleared.delete(key);
    if (failures === 0) this.#records.delete(key);
    else this.#put(key, { failures, lastAt, epoch: this.outages });
  }

  /** What Redis must learn about the key before its next command there, if anything. */
  toSync(key: string, now: number, epoch: number) {
    const record = this.#records.get(key);
    const cleared = this.#cleared.has(key);
    const added = this.#added.get(key) ?? 0;
    const stale = record !== undefined && record.epoch < epoch;
    if (!cleared && added === 0 && !stale) return undefined;
    const live = record !== undefined && now - record.lastAt < RECORD_LIFETIME_MS;
    return { cleared, added, failures: live ? record.failures : 0, lastAt: live ? record.lastAt : 0 };
  }

  #put(key: string, record: FailureRecord): void {
    this.#records.delete(key);
    this.#records.set(key, record);
    if (this.#records.size > this.maxRecords) {
      const oldest = this.#records.keys().next().value as string;
      this.#forget(oldest);
    }
  }

  #forget(key: string): void {
    this.#records.delete(key);
    this.#added.delete(key);
  }

  /** A success: the record is gone; `offline`: Redis did not answer, and deletes it once it does. */
  clear(key: string, offline = false): void {
    this.#forget(key);
    if (offline) this.#cleared.add(key);
    else this.#cleared.delete(key);
  }

  // The map is in order of last change: drop lapsed records from the front.
  #sweep(now: number): void {
    for (const [key, record] of this.#records) {
      if (now - record.lastAt < RECORD_LIFETIME_MS) return;
      this.#forget(key);
    }
  }
}

/**
 * The sign-in back-off, in Redis when given a client (atomically, shared by every instance) or in
 * process memory. With Redis, memory keeps a copy of the records of the addresses this instance
 * saw; while Redis does not answer, attempts are checked and counted there (an address already
 * backing off stays backed off, never let through uncounted), and what was counted meanwhile is
 * added to Redis once it answers again.
 */
export function createSignInThrottle(options: SignInThrottleOptions): SignInThrottle {
  const now = options.now ?? Date.now;
  const timeoutMs = options.redisTimeoutMs ?? REDIS_TIMEOUT_MS;
  const memory = new MemoryRecords(options.maxMemoryRecords ?? MAX_MEMORY_RECORDS);
  const keyOf = (email: string, device: string | undefined) => {
    const address = sha256Hex(email.toLowerCase());
    return device === undefined ? address : `${address}:device:${sha256Hex(device)}`;
  };
  const redisKey = (key: string) => `${options.redisKeyPrefix}sign-in-failures:${key}`;

  // Whether a Redis command failed since the last one that answered: the next command then syncs
  // every record this instance confirmed before (Redis may have come back empty), in a new epoch.
  let outage = false;
  const shared = redisFallback({
    redis: options.redis,
    log: options.log,
    counts: 'sign-in failures',
    now,
    onFailure: () => {
      outage = true;
    },
  });
  const toSeconds = (waitMs: number) => (waitMs > 0 ? Math.max(1, Math.ceil(waitMs / 1000)) : undefined);

  /** Runs a script on the key's record in Redis, after bringing in what this instance knew and counted while Redis was away. */
  async function inRedis(client: Redis, key: string, script: string, args: (string | number)[]): Promise<number[]> {
    const at = Math.floor(now());
    const sync = memory.toSync(key, at, outage ? memory.outages + 1 : memory.outages);
    if (sync !== undefined) {
      const syncArgs = [sync.cleared ? 1 : 0, sync.added, sync.failures, sync.lastAt, at, RECORD_LIFETIME_MS];
      await withTimeout(client.eval(SYNC_SCRIPT, 1, redisKey(key), ...syncArgs), timeoutMs);
    }
    const result = (await withTimeout(client.eval(script, 1, redisKey(key), ...args), timeoutMs)) as unknown[];
    if (outage) {
      outage = false;
      memory.outages += 1;
    }
    return result.map(Number);
  }

  return {
    async beginAttempt(email, device) {
      const key = keyOf(email, device);
      const at = Math.floor(now());
      const waitMs = await shared.run(
        async (redis) => {
          const args = [at, FREE_FAILURES, BASE_DELAY_MS, MAX_DELAY_MS, RECORD_LIFETIME_MS];
          const [waitMs = 0, failures = 0, last = 0] = await inRedis(redis, key, BEGIN_ATTEMPT_SCRIPT, args);
          memory.mirror(key, failures, last);
          return waitMs;
        },
        () => memory.begin(key, at),
      );
      return toSeconds(waitMs);
    },

    async recordFailure(email, device) {
      const key = keyOf(email, device);
      const at = Math.floor(now());
      await shared.run(
        async (redis) => {
          const [failures = 0, last = 0] = await inRedis(redis, key, RECORD_FAILURE_SCRIPT, [at, RECORD_LIFETIME_MS]);
          memory.mirror(key, failures, last);
        },
        (offline) => memory.fail(key, at, offline),
      );
    },

    async recordSuccess(email, device) {
      const key = keyOf(email, device);
      await shared.run(
        async (redis) => {
          await withTimeout(redis.del(redisKey(key)), timeoutMs);
          memory.clear(key);
        },
        // Offline: cleared here, and in Redis too once it answers again.
        (offline) => memory.clear(key, offline),
      );
    },
  };
}
