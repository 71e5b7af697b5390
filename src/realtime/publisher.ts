import { randomUUID } from 'node:crypto';
import { type Kysely, sql } from 'kysely';
import type { Database } from '../db/schema.ts';
import type { Delivery, Fanout } from './fanout.ts';
import type { MessageMeta } from './protocol.ts';

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
  | { ok: false; code: 'UNAUTHORIZED' | 'PAYLOAD_TOO_LARGE'; message: string };

/**
 * Row-level security refusing the row (SQLSTATE insufficient_privilege with its own message). Other
 * privilege errors (a missing grant, a role the service may not take) are misconfigurations, not
 * refusals: they go up as errors and are logged.
 */
const isPolicyRefusal = (err: unknown): boolean =>
  (err as { code?: string }).code === '42501' && /row-level security/.test((err as Error).message);

/**
 * Publishes one message: inserted into realtime.messages acting as the caller, so that the publish
 * policies decide, then handed to the fan-out. Publishes on a channel are serialized by a lock on its
 * name, which makes `seq` (history's order) the commit order, and (see Fanout) the order every
 * subscriber sees.
 */
export async function publishMessage(
  db: Kysely<Database>,
  fanout: Fanout,
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
  const notification = fanout.notification(delivery);
  /** realtime.publish_as_caller (migration 0007): one statement, one round trip. */
  const publishStatement = (lock: boolean) => sql`
    select realtime.publish_as_caller(
      ${input.userId ?? null}::uuid, ${input.channel}, ${meta.messageId}::uuid, ${input.event},
      ${payloadJson}::jsonb, ${meta.senderId}::uuid, ${now}::timestamptz, ${lock},
      ${notification?.channel ?? null}, ${notification?.payload ?? null}
    )`;
  try {
    if (fanout.ordering === 'publish-under-lock') {
      // A session lock, held past the commit until the message is on its way.
      const lockKey = sql`hashtextextended(${`realtime:${input.channel}`}, 0)`;
      await db.connection().execute(async (conn) => {
        await sql`select pg_advisory_lock(${lockKey})`.execute(conn);
        try {
          await publishStatement(false).execute(conn);
          await fanout.afterCommit(delivery);
        } finally {
          await sql`select pg_advisory_unlock(${lockKey})`.execute(conn);
        }
      });
    } else {
      // Alone, the statement is its own transaction: the lock is held until its commit.
      await publishStatement(true).execute(db);
      await fanout.afterCommit(delivery);
    }
  } catch (err) {
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
