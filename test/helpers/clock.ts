import type { Clock } from '../../src/clock.ts';

/** A clock that starts at the real time and moves only when told to. */
export class TestClock implements Clock {
  #offsetMs = 0;
  now(): Date {
    return new Date(Date.now() + this.#offsetMs);
  }
  advance(seconds: number): void {
    this.#offsetMs += seconds * 1000;
  }
}
