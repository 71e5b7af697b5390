import { availableParallelism } from 'node:os';
import { Piscina } from 'piscina';
import { ApiError } from '../errors.ts';
import type { CountResult, CountTask } from './token-count-worker.ts';
import { MAX_INPUTS } from './token-limits.ts';

/**
 * Threads that count tokens: one less than the cores (the event loop keeps one), at least one and
 * at most two. A request of 300,000 tokens takes about 80 ms of one core to count.
 */
export const TOKEN_COUNTING_THREADS = Math.max(1, Math.min(2, availableParallelism() - 1));
/** Requests waiting for a counting thread; beyond, `503 SERVICE_UNAVAILABLE` with `Retry-After: 1`. */
export const TOKEN_COUNTING_QUEUE = 64;
/**
 * Requests of one user being counted (or waiting to be) at once in this instance: a quarter of the
 * queue. Beyond, `429 RATE_LIMITED` with `Retry-After: 1`, so that one user cannot fill the queue
 * everyone shares, while a client sending its batches in parallel is still served.
 */
export const TOKEN_COUNTING_PER_USER = TOKEN_COUNTING_QUEUE / 4;
/** A thread idle this long exits (and frees its tokenizer); the next request starts one again. */
const IDLE_THREAD_MS = 5 * 60_000;

// The worker next to this module: the .ts source when the service runs from its sources, the
// compiled .js under dist/ when it runs from its build.
const workerFile = new URL(
  import.meta.url.endsWith('.ts') ? './token-count-worker.ts' : './token-count-worker.js',
  import.meta.url,
).href;

/** How the counting threads have worked so far (for tests and metrics). */
export interface TokenCounterStats {
  /** Requests counted by the pool. */
  completed: number;
  /** Requests waiting for a thread now. */
  queued: number;
  /** The worker threads that have counted (thread ids; never 0, the main thread's). */
  threadIds: number[];
  /** The most requests one user has had being counted at once. */
  peakPerUser: number;
}

/**
 * Counts embeddings inputs in a small pool of worker threads, so that no request's counting holds
 * up the event loop: the caller awaits while other requests are served. Threads start on first use.
 */
export function createTokenCounter(options: { threads?: number; maxQueue?: number } = {}) {
  const threads = options.threads ?? TOKEN_COUNTING_THREADS;
  const pool = new Piscina<CountTask, CountResult>({
    filename: workerFile,
    minThreads: 0,
    maxThreads: threads,
    idleTimeout: IDLE_THREAD_MS,
    maxQueue: options.maxQueue ?? TOKEN_COUNTING_QUEUE,
  });
  const threadIds = new Set<number>();
  const perUser = new Map<string, number>();
  let peakPerUser = 0;
  let closed = false;

  return {
    /**
     * The token counts of the request's inputs, checked against the input limits (400
     * INVALID_INPUT beyond); 429 when the user already has TOKEN_COUNTING_PER_USER requests being
     * counted, 503 when the queue is full.
     */
    async count(user: string, inputs: readonly string[], single: boolean): Promise<number[]> {
      if (inputs.length > MAX_INPUTS) {
        throw new ApiError('INVALID_INPUT', `body.input must have at most ${MAX_INPUTS} items`);
      }
      const mine = perUser.get(user) ?? 0;
      if (mine >= TOKEN_COUNTING_PER_USER) throw userBusy();
      if (closed || pool.queueSize >= pool.options.maxQueue) throw busy();
      perUser.set(user, mine + 1);
      peakPerUser = Math.max(peakPerUser, mine + 1);
      let result: CountResult;
      try {
        result = await pool.run({ inputs, single });
      } catch (err) {
        if (/queue is at limit/i.test((err as Error).message)) throw busy();
        throw err;
      } finally {
        const left = (perUser.get(user) ?? 1) - 1;
        if (left > 0) perUser.set(user, left);
        else perUser.delete(user);
      }
      threadIds.add(result.threadId);
      if ('refused' in result) throw new ApiError('INVALID_INPUT', result.refused);
      return result.counts;
    },
    stats(): TokenCounterStats {
      return { completed: pool.completed, queued: pool.queueSize, threadIds: [...threadIds], peakPerUser };
    },
    /** Refuses new work, lets the tasks already queued finish, then ends the threads. */
    async close(): Promise<void> {
      closed = true;
      await pool.close();
    },
  };
}

function busy(): ApiError {
  return new ApiError(
    'SERVICE_UNAVAILABLE',
    'Too many embeddings requests are waiting to be counted; try again in 1 s',
    {
      'retry-after': '1',
    },
  );
}

function userBusy(): ApiError {
  return new ApiError(
    'RATE_LIMITED',
    `Too many of your embeddings requests are being counted (at most ${TOKEN_COUNTING_PER_USER} at once); try again in 1 s`,
    { 'retry-after': '1' },
  );
}

export type TokenCounter = ReturnType<typeof createTokenCounter>;
