import { type Kysely, type RawBuilder, sql, type Transaction } from 'kysely';
import type { Database } from '../db/schema.ts';

/** Who is acting on the realtime tables: a signed-in user (or nobody), on a channel. */
export interface RealtimeCaller {
  /** The user's id; undefined for an anonymous caller (role anon). */
  userId: string | undefined;
  /** The channel subscribed to or published on, as realtime.channel_name() returns it. */
  channel: string;
}

/**
 * The select-list that makes a transaction act as the caller: the transaction-local settings read by
 * auth.uid(), auth.role() and realtime.channel_name(), then the role itself (set_config('role') is SET
 * LOCAL ROLE). Further expressions may follow in the same statement; they run as the caller.
 * realtime.publish_as_caller (migration 0007) sets the same four in SQL for publishes: change both together.
 */
export function callerSettings(caller: RealtimeCaller): RawBuilder<unknown> {
  const role = caller.userId === undefined ? 'anon' : 'authenticated';
  return sql`set_config('request.user_id', ${caller.userId ?? ''}, true),
    set_config('request.role', ${role}, true),
    set_config('realtime.channel_name', ${caller.channel}, true),
    set_config('role', ${role}, true)`;
}

/**
 * Runs `work` in a transaction "as" the caller (see callerSettings). Row-level security then applies
 * to every statement of `work`, and all of it ends with the transaction.
 */
export async function asRealtimeCaller<T>(
  db: Kysely<Database>,
  caller: RealtimeCaller,
  work: (trx: Transaction<Database>) => Promise<T>,
): Promise<T> {
  return db.transaction().execute(async (trx) => {
    await sql`select ${callerSettings(caller)}`.execute(trx);
    return work(trx);
  });
}
