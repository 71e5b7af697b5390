/**
 * Work done one batch at a time per channel: what arrives for a channel while a batch of it is being
 * carried out waits, and goes in the next batch (at most `max` items), in the order it arrived. An
 * item for an idle channel starts at once, alone: nothing is held back to make a batch, so batches
 * form only when a channel is busy. `run` settles every item of its batch itself and must not reject.
 */
export class ChannelBatches<T> {
  /** The channels with a batch under way, and what waits for each. */
  readonly #waiting = new Map<string, T[]>();
  readonly #run: (channel: string, batch: T[]) => Promise<void>;
  readonly #max: number;

  constructor(run: (channel: string, batch: T[]) => Promise<void>, max: number) {
    this.#run = run;
    this.#max = max;
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
      batch = waiting.splice(0, this.#max);
    }
  }
}
