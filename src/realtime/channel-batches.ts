/**
 * Work done one batch at a time per channel: what arrives for a channel while a batch of it is being
 * carried out waits, and goes in a next batch (at most `max` items). A batch holds the items of one
 * group only (`groupOf`): the group of the item that has waited longest, and of that group's items
 * as many as may go, in the order they arrived; the others keep their places for the batches after
 * it. An item for an idle channel starts at once, alone: nothing is held back to make a batch, so
 * batches form only when a channel is busy. `run` settles every item of its batch itself and must
 * not reject.
 */
export class ChannelBatches<T> {
  /** The channels with a batch under way, and what waits for each. */
  readonly #waiting = new Map<string, T[]>();
  readonly #run: (channel: string, batch: T[]) => Promise<void>;
  readonly #max: number;
  readonly #groupOf: (item: T) => string;

  constructor(run: (channel: string, batch: T[]) => Promise<void>, max: number, groupOf: (item: T) => string) {
    this.#run = run;
    this.#max = max;
    this.#groupOf = groupOf;
  }

  add(channel: string, item: T): void {
    const waiting = this.#waiting.get(channel);
    if (waiting !== undefined) {
      waiting.push(item);
      return;
    }
    this.#waiting.set(channel, []);
    void this.#drain(channel, [item]);
  }

  async #drain(channel: string, first: T[]): Promise<void> {
    let batch = first;
    for (;;) {
      // `run` settles its items; were it to reject anyway, the channel must not stay stuck.
      await this.#run(channel, batch).catch(() => {});
      const waiting = this.#waiting.get(channel) as T[];
      if (waiting.length === 0) {
        this.#waiting.delete(channel);
        return;
      }
      batch = this.#next(waiting);
    }
  }

  /** Takes the next batch out of `waiting`: the oldest item's group, in order, at most `max`. */
  #next(waiting: T[]): T[] {
    const group = this.#groupOf(waiting[0] as T);
    const batch: T[] = [];
    const rest: T[] = [];
    for (const item of waiting) {
      if (batch.length < this.#max && this.#groupOf(item) === group) batch.push(item);
      else rest.push(item);
    }
    waiting.length = 0;
    for (const item of rest) waiting.push(item);
    return batch;
  }
}
