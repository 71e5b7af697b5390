import { randomUUID } from 'node:crypto';
import { type Kysely, sql } from 'kysely';
import { isRetryable } from '../db/errors.ts';
import type { Database } from '../db/schema.ts';
import { plainUuid } from '../uuid.ts';
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
  /**
   * For a socket's publish: whether the socket is still subscribed to the channel, asked again when
   * the message's batch starts (a session ended or a re-check may have ended the subscription
   * while it waited).
   */
  stillSubscribed?: () => boolean;
}

export type PublishOutcome =
  | { ok: true; meta: MessageMeta }
  | {
      ok: false;
      code: 'UNAUTHORIZED' | 'NOT_SUBSCRIBED' | 'PAYLOAD_TOO_LARGE' | 'SERVICE_UNAVAILABLE';
      message: string;
    };

/**
 * The most messages of one channel stored in one transaction. Each stored one holds a
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

/** What realtime.publish_as_callers answers for one message: stored, refused, or an error's SQLSTATE. */
type StoreOutcome = 'stored' | 'refused' | (string & {});

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

const notSubscribed: PublishOutcome = {
  ok: false,
  code: 'NOT_SUBSCRIBED',
  message: 'Subscribe to the channel before publishing on it',
};

/** A message the database refused for an error of its own making: thrown to its publisher alone. */
class MessageNotStored extends Error {
  readonly code: string;

  constructor(code: string) {
    super(`The database refused a value of this message (SQLSTATE ${code})`);
    this.code = code;
  }
}

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
 * alone when the policies refuse it or the database cannot take one of its values. A message alone
 * on an idle channel is stored at once.
 *
 * A message the fan-out cannot carry to every instance is refused (SERVICE_UNAVAILABLE) and not
 * stored: checked before a batch takes a database connection; with Redis, the messages Redis did not
 * take are taken out of the transaction again before it commits; with notifications, one that did
 * not come back is deleted again.
 */
export function createPublisher(
  options: PublisherOptions,
): (input: PublishInput, now: Date) => Promise<PublishOutcome> {
  const { maxPayloadBytes } = options;
  const batches = new ChannelBatches<Pending>((_, batch) => {
    // What waited too long behind a busy channel is refused rather than stored late, and what a
    // socket no longer subscribed to the channel sent is not stored at all.
    const waitedFrom = performance.now() - options.maxWaitMs;
    const ready: Pending[] = [];
    for (const pending of batch) {
      if (pending.since < waitedFrom) pending.settle(tooManyWaiting);
      else if (pending.input.stillSubscribed?.() === false) pending.settle(notSubscribed);
      else ready.push(pending);
    }
    return ready.length === 0 ? Promise.resolve() : settleBatch(options, ready);
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
      senderId: input.senderId === undefined ? (input.userId ?? null) : input.senderId && plainUuid(input.senderId),
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
 * get past (the database away, a lock not had in time) fails them all; any other error of the whole
 * statement may still be one message's doing, so each is then tried alone and only that one fails.
 */
async function settleBatch(options: PublisherOptions, batch: Pending[]): Promise<void> {
  let outcomes: Array<PublishOutcome | MessageNotStored>;
  try {
    outcomes = await publishBatch(options, batch);
  } catch (err) {
    if (batch.length > 1 && !isRetryable(err)) {
      for (const pending of batch) await settleBatch(options, [pending]);
      return;
    }
    for (const pending of batch) pending.fail(err);
    return;
  }
  for (const [i, pending] of batch.entries()) {
    const outcome = outcomes[i] as PublishOutcome | MessageNotStored;
    if (outcome instanceof MessageNotStored) pending.fail(outcome);
    else pending.settle(outcome);
  }
}

async function publishBatch(
  options: PublisherOptions,
  batch: Pending[],
): Promise<Array<PublishOutcome | MessageNotStored>> {
  const { db, fanout, slots } = options;
  const channel = (batch[0] as Pending).input.channel;
  const all = (outcome: PublishOutcome) => batch.map(() => outcome);
  /** realtime.publish_as_callers (src/db/sql/realtime.sql): one statement, one round trip. */
  const publishStatement = () => {
    const notifications = batch.map((p) => fanout.notification(p.delivery));
    const notifyChannel = notifications.find((n) => n !== undefined)?.channel ?? null;
    const notifies = notifyChannel === null ? null : notifications.map((n) => n?.payload ?? null);
    return sql<{ outcomes: StoreOutcome[] }>`
    select realtime.publish_as_callers(
      ${channel}, ${batch.map((p) => p.input.userId ?? null)}::uuid[], ${batch.map((p) => p.meta.messageId)}::uuid[],
      ${batch.map((p) => p.input.event)}::text[], ${`[${batch.map((p) => p.payloadJson).join(',')}]`}::jsonb,
      ${batch.map((p) => p.meta.senderId)}::text[], ${batch.map((p) => p.meta.timestamp)}::text[], true,
      ${notifyChannel}, ${notifies}::text[]
    ) as outcomes`;
  };
  const stored = (rows: Array<{ outcomes: StoreOutcome[] }>) => {
    const outcomes = rows[0]?.outcomes ?? [];
    if (outcomes.length !== batch.length)
      throw new Error('realtime.publish_as_callers answered for another number of messages');
    return outcomes;
  };
  const before = fanout.unavailable();
  if (before !== undefined) return all(notDeliverable(before));
  const ran = await slots.run(async () => {
    // It may have gone while this batch waited for a place.
    const why = fanout.unavailable();
    if (why !== undefined) return why;
    if (fanout.ordering === 'publish-under-lock') {
      // The channel's lock is the transaction's: held until Redis has answered for every message.
      return db.transaction().execute(async (trx) => {
        const outcomes = stored((await publishStatement().execute(trx)).rows);
        // One connection carries them to Redis in this order, which is the order of delivery.
        const taken = await Promise.all(
          batch.map((p, i) => (outcomes[i] === 'stored' ? fanout.deliver(p.delivery) : false)),
        );
        const notTaken = batch.filter((_, i) => outcomes[i] === 'stored' && !taken[i]).map((p) => p.meta.messageId);
        // Those Redis did not take are taken out again; those it took (subscribers may have them) stay.
        if (notTaken.length > 0) await trx.deleteFrom('realtime.messages').where('id', 'in', notTaken).execute();
        return { outcomes, delivered: taken };
      });
    }
    // Alone, the statement is its own transaction: the lock is held until its commit.
    const outcomes = stored((await publishStatement().execute(db)).rows);
    return { outcomes, delivered: undefined };
  });
  if (ran === undefined) return all(tooManyWaiting);
  if (typeof ran.value === 'string') return all(notDeliverable(ran.value));
  const { outcomes } = ran.value;
  // After the commit, without a connection: emitted in order (`local`), or heard back (`notify`).
  const delivered =
    ran.value.delivered ??
    (await Promise.all(batch.map((p, i) => (outcomes[i] === 'stored' ? fanout.deliver(p.delivery) : false))));
  if (ran.value.delivered === undefined) {
    const lost = batch.filter((_, i) => outcomes[i] === 'stored' && !delivered[i]).map((p) => p.meta.messageId);
    if (lost.length > 0) {
      // Not known to have reached anyone: taken out of history again (best effort) and refused.
      await db
        .deleteFrom('realtime.messages')
        .where('id', 'in', lost)
        .execute()
        .catch(() => {});
    }
  }
  const why =
    fanout.ordering === 'publish-under-lock' ? 'Redis did not take the message' : 'the notification did not come back';
  return batch.map((p, i) => {
    const outcome = outcomes[i] as StoreOutcome;
    if (outcome === 'refused') return refusedByPolicy;
    if (outcome !== 'stored') return new MessageNotStored(outcome);
    if (!delivered[i]) return notDeliverable(why);
    return { ok: true, meta: p.meta };
  });
}
