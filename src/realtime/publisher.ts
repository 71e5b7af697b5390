import { randomUUID } from 'node:crypto';
import { type Kysely, sql } from 'kysely';
import { isRetryable } from '../db/errors.ts';
import type { Database } from '../db/schema.ts';
import { ChannelBatches } from './channel-batches.ts';
import type { Delivery, Fanout } from './fanout.ts';
import type { MessageMeta } from './protocol.ts';
import type { PublishSlots } from './publish-budget.ts';

export interface PublishInput {
  /** The publishing user; undefined for an anonymous socket. */
  userId: string | undefined;
  channel: string;
  event: string;
  payload: Record<string, unknown>;
  /** Who the message claims to be from; the caller by default. The publish policies decide. */
  senderId?: string | null;
}

export type PublishOutcome =
  | { ok: true; meta: MessageMeta }
  | { ok: false; code: 'UNAUTHORIZED' | 'PAYLOAD_TOO_LARGE' | 'SERVICE_UNAVAILABLE'; message: string };

/**
 * The most messages of one channel stored in one transaction. Each accepted one holds a
 * subtransaction id until the commit (realtime.publish_as_callers), and PostgreSQL keeps 64 of them
 * per transaction in shared memory before every other snapshot gets slower.
 */
export const MAX_PUBLISH_BATCH = 32;

/** A message on its way: what is stored, what is delivered, and who waits for the outcome. */
interface Pending {
  input: PublishInput;
  payloadJson: string;
  meta: MessageMeta;
  delivery: Delivery;
  /** When it began to wait for its channel (performance.now()). */
  since: number;
  settle: (outcome: PublishOutcome) => void;
  fail: (err: unknown) => void;
}

/** Thrown inside the publishing transaction when Redis did not take a message: it rolls back. */
class NotDelivered extends Error {
  readonly accepted: boolean[];

  constructor(accepted: boolean[]) {
    super('Redis did not take a message');
    this.accepted = accepted;
  }
}

const notDeliverable = (why: string): PublishOutcome => ({
  ok: false,
  code: 'SERVICE_UNAVAILABLE',
  message: `Messages cannot be delivered right now (${why}); try again shortly`,
});

const tooManyWaiting = notDeliverable('too many publishes are waiting on this instance');

const refusedByPolicy: PublishOutcome = {
  ok: false,
  code: 'UNAUTHORIZED',
  message: 'The realtime policies do not allow this message on this channel',
};

export interface PublisherOptions {
  db: Kysely<Database>;
  fanout: Fanout;
  /** At most this many batches (of any channels) hold a database connection at once. */
  slots: PublishSlots;
  /**
   * How long a message may wait behind its channel's earlier batches; one that waited longer when
   * its batch starts is refused (SERVICE_UNAVAILABLE), as a batch is that finds no place in `slots`.
   */
  maxWaitMs: number;
  maxPayloadBytes: number;
}

/**
 * Publishing: each message is inserted into realtime.messages acting as its caller, so that the
 * publish policies decide, and handed to the fan-out. Publishes on a channel are serialized by a
 * lock on its name, which makes `seq` (history's order) the commit order, and (see Fanout) the order
 * every subscriber sees.
 *
 * The messages of a channel that arrive while one of its batches is being stored wait and are stored
 * together next, in the order they arrived, in one transaction (at most MAX_PUBLISH_BATCH): one lock,
 * one round trip and one commit for all of them, each still checked as its own caller, and refused
 * alone when the policies refuse it. A message alone on an idle channel is stored at once.
 *
 * A message the fan-out cannot carry to every instance is refused (SERVICE_UNAVAILABLE) and not
 * stored: checked before a batch takes a database connection, and with Redis, the transaction
 * commits only once Redis has taken every message of the batch.
 */
export function createPublisher(
  options: PublisherOptions,
): (input: PublishInput, now: Date) => Promise<PublishOutcome> {
  const { maxPayloadBytes } = options;
  const batches = new ChannelBatches<Pending>((_, batch) => {
    // What waited too long behind a busy channel is refused rather than stored late.
    const waitedFrom = performance.now() - options.maxWaitMs;
    for (const pending of batch) if (pending.since < waitedFrom) pending.settle(tooManyWaiting);
    const fresh = batch.filter((pending) => pending.since >= waitedFrom);
    return fresh.length === 0 ? Promise.resolve() : settleBatch(options, fresh);
  }, MAX_PUBLISH_BATCH);
  return (input, now) => {
    const payloadJson = JSON.stringify(input.payload);
    if (Buffer.byteLength(payloadJson) > maxPayloadBytes) {
      const message = `The payload is larger than ${maxPayloadBytes} bytes`;
      return Promise.resolve({ ok: false, code: 'PAYLOAD_TOO_LARGE', message });
    }
    const meta: MessageMeta = {
      channel: input.channel,
      messageId: randomUUID(),
      senderType: 'user',
      senderId: input.senderId === undefined ? (input.userId ?? null) : input.senderId,
      timestamp: now.toISOString(),
    };
    const delivery: Delivery = { channel: input.channel, event: input.event, body: { ...input.payload, meta } };
    return new Promise((settle, fail) => {
      batches.add(input.channel, { input, payloadJson, meta, delivery, since: performance.now(), settle, fail });
    });
  };
}

/**
 * Stores and delivers a batch and gives each message its outcome. An error that another try could
 * get past (the database away, a lock not had in time) fails them all; any other error may be one
 * message's doing, so each is then tried alone and only that one fails.
 */
async function settleBatch(options: PublisherOptions, batch: Pending[]): Promise<void> {
  try {
    const outcomes = await publishBatch(options, batch);
    for (const [i, pending] of batch.entries()) pending.settle(outcomes[i] as PublishOutcome);
  } catch (err) {
    if (batch.length > 1 && !isRetryable(err)) {
      for (const pending of batch) await settleBatch(options, [pending]);
      return;
    }
    for (const pending of batch) pending.fail(err);
  }
}

async function publishBatch(options: PublisherOptions, batch: Pending[]): Promise<PublishOutcome[]> {
  const { db, fanout, slots } = options;
  const channel = (batch[0] as Pending).input.channel;
  const all = (outcome: PublishOutcome) => batch.map(() => outcome);
  /** realtime.publish_as_callers (src/db/sql/realtime.sql): one statement, one round trip. */
  const publishStatement = () => {
    const notifications = batch.map((p) => fanout.notification(p.delivery));
    const notifyChannel = notifications.find((n) => n !== undefined)?.channel ?? null;
    const notifies = notifyChannel === null ? null : notifications.map((n) => n?.payload ?? null);
    return sql<{ accepted: boolean[] }>`
    select realtime.publish_as_callers(
      ${channel}, ${batch.map((p) => p.input.userId ?? null)}::uuid[], ${batch.map((p) => p.meta.messageId)}::uuid[],
      ${batch.map((p) => p.input.event)}::text[], ${`[${batch.map((p) => p.payloadJson).join(',')}]`}::jsonb,
      ${batch.map((p) => p.meta.senderId)}::uuid[], ${batch.map((p) => p.meta.timestamp)}::text[]::timestamptz[], true,
      ${notifyChannel}, ${notifies}::text[]
    ) as accepted`;
  };
  const before = fanout.unavailable();
  if (before !== undefined) return all(notDeliverable(before));
  let accepted: boolean[];
  try {
    const ran = await slots.run(async () => {
      // It may have gone while this batch waited for a place.
      const why = fanout.unavailable();
      if (why !== undefined) return why;
      if (fanout.ordering === 'publish-under-lock') {
        // The channel's lock is the transaction's: held until Redis has every message and it commits.
        return db.transaction().execute(async (trx) => {
          const stored = acceptedOf((await publishStatement().execute(trx)).rows);
          // One connection carries them to Redis in this order, which is the order of delivery.
          const taken = await Promise.all(batch.filter((_, i) => stored[i]).map((p) => fanout.deliver(p.delivery)));
          if (!taken.every(Boolean)) throw new NotDelivered(stored);
          return stored;
        });
      }
      // Alone, the statement is its own transaction: the lock is held until its commit.
      return acceptedOf((await publishStatement().execute(db)).rows);
    });
    if (ran === undefined) return all(tooManyWaiting);
    if (typeof ran.value === 'string') return all(notDeliverable(ran.value));
    accepted = ran.value;
  } catch (err) {
    if (err instanceof NotDelivered) {
      return batch.map((_, i) =>
        err.accepted[i] ? notDeliverable('Redis did not take the message') : refusedByPolicy,
      );
    }
    throw err;
  }
  // After the commit, without a connection: emitted in order (`local`), or heard back (`notify`).
  const delivered =
    fanout.ordering === 'publish-under-lock'
      ? accepted
      : await Promise.all(batch.map((p, i) => (accepted[i] ? fanout.deliver(p.delivery) : false)));
  const lost = batch.filter((_, i) => accepted[i] && !delivered[i]).map((p) => p.meta.messageId);
  if (lost.length > 0) {
    // Not known to have reached anyone: taken out of history again (best effort) and refused.
    await db
      .deleteFrom('realtime.messages')
      .where('id', 'in', lost)
      .execute()
      .catch(() => {});
  }
  return batch.map((p, i) => {
    if (!accepted[i]) return refusedByPolicy;
    if (!delivered[i]) return notDeliverable('the notification did not come back');
    return { ok: true, meta: p.meta };
  });
}

const acceptedOf = (rows: Array<{ accepted: boolean[] }>): boolean[] => rows[0]?.accepted ?? [];
