import { randomUUID } from 'node:crypto';
import { type Kysely, sql } from 'kysely';
import type { Database } from '../db/schema.ts';
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

/** Thrown inside the publishing transaction when Redis did not take the message: it rolls back. */
class NotDelivered extends Error {}

const notDeliverable = (why: string): PublishOutcome => ({
  ok: false,
  code: 'SERVICE_UNAVAILABLE',
  message: `Messages cannot be delivered right now (${why}); try again shortly`,
});

/**
 * Row-level security refusing the row (SQLSTATE insufficient_privilege with its own message). Other
 * privilege errors (a missing grant, a role the service may not take) are misconfigurations, not
 * refusals: they go up as errors and are logged.
 */
const isPolicyRefusal = (err: unknown): boolean =>
  (err as { code?: string }).code === '42501' && /row-level security/.test((err as Error).message);

/**
 * Publishes one message: inserted into realtime.messages acting as the caller, so that the publish
 * policies decide, and handed to the fan-out. Publishes on a channel are serialized by a lock on its
 * name, which makes `seq` (history's order) the commit order, and (see Fanout) the order every
 * subscriber sees. A message the fan-out cannot carry to every instance is refused
 * (SERVICE_UNAVAILABLE) and not stored: checked before it takes a database connection, and with
 * Redis, the transaction commits only once Redis has taken it. At most `slots` publishes hold a
 * database connection at once.
 */
export async function publishMessage(
  db: Kysely<Database>,
  fanout: Fanout,
  slots: PublishSlots,
  input: PublishInput,
  now: Date,
  maxPayloadBytes: number,
): Promise<PublishOutcome> {
  const payloadJson = JSON.stringify(input.payload);
  if (Buffer.byteLength(payloadJson) > maxPayloadBytes) {
    return { ok: false, code: 'PAYLOAD_TOO_LARGE', message: `The payload is larger than ${maxPayloadBytes} bytes` };
  }
  const meta: MessageMeta = {
    channel: input.channel,
    messageId: randomUUID(),
    senderType: 'user',
    senderId: input.senderId === undefined ? (input.userId ?? null) : input.senderId,
    timestamp: now.toISOString(),
  };
  const delivery: Delivery = { channel: input.channel, event: input.event, body: { ...input.payload, meta } };
  /** realtime.publish_as_caller (src/db/sql/realtime.sql): one statement, one round trip. */
  const publishStatement = () => {
    const notification = fanout.notification(delivery);
    return sql`
    select realtime.publish_as_caller(
      ${input.userId ?? null}::uuid, ${input.channel}, ${meta.messageId}::uuid, ${input.event},
      ${payloadJson}::jsonb, ${meta.senderId}::uuid, ${now}::timestamptz, true,
      ${notification?.channel ?? null}, ${notification?.payload ?? null}
    )`;
  };
  const before = fanout.unavailable();
  if (before !== undefined) return notDeliverable(before);
  try {
    const ran = await slots.run(async () => {
      // It may have gone while this publish waited for a place.
      const why = fanout.unavailable();
      if (why !== undefined) return notDeliverable(why);
      if (fanout.ordering === 'publish-under-lock') {
        // The channel's lock is the transaction's: held until Redis has the message and it commits.
        await db.transaction().execute(async (trx) => {
          await publishStatement().execute(trx);
          if (!(await fanout.deliver(delivery))) throw new NotDelivered();
        });
      } else {
        // Alone, the statement is its own transaction: the lock is held until its commit.
        await publishStatement().execute(db);
      }
      return undefined;
    });
    if (ran === undefined) return notDeliverable('too many publishes are waiting on this instance');
    if (ran.value !== undefined) return ran.value;
    // After the commit, without a connection: emitted (`local`), or heard back (`notify`).
    if (fanout.ordering !== 'publish-under-lock' && !(await fanout.deliver(delivery))) {
      // Not known to have reached anyone: taken out of history again (best effort) and refused.
      await db
        .deleteFrom('realtime.messages')
        .where('id', '=', meta.messageId)
        .execute()
        .catch(() => {});
      return notDeliverable('the notification did not come back');
    }
  } catch (err) {
    if (err instanceof NotDelivered) return notDeliverable('Redis did not take the message');
    if (isPolicyRefusal(err)) {
      return {
        ok: false,
        code: 'UNAUTHORIZED',
        message: 'The realtime policies do not allow this message on this channel',
      };
    }
    throw err;
  }
  return { ok: true, meta };
}
