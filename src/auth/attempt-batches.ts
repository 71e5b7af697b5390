/**
 * Guesses at one address, counted together. Each code attempt must be counted in the statement that
 * locks the code's row (see recordCodeAttempt), and that row lock is held until the commit has
 * reached the disk: guesses at one address can be counted no faster than one commit after another.
 * So an instance never has two counting statements in flight for one key: the first guess runs at
 * once, alone; the guesses that arrive while it runs wait, and then are counted by one statement
 * that raises the counts by as many (and so takes one lock and one commit for all of them). Each
 * guess learns its own place in the batch, hence its own attempt number: the counts are exactly
 * what one statement per guess would have left, in arrival order. Keys are independent: a batch
 * holds guesses at one address (and purpose) only, whoever sent them, whether the address exists
 * or not.
 */
export interface BatchedRun<T> {
  /** What the statement returned for the whole batch. */
  result: T;
  /** How many guesses the statement counted. */
  size: number;
  /** This guess's place in the batch, from 0 (arrival order). */
  index: number;
}

interface Waiting<T> {
  resolve(run: BatchedRun<T>): void;
  reject(err: unknown): void;
}

/** Runs `count(key, n)` for the guesses at each key as described above. */
export function createAttemptBatches<T>(count: (key: string, size: number) => Promise<T>) {
  /** The keys with a statement in flight, each with the guesses that arrived since it started. */
  const inFlight = new Map<string, Waiting<T>[]>();

  async function drain(key: string, batch: Waiting<T>[]): Promise<void> {
    while (batch.length > 0) {
      const next: Waiting<T>[] = [];
      inFlight.set(key, next);
      try {
        const result = await count(key, batch.length);
        batch.forEach((w, index) => {
          w.resolve({ result, size: batch.length, index });
        });
      } catch (err) {
        for (const w of batch) w.reject(err);
      }
      batch = next;
    }
    inFlight.delete(key);
  }

  return {
    /** Counts one guess at `key`; resolves once the statement that counted it has committed. */
    submit(key: string): Promise<BatchedRun<T>> {
      return new Promise<BatchedRun<T>>((resolve, reject) => {
        const waiting = inFlight.get(key);
        if (waiting !== undefined) {
          waiting.push({ resolve, reject });
          return;
        }
        void drain(key, [{ resolve, reject }]);
      });
    },
    /** Keys with a statement in flight (for tests). */
    get keysInFlight() {
      return inFlight.size;
    },
  };
}
