import type { FastifyBaseLogger } from 'fastify';
import type { Kysely } from 'kysely';
import { isDatabaseUnavailable } from '../db/errors.ts';
import type { NotificationListener } from '../db/notification-listener.ts';
import {
  type AttemptResult,
  type ClaimedWebhook,
  claimDueWebhooks,
  countPendingWebhooks,
  deleteSettledWebhooksBefore,
  onWebhookEventsQueued,
  recordWebhookAttempts,
  WEBHOOK_QUEUED_CHANNEL,
} from '../db/repositories/webhook-outbox.ts';
import type { Database } from '../db/schema.ts';
import type { WebhookEvents } from '../metrics/webhooks.ts';
import { startPeriodicJob } from '../periodic-job.ts';
import { type SendOutcome, WebhookSender } from './sender.ts';

const SECOND_MS = 1_000;
const HOUR_MS = 3_600 * SECOND_MS;
const DAY_MS = 24 * HOUR_MS;

/** The first retry comes about this long after a failed attempt; each later one waits twice as long... */
const FIRST_RETRY_MS = SECOND_MS;
/** ...up to this. */
const MAX_RETRY_MS = HOUR_MS;

/**
 * The wait after failed attempt number `attempt` (1 for the first): exponential, from FIRST_RETRY_MS
 * doubling up to MAX_RETRY_MS, with jitter (between half and all of it) so that the events of one
 * outage do not come back all at once. Over the 24 h horizon an event gets about 40 attempts.
 */
export function retryDelayMs(attempt: number): number {
  const ceiling = Math.min(MAX_RETRY_MS, FIRST_RETRY_MS * 2 ** Math.max(0, attempt - 1));
  return ceiling / 2 + Math.random() * (ceiling / 2);
}

/** The knobs of the delivery loop; the defaults are the service's, tests shrink them. */
export interface WebhookTuning {
  /** An event is retried until this long after its creation, then dead-lettered (status failed). */
  retryHorizonMs: number;
  /** The wait after failed attempt number `attempt` (1 for the first). */
  retryDelayMs(attempt: number): number;
  /** How often due events (retries, and what a missed notification announced) are looked for. */
  pollIntervalMs: number;
  /** Attempts under way at once, at most (per instance). */
  concurrency: number;
  /** Events claimed by one query, at most. */
  batchSize: number;
  /** How long closing waits for the attempts under way before it interrupts them. */
  shutdownGraceMs: number;
}

export const DEFAULT_WEBHOOK_TUNING: WebhookTuning = {
  retryHorizonMs: DAY_MS,
  retryDelayMs,
  pollIntervalMs: SECOND_MS,
  concurrency: 16,
  batchSize: 16,
  shutdownGraceMs: 5 * SECOND_MS,
};

/** Added to the timeout to make an attempt's lease: the time to write its result. */
const LEASE_MARGIN_MS = 30 * SECOND_MS;
/** At most one warning a minute about failing attempts or claims (the details are in debug lines). */
const WARNING_INTERVAL_MS = 60 * SECOND_MS;
const RETENTION_BATCH = 1_000;
/** Attempts' results written by one statement, at most. */
const MAX_RESULTS_PER_WRITE = 200;

export interface WebhookDeliveryOptions {
  db: Kysely<Database>;
  /** WEBHOOK_URL: never logged, never stored (it may carry credentials). */
  url: string;
  secret: string;
  timeoutMs: number;
  /** Delivered and dead-lettered events are deleted this many days after their creation. */
  retentionDays: number;
  /**
   * The process's LISTEN connection, started by its owner after this subscribed (construct the
   * delivery before `notifications.start()`). Without a database to listen to (PGlite), the
   * delivery wakes on this process's own queuing instead.
   */
  notifications: NotificationListener;
  log: FastifyBaseLogger;
  events?: WebhookEvents | undefined;
  now: () => Date;
  tuning?: Partial<WebhookTuning> | undefined;
}

interface Attempt {
  abort: AbortController;
  /** Settles once the attempt's result is written (or could not be). */
  done: Promise<void>;
}

interface UnwrittenResult {
  event: ClaimedWebhook;
  result: AttemptResult;
  interrupted: boolean;
  resolve: () => void;
}

/**
 * Delivers the webhook outbox (at least once). The table holds every bit of state, so a restart, a
 * crash or an outage of the receiver loses nothing:
 *
 * - Due events (pending, next_attempt_at reached) are claimed in batches with FOR UPDATE SKIP LOCKED,
 *   the claim moving next_attempt_at ahead as a lease (timeout + 30 s) in the same statement: while
 *   several instances deliver, each due event is attempted by one of them at a time.
 * - Each attempt is sent outside any transaction (a bounded number at once), then its result is
 *   written under its lease (the results that finish together in one statement): delivered on a
 *   2xx within the timeout; otherwise retried after an
 *   exponential, jittered wait, or dead-lettered (failed) once the next try would fall past the
 *   retry horizon (24 h after the event's creation). An instance that dies mid-attempt leaves the
 *   lease to run out, and the event is attempted again.
 * - The loop wakes on the queuing transaction's notification (PostgreSQL), on this process's own
 *   queuing (PGlite), after every (re)connection of the LISTEN connection, and every poll interval
 *   (for retries that come due, and notifications that were missed).
 */
export class WebhookDelivery {
  readonly #db: Kysely<Database>;
  readonly #log: FastifyBaseLogger;
  readonly #events: WebhookEvents | undefined;
  readonly #now: () => Date;
  readonly #tuning: WebhookTuning;
  readonly #timeoutMs: number;
  readonly #retentionDays: number;
  readonly #sender: WebhookSender;
  /** The attempts under way, until their result is written: at most `concurrency`. */
  readonly #attempts = new Set<Attempt>();
  readonly #unwritten: UnwrittenResult[] = [];
  #writing: Promise<void> | undefined;
  readonly #unsubscribe: Array<() => void> = [];
  #pollTimer: NodeJS.Timeout | undefined;
  #stopRetention: (() => Promise<void>) | undefined;
  #pumping: Promise<void> | undefined;
  #wakeAgain = false;
  /** More may be due than the last claim took (it was full, or there were too few free slots). */
  #backlog = false;
  #started = false;
  #closed = false;
  #lastWarning = Number.NEGATIVE_INFINITY;
  #failuresSinceWarning = 0;

  constructor(options: WebhookDeliveryOptions) {
    this.#db = options.db;
    this.#log = options.log;
    this.#events = options.events;
    this.#now = options.now;
    this.#tuning = { ...DEFAULT_WEBHOOK_TUNING, ...options.tuning };
    this.#timeoutMs = options.timeoutMs;
    this.#retentionDays = options.retentionDays;
    this.#sender = new WebhookSender({
      url: options.url,
      secret: options.secret,
      timeoutMs: options.timeoutMs,
      connections: this.#tuning.concurrency,
    });
    const { notifications } = options;
    this.#unsubscribe.push(
      notifications.subscribe({
        name: 'webhook delivery',
        channels: [WEBHOOK_QUEUED_CHANNEL],
        onNotification: () => this.#wake(),
        // Whatever was queued while nothing listened is in the table.
        onConnected: () => this.#wake(),
      }),
    );
    if (!notifications.connects) this.#unsubscribe.push(onWebhookEventsQueued(() => this.#wake()));
  }

  /** Starts delivering: what is due now, then on every wake-up. */
  start(): void {
    if (this.#started || this.#closed) return;
    this.#started = true;
    this.#pollTimer = setInterval(() => this.#wake(), this.#tuning.pollIntervalMs);
    this.#pollTimer.unref();
    this.#stopRetention = startPeriodicJob(
      'webhooks: deleting settled events',
      () => this.#deleteSettled(),
      HOUR_MS,
      this.#log,
    );
    this.#wake();
  }

  /** How many events wait for delivery (all instances'), for the metrics. */
  pending(): Promise<number> {
    return countPendingWebhooks(this.#db);
  }

  /**
   * Stops: no more claims; the attempts under way get `shutdownGraceMs` to finish and write their
   * result, then are interrupted (their events are made due again at once, for another instance or
   * the next start).
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#pollTimer);
    for (const unsubscribe of this.#unsubscribe) unsubscribe();
    await this.#stopRetention?.();
    await this.#pumping;
    const all = () => Promise.all([...this.#attempts].map((a) => a.done));
    let timer: NodeJS.Timeout | undefined;
    const grace = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), this.#tuning.shutdownGraceMs);
    });
    if ((await Promise.race([all(), grace])) === 'late') {
      for (const attempt of this.#attempts) attempt.abort.abort();
      await all();
    }
    clearTimeout(timer);
    await this.#sender.close().catch(() => {});
  }

  #wake(): void {
    if (!this.#started || this.#closed) return;
    if (this.#pumping !== undefined) {
      this.#wakeAgain = true;
      return;
    }
    this.#pumping = this.#pump().finally(() => {
      this.#pumping = undefined;
      if (this.#wakeAgain) this.#wake();
    });
  }

  /** Claims due events while there are free slots and the claims come back full. */
  async #pump(): Promise<void> {
    for (;;) {
      this.#wakeAgain = false;
      const free = this.#tuning.concurrency - this.#attempts.size;
      // While attempts are under way, claims wait for half a batch of free slots: one claim (and
      // one write of results) for many events, rather than one for each event that finishes.
      const least =
        this.#attempts.size === 0 ? 1 : Math.ceil(Math.min(this.#tuning.batchSize, this.#tuning.concurrency) / 2);
      if (this.#closed) return;
      if (free < least) {
        // Whatever woke this is served when enough attempts have finished.
        this.#backlog = true;
        return;
      }
      const limit = Math.min(free, this.#tuning.batchSize);
      const now = this.#now();
      let claimed: ClaimedWebhook[];
      try {
        claimed = await claimDueWebhooks(this.#db, {
          now,
          leaseUntil: new Date(now.getTime() + this.#timeoutMs + LEASE_MARGIN_MS),
          limit,
        });
      } catch (err) {
        this.#warn(err, 'webhooks: could not claim due events; will retry');
        return;
      }
      for (const event of claimed) this.#attempt(event);
      this.#backlog = claimed.length === limit;
      if (!this.#backlog) return;
    }
  }

  #attempt(event: ClaimedWebhook): void {
    const abort = new AbortController();
    const attempt: Attempt = {
      abort,
      done: this.#sender
        .send(event, abort.signal)
        .then((outcome) => this.#write(event, outcome, abort.signal.aborted))
        .finally(() => {
          this.#attempts.delete(attempt);
          if (this.#backlog) this.#wake();
        }),
    };
    this.#attempts.add(attempt);
  }

  /** Queues an attempt's result for the next write; resolves once it is written (or could not be). */
  #write(event: ClaimedWebhook, outcome: SendOutcome, interrupted: boolean): Promise<void> {
    const at = this.#now();
    let result: AttemptResult;
    if (outcome.ok) {
      result = { outcome: 'delivered', at, status: outcome.status };
    } else if (interrupted) {
      // Not the receiver's failure: due again at once, for another instance or the next start.
      result = { outcome: 'retry', at, status: null, error: outcome.error, nextAttemptAt: at };
    } else {
      const nextAttemptAt = new Date(at.getTime() + this.#tuning.retryDelayMs(event.attempt));
      result =
        nextAttemptAt.getTime() - event.createdAt.getTime() > this.#tuning.retryHorizonMs
          ? { outcome: 'dead', at, status: outcome.status, error: outcome.error }
          : { outcome: 'retry', at, status: outcome.status, error: outcome.error, nextAttemptAt };
    }
    return new Promise((resolve) => {
      this.#unwritten.push({ event, result, interrupted, resolve });
      // After the answers that have arrived meanwhile are read too (setImmediate runs after the
      // I/O callbacks of this turn), so that they are written together.
      this.#writing ??= new Promise((next) => setImmediate(next)).then(() => this.#writeResults());
    });
  }

  /**
   * Writes the queued results, up to MAX_RESULTS_PER_WRITE in one statement: while one write runs,
   * the results that come in wait for the next, so that a busy delivery writes many at once.
   */
  async #writeResults(): Promise<void> {
    while (this.#unwritten.length > 0) {
      const batch = this.#unwritten.splice(0, MAX_RESULTS_PER_WRITE);
      try {
        const written = await recordWebhookAttempts(
          this.#db,
          batch.map((b) => ({ claimed: b.event, result: b.result })),
        );
        for (const b of batch) this.#report(b, written.has(b.event.id));
      } catch (err) {
        this.#warn(err, "webhooks: could not write attempts' results; their events will be attempted again");
      }
      for (const b of batch) b.resolve();
    }
    this.#writing = undefined;
  }

  #report({ event, result, interrupted }: UnwrittenResult, written: boolean): void {
    const log = { webhookId: event.id, eventType: event.eventType, attempt: event.attempt };
    if (!written) {
      this.#log.warn(log, 'webhooks: an attempt outlived its lease; its result was not written');
      return;
    }
    switch (result.outcome) {
      case 'delivered':
        this.#events?.delivered((result.at.getTime() - event.createdAt.getTime()) / 1000);
        this.#log.debug({ ...log, status: result.status }, 'webhooks: delivered');
        return;
      case 'retry':
        if (interrupted) return;
        this.#events?.attemptFailed();
        this.#log.debug(
          { ...log, status: result.status, error: result.error, nextAttemptAt: result.nextAttemptAt },
          'webhooks: attempt failed; will retry',
        );
        this.#failuresSinceWarning++;
        if (this.#mayWarn()) {
          this.#log.warn(
            { failedAttempts: this.#failuresSinceWarning, lastError: result.error },
            'webhooks: deliveries are failing; they will be retried',
          );
          this.#failuresSinceWarning = 0;
        }
        return;
      case 'dead':
        this.#events?.deadLettered();
        this.#log.warn(
          { ...log, status: result.status, error: result.error },
          'webhooks: retries over; the event is dead-lettered (status failed)',
        );
        return;
    }
  }

  /** Deletes the delivered and dead-lettered events past the retention, a batch at a time. */
  async #deleteSettled(): Promise<void> {
    const cutoff = new Date(this.#now().getTime() - this.#retentionDays * DAY_MS);
    let deleted = 0;
    for (;;) {
      const n = await deleteSettledWebhooksBefore(this.#db, cutoff, RETENTION_BATCH);
      deleted += n;
      if (n < RETENTION_BATCH || this.#closed) break;
    }
    if (deleted > 0) this.#log.debug({ deleted }, 'webhooks: settled events deleted');
  }

  #mayWarn(): boolean {
    const at = Date.now();
    if (at - this.#lastWarning < WARNING_INTERVAL_MS) return false;
    this.#lastWarning = at;
    return true;
  }

  #warn(err: unknown, message: string): void {
    if (isDatabaseUnavailable(err)) {
      if (this.#mayWarn()) this.#log.info(`${message} (database unavailable)`);
      return;
    }
    this.#log.warn({ err }, message);
  }
}
