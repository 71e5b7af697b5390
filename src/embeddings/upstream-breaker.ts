import type { FastifyBaseLogger } from 'fastify';
import CircuitBreaker from 'opossum';
import { ApiError } from '../errors.ts';

/** The breaker looks at the calls of this window: at least MIN_CALLS of them, at least half failed. */
export const BREAKER_WINDOW_MS = 10_000;
export const BREAKER_MIN_CALLS = 5;
export const BREAKER_FAILURE_PERCENT = 50;

/** The breaker's state as health and metrics report it. */
export type BreakerState = 'closed' | 'open' | 'half-open';

/** Failures that say the provider is down or unreachable; refusals of one request (4xx) are not. */
const isProviderFailure = (err: unknown) =>
  err instanceof ApiError && (err.code === 'PROVIDER_UNAVAILABLE' || err.code === 'PROVIDER_TIMEOUT');

/**
 * A circuit breaker (opossum) in front of an upstream call. When at least half of the calls of the
 * last 10 s (and at least 5) failed because the provider was down or slow, further calls are
 * refused at once with 503 and Retry-After for `resetMs`, instead of each one holding a connection
 * through its retries and timeout. Then one trial call goes through: success closes the circuit,
 * failure opens it again. One breaker per process: each instance judges the provider by itself.
 */
export class UpstreamBreaker<Args extends unknown[], Result> {
  readonly #breaker: CircuitBreaker<Args, Result>;
  #reopensAt = 0;

  constructor(call: (...args: Args) => Promise<Result>, resetMs: number, log: FastifyBaseLogger) {
    this.#breaker = new CircuitBreaker(call, {
      timeout: false, // the call keeps its own deadline (EMBEDDINGS_TIMEOUT_MS)
      resetTimeout: resetMs,
      rollingCountTimeout: BREAKER_WINDOW_MS,
      rollingCountBuckets: 10,
      volumeThreshold: BREAKER_MIN_CALLS,
      errorThresholdPercentage: BREAKER_FAILURE_PERCENT,
      // A filtered error is not a failure: the provider answered.
      errorFilter: (err: unknown) => !isProviderFailure(err),
    });
    this.#breaker.on('open', () => {
      this.#reopensAt = Date.now() + resetMs;
      log.warn({ resetMs }, 'embeddings provider failing: circuit open, calls refused');
    });
    this.#breaker.on('halfOpen', () => log.info('embeddings provider circuit half-open: one trial call'));
    this.#breaker.on('close', () => log.info('embeddings provider circuit closed'));
  }

  /** Closed (calls go through), open (refused) or half-open (one trial call). */
  get state(): BreakerState {
    return this.#breaker.closed ? 'closed' : this.#breaker.halfOpen ? 'half-open' : 'open';
  }

  async call(...args: Args): Promise<Result> {
    try {
      return await this.#breaker.fire(...args);
    } catch (err) {
      if ((err as { code?: unknown }).code !== 'EOPENBREAKER') throw err;
      // While open: until the trial; while half-open, the trial is under way: a second.
      const seconds = Math.max(1, Math.ceil((this.#reopensAt - Date.now()) / 1000));
      throw new ApiError(
        'SERVICE_UNAVAILABLE',
        `The embeddings provider is failing; calls to it are paused, try again in ${seconds} s`,
        { 'retry-after': String(seconds) },
      );
    }
  }

  close(): void {
    this.#breaker.shutdown();
  }
}
