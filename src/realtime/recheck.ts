import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises';
import type { FastifyBaseLogger } from 'fastify';
import type { SubscriptionQuestion } from '../db/repositories/realtime-access.ts';

/** One live subscription of this instance, as the re-check sees it. */
export interface LiveSubscription<S = unknown> {
  socket: S;
  userId: string | undefined;
  channel: string;
  /** Which joining this is: a subscription ended and made again is a new one, checked on its own. */
  joined: number;
}

/** What one pass over the live subscriptions did. */
export interface RecheckPass {
  subscriptions: number;
  /** Distinct (user, channel) questions asked of the database. */
  questions: number;
  ended: number;
  ms: number;
}

export interface RecheckOptions<S> {
  /** The live subscriptions now. */
  list(): Iterable<LiveSubscription<S>>;
  /** The subscribe policies' answers, in order (realtime.subscribable). */
  check(questions: readonly SubscriptionQuestion[]): Promise<boolean[]>;
  /** Ends a subscription that no longer passes; false if it has since been ended or made again. */
  end(subscription: LiveSubscription<S>): boolean;
  /** Whether an error means "try again later" (the database is away) rather than a broken policy. */
  isTransient(err: unknown): boolean;
  /** Between periodic passes; 0: no periodic pass. */
  periodMs: number;
  log: FastifyBaseLogger;
  onPass?(pass: RecheckPass): void;
  /** Questions per statement. */
  batchSize?: number;
}

/** Subscriptions grouped into questions between two turns of the event loop. */
const GROUPING_SLICE = 2_000;

/** A pass the database put off (unreachable, a lock wait) is tried again this soon, whatever the period. */
const RETRY_MS = 1_000;

/** The longest pause between two batches of a pass (a pause as long as the batch took). */
const MAX_PAUSE_MS = 100;

/** Questions per statement: one round trip of a few milliseconds, then the event loop is free again. */
export const RECHECK_BATCH = 500;

/**
 * Keeps live subscriptions true to the subscribe policies: every subscription is asked again, in
 * batches of distinct (user, channel) questions, periodically and at once when `changed()` says the
 * policies or channels changed. Between batches the pass pauses as long as the batch took, so
 * that it takes at most half of the database's time. A subscription that no longer passes is ended (`end`). A change
 * that arrives during a pass starts a new one when it ends. A question
 * the database cannot answer for a transient reason keeps the subscription until the next pass; one
 * whose policy fails (an error in the policy itself) ends it, as subscribing would be refused.
 */
export class SubscriptionRecheck<S> {
  readonly #options: RecheckOptions<S>;
  readonly #batchSize: number;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #again = false;
  #closed = false;
  #generation = 0;

  constructor(options: RecheckOptions<S>) {
    this.#options = options;
    this.#batchSize = options.batchSize ?? RECHECK_BATCH;
    this.#schedule(options.periodMs);
  }

  /**
   * Bumped by every change: a subscribe whose check began under an older generation checks again,
   * since the pass for the change may have run before it joined.
   */
  get generation(): number {
    return this.#generation;
  }

  /** The policies or channels changed: re-check everything now. */
  changed(): void {
    this.#generation++;
    this.#run();
  }

  /** Resolves when no pass is running (tests, shutdown). */
  async settled(): Promise<void> {
    while (this.#running !== undefined) await this.#running;
  }

  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
  }

  /** The next pass in `ms` (0 or less: none). */
  #schedule(ms: number): void {
    clearTimeout(this.#timer);
    if (this.#closed || ms <= 0) return;
    this.#timer = setTimeout(() => this.#run(), ms);
    this.#timer.unref();
  }

  /**
   * Starts a pass, or, while one runs, asks for another after it. A pass always runs to its end
   * (batches asked after a change see the change; the pass after it asks the earlier ones again),
   * so that changes coming faster than a pass still reach every subscription. The period counts
   * from the start of a pass; one put off by the database is tried again within RETRY_MS.
   */
  #run(): void {
    if (this.#closed) return;
    if (this.#running !== undefined) {
      this.#again = true;
      return;
    }
    const running = (async () => {
      let complete = true;
      do {
        this.#again = false;
        this.#schedule(this.#options.periodMs);
        complete = await this.#pass().catch((err: unknown) => {
          this.#options.log.error({ err }, 'realtime: re-check failed');
          return false;
        });
      } while (this.#again && !this.#closed);
      if (!complete) this.#schedule(RETRY_MS);
    })().finally(() => {
      this.#running = undefined;
    });
    this.#running = running;
  }

  /** One pass over every live subscription; false when the database put it off. */
  async #pass(): Promise<boolean> {
    const started = performance.now();
    const byQuestion = new Map<string, { question: SubscriptionQuestion; subscriptions: LiveSubscription<S>[] }>();
    let subscriptions = 0;
    for (const subscription of this.#options.list()) {
      // Grouping is synchronous: delivery gets the event loop back every GROUPING_SLICE subscriptions.
      if (++subscriptions % GROUPING_SLICE === 0) await nextTurn();
      const key = `${subscription.userId ?? ''}\n${subscription.channel}`;
      const entry = byQuestion.get(key);
      if (entry === undefined) {
        const question = { userId: subscription.userId, channel: subscription.channel };
        byQuestion.set(key, { question, subscriptions: [subscription] });
      } else {
        entry.subscriptions.push(subscription);
      }
    }
    const entries = [...byQuestion.values()];
    let ended = 0;
    for (let i = 0; i < entries.length; i += this.#batchSize) {
      if (this.#closed) return true;
      const batch = entries.slice(i, i + this.#batchSize);
      const asked = performance.now();
      const answers = await this.#answers(batch.map((e) => e.question));
      if (answers === undefined) return false;
      const took = performance.now() - asked;
      batch.forEach((entry, n) => {
        if (answers[n] === true) return;
        for (const subscription of entry.subscriptions) {
          if (this.#options.end(subscription)) ended++;
        }
      });
      // Half the time at most: the database (and this process) keep the rest for publishing and delivery.
      if (i + this.#batchSize < entries.length) await sleep(Math.min(took, MAX_PAUSE_MS));
      else await nextTurn();
    }
    this.#options.onPass?.({ subscriptions, questions: entries.length, ended, ms: performance.now() - started });
    return true;
  }

  /** The batch's answers; each question on its own if the batch fails; undefined while the database is away. */
  async #answers(questions: SubscriptionQuestion[]): Promise<boolean[] | undefined> {
    const { check, isTransient, log } = this.#options;
    try {
      return await check(questions);
    } catch (err) {
      if (isTransient(err)) {
        log.warn({ err: { message: (err as Error).message } }, 'realtime: re-check postponed (database unavailable)');
        return undefined;
      }
    }
    const answers: boolean[] = [];
    for (const question of questions) {
      try {
        answers.push((await check([question]))[0] === true);
      } catch (err) {
        if (isTransient(err)) return undefined;
        log.error({ err, channel: question.channel }, 'realtime: a subscribe policy failed; the subscription ends');
        answers.push(false);
      }
    }
    return answers;
  }
}
