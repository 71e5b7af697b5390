import { type Kysely, sql } from 'kysely';
import type { Database } from '../db/schema.ts';
import { asRealtimeCaller } from './as-user.ts';

/**
 * Whether the caller may subscribe to `channel`: acting as the caller, a SELECT of realtime.channels
 * finds a row. The subscribe policies decide, and nothing else.
 */
export async function maySubscribe(
  db: Kysely<Database>,
  userId: string | undefined,
  channel: string,
): Promise<boolean> {
  const rows = await asRealtimeCaller(db, { userId, channel }, (trx) =>
    sql<{ found: number }>`select 1 as found from realtime.channels limit 1`.execute(trx),
  );
  return rows.rows.length > 0;
}
