import { type Kysely, sql, type Transaction } from 'kysely';
import type { Database } from '../db/schema.ts';

/** Who is acting on the realtime tables: a signed-in user (or nobody), on a channel. */
export interface RealtimeCaller {
  /** The user's id; undefined for an anonymous caller (role anon). */
  userId: string | undefined;
  /** The channel subscribed to or published on, as realtime.channel_name() returns it. */
  channel: string;
}

/**
 * Runs `work` in a transaction "as" the caller: SET LOCAL ROLE authenticated (or anon) and the
 * transaction-local settings that auth.uid(), auth.role() and realtime.channel_name() read. Row-level
 * security then applies to every statement of `work`, and all of it ends with the transaction.
 */
export async function asRealtimeCaller<T>(
  db: Kysely<Database>,
  caller: RealtimeCaller,
  work: (trx: Transaction<Database>) => Promise<T>,
): Promise<T> {
  const role = caller.userId === undefined ? 'anon' : 'authenticated';
  return db.transaction().execute(async (trx) => {
    await sql`
      select set_config('request.user_id', ${caller.userId ?? ''}, true),
        set_config('request.role', ${role}, true),
        set_config('realtime.channel_name', ${caller.channel}, true)
    `.execute(trx);
    await sql`set local role ${sql.id(role)}`.execute(trx);
    return work(trx);
  });
}
