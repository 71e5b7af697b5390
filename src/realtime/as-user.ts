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
 * Runs `work` in a transaction acting as the caller: realtime.act_as_caller (src/db/sql/realtime.sql)
 * sets what auth.uid(), auth.role() and realtime.channel_name() read, then the role. Row-level
 * security then applies to every statement of `work`, and all of it ends with the transaction.
 */
export async function asRealtimeCaller<T>(
  db: Kysely<Database>,
  caller: RealtimeCaller,
  work: (trx: Transaction<Database>) => Promise<T>,
): Promise<T> {
  return db.transaction().execute(async (trx) => {
    await sql`select realtime.act_as_caller(${caller.userId ?? null}::uuid, ${caller.channel})`.execute(trx);
    return work(trx);
  });
}
