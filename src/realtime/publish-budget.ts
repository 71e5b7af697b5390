/**
 * A connection's publish allowance: a token bucket holding up to `perSecond` publishes, refilled
 * continuously at `perSecond`. A burst of a second's worth passes; a sustained flood is refused.
 */
export class PublishBudget {
  #tokens: number;
  #updatedAt: number;

  readonly #perSecond: number;

  constructor(perSecond: number, now: number) {
    this.#perSecond = perSecond;
    this.#tokens = perSecond;
    this.#updatedAt = now;
  }

  /** Takes one publish from the budget; false when it is spent. */
  take(now: number): boolean {
    const elapsed = Math.max(now - this.#updatedAt, 0);
    this.#tokens = Math.min(this.#perSecond, this.#tokens + (elapsed * this.#perSecond) / 1000);
    this.#updatedAt = now;
    if (this.#tokens < 1) return false;
    this.#tokens -= 1;
    return true;
  }
}

/**
 * How many publishes of this instance may hold a database connection at once (a publish holds one
 * while it waits for its channel's lock and, with Redis, for Redis's answer). The others wait for a
 * place without a connection, at most `maxWaitMs`; the rest of the pool stays free for requests.
 */
export class PublishSlots {
  readonly #max: number;
  readonly #maxWaitMs: number;
  #busy = 0;
  readonly #waiting: Array<() => void> = [];

  constructor(max: number, maxWaitMs: number) {
    this.#max = max;
    this.#maxWaitMs = maxWaitMs;
  }

  /** Runs `work` in a place; resolves `undefined` without running it when no place came free in time. */
  async run<T>(work: () => Promise<T>): Promise<{ value: T } | undefined> {
    if (this.#busy >= this.#max) {
      let timer: NodeJS.Timeout | undefined;
      const granted = await new Promise<boolean>((resolve) => {
        const take = () => {
          clearTimeout(timer);
          resolve(true);
        };
        this.#waiting.push(take);
        timer = setTimeout(() => {
          const at = this.#waiting.indexOf(take);
          if (at !== -1) this.#waiting.splice(at, 1);
          resolve(false);
        }, this.#maxWaitMs);
      });
      if (!granted) return undefined;
    } else {
      this.#busy += 1;
    }
    try {
      return { value: await work() };
    } finally {
      // The place passes straight to the next waiter, or is freed.
      const next = this.#waiting.shift();
      if (next === undefined) this.#busy -= 1;
      else next();
    }
  }
}
