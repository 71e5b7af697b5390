import { randomUUID } from 'node:crypto';
import { type Kysely, sql } from 'kysely';
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
 * The messages of a channel that arrive while one of its batches is being stored wait, and those of
 * one caller are stored together next, in the order they arrived, in one transaction (at most
 * MAX_PUBLISH_BATCH): one lock, one round trip and one commit for all of them, each still checked by
 * the policies, and refused or failed alone when the policies refuse it or its insert meets an
 * error. A message alone on an idle channel is stored at once. A socket's message is not stored when
 * the socket is no longer subscribed to the channel once its batch holds a database connection.
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
  const batches = new ChannelBatches<Pending>(
    (_, batch) => {
      // What waited too long behind a busy channel is refused rather than stored late.
      const waitedFrom = performance.now() - options.maxWaitMs;
      for (const pending of batch) if (pending.since < waitedFrom) pending.settle(tooManyWaiting);
      const fresh = batch.filter((pending) => pending.since >= waitedFrom);
      return fresh.length === 0 ? Promise.resolve() : settleBatch(options, fresh);
    },
    MAX_PUBLISH_BATCH,
    // One caller's messages only in one transaction: whatever a policy leaves in the transaction
    // (a setting, a temporary table) can never reach another caller's check.
    (pending) => pending.input.userId ?? '',
  );
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
 * Stores and delivers a batch and gives each message its outcome. An error of one message's making
 * fails that message alone (realtime.publish_as_callers answers it); an error of the whole statement
 * or transaction fails them all, and none is tried again (with Redis, subscribers may have them).
 */
async function settleBatch(options: PublisherOptions, batch: Pending[]): Promise<void> {
  let outcomes: Array<PublishOutcome | MessageNotStored>;
  try {
    outcomes = await publishBatch(options, batch);
  } catch (err) {
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
  const all = (outcome: PublishOutcome) => batch.map(() => outcome);
  const before = fanout.unavailable();
  if (before !== undefined) return all(notDeliverable(before));
  const ran = await slots.run(async () => {
    // It may have gone while this batch waited for a place, and so may a socket's subscription.
    const why = fanout.unavailable();
    if (why !== undefined) return why;
    const sending = batch.filter((p) => p.input.stillSubscribed?.() !== false);
    return { sending, ...(sending.length === 0 ? { outcomes: [], delivered: [] } : await store(options, sending)) };
  });
  if (ran === undefined) return all(tooManyWaiting);
  if (typeof ran.value === 'string') return all(notDeliverable(ran.value));
  const { sending, outcomes } = ran.value;
  // After the commit, without a connection: emitted in order (`local`), or heard back (`notify`).
  const delivered =
    ran.value.delivered ??
    (await Promise.all(sending.map((p, i) => (outcomes[i] === 'stored' ? fanout.deliver(p.delivery) : false))));
  if (ran.value.delivered === undefined) {
    const lost = sending.filter((_, i) => outcomes[i] === 'stored' && !delivered[i]).map((p) => p.meta.messageId);
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
  const answers = new Map<Pending, PublishOutcome | MessageNotStored>();
  for (const [i, p] of sending.entries()) {
    const outcome = outcomes[i] as StoreOutcome;
    if (outcome === 'refused') answers.set(p, refusedByPolicy);
    else if (outcome !== 'stored') answers.set(p, new MessageNotStored(outcome));
    else if (!delivered[i]) answers.set(p, notDeliverable(why));
    else answers.set(p, { ok: true, meta: p.meta });
  }
  return batch.map((p) => answers.get(p) ?? notSubscribed);
}

/**
 * Stores the messages in one statement (realtime.publish_as_callers, src/db/sql/realtime.sql): its
 * own transaction; with Redis, a transaction that commits once Redis has answered for each message
 * (`delivered`: which it took). Called holding a place in the slots.
 */
async function store(
  options: PublisherOptions,
  batch: Pending[],
): Promise<{ outcomes: StoreOutcome[]; delivered: boolean[] | undefined }> {
  const { db, fanout } = options;
  const channel = (batch[0] as Pending).input.channel;
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
    if (outcomes.length !== batch.length) {
      throw new Error('realtime.publish_as_callers answered for another number of messages');
    }
    return outcomes;
  };
  if (fanout.ordering !== 'publish-under-lock') {
    // Alone, the statement is its own transaction: the lock is held until its commit.
    return { outcomes: stored((await publishStatement().execute(db)).rows), delivered: undefined };
  }
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
