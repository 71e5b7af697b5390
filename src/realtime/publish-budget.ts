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
