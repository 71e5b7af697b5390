/**
 * After a link of the fan-out (a Redis connection, PostgreSQL's LISTEN connection) comes back from a
 * loss, how long this instance still refuses publishes: the other instances meet the same outage and
 * reconnect on their own schedule (Redis clients retry every 0.5 s at most, the LISTEN connection
 * every 0.25 s), so by then theirs are back too and a message published now reaches their
 * subscribers. Delivery resumes within 2 s of the outage's end.
 */
export const FANOUT_SETTLE_MS = 1_000;

/**
 * Whether one link of the fan-out can carry messages now. Up at its first connection at once; up
 * again after a loss only FANOUT_SETTLE_MS after it came back.
 */
export class FanoutLink {
  readonly name: string;
  #up = false;
  #everUp = false;
  #usableFrom = 0;
  readonly #now: () => number;

  constructor(name: string, now: () => number = Date.now) {
    this.name = name;
    this.#now = now;
  }

  /** The link carries messages again (or for the first time). */
  up(): void {
    if (this.#up) return;
    this.#up = true;
    this.#usableFrom = this.#everUp ? this.#now() + FANOUT_SETTLE_MS : 0;
    this.#everUp = true;
  }

  /** The link was lost. */
  down(): void {
    this.#up = false;
  }

  get usable(): boolean {
    return this.#up && this.#now() >= this.#usableFrom;
  }
}

/** Why messages cannot reach every instance now (undefined when every link is usable). */
export function unusableLinks(links: readonly FanoutLink[]): string | undefined {
  const down = links.filter((l) => !l.usable).map((l) => l.name);
  return down.length === 0 ? undefined : `the realtime fan-out is not connected (${down.join(', ')})`;
}
