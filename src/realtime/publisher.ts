import { randomUUID } from 'node:crypto';
import { type Kysely, sql, type Transaction } from 'kysely';
import type { Database } from '../db/schema.ts';
import { callerSettings } from './as-user.ts';
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

/** A publish waits at most this long for the channel's lock (then 503: the database is overloaded). */
const LOCK_TIMEOUT = '5s';

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
  const caller = { userId: input.userId, channel: input.channel };
  const lockKey = sql`hashtextextended(${`realtime:${input.channel}`}, 0)`;
  const insert = (trx: Transaction<Database>) =>
    trx
      .insertInto('realtime.messages')
      .values({
        id: meta.messageId,
        channel_name: input.channel,
        event: input.event,
        payload: sql`${payloadJson}::jsonb`,
        sender_id: meta.senderId,
        created_at: now,
      })
      .execute();
  try {
    if (fanout.ordering === 'publish-under-lock') {
      // A session lock, held past the commit until the message is on its way.
      await db.connection().execute(async (conn) => {
        await sql`select pg_advisory_lock(${lockKey})`.execute(conn);
        try {
          await conn.transaction().execute(async (trx) => {
            await sql`select ${callerSettings(caller)}`.execute(trx);
            await insert(trx);
          });
          await fanout.afterCommit(delivery);
        } finally {
          await sql`select pg_advisory_unlock(${lockKey})`.execute(conn);
        }
      });
    } else {
      const notify = fanout.inTransaction(delivery);
      await db.transaction().execute(async (trx) => {
        await sql`
          select set_config('lock_timeout', ${LOCK_TIMEOUT}, true), ${callerSettings(caller)},
            pg_advisory_xact_lock(${lockKey})
            ${notify === undefined ? sql`` : sql`, ${notify}`}
        `.execute(trx);
        await insert(trx);
      });
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
