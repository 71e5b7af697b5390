import { type Kysely, sql } from 'kysely';
import type { Database } from '../db/schema.ts';

/** A caller and a channel: may this user (undefined: anonymous) subscribe to this channel? */
export interface SubscriptionQuestion {
  userId: string | undefined;
  channel: string;
}

/**
 * For each question, whether the subscribe policies allow it, in order: realtime.subscribable
 * (migration 0013) acts as each caller in turn and SELECTs from realtime.channels. One statement
 * and one round trip for any number of questions.
 */
export async function subscribable(
  db: Kysely<Database>,
  questions: readonly SubscriptionQuestion[],
): Promise<boolean[]> {
  if (questions.length === 0) return [];
  const userIds = questions.map((q) => q.userId ?? null);
  const channels = questions.map((q) => q.channel);
  const result = await sql<{ ordinal: number; allowed: boolean }>`
    select ordinal, allowed from realtime.subscribable(${userIds}::uuid[], ${channels}::text[])
  `.execute(db);
  const answers = new Array<boolean>(questions.length).fill(false);
  for (const row of result.rows) answers[row.ordinal - 1] = row.allowed;
  return answers;
}

/** Whether the caller may subscribe to `channel`: the subscribe policies decide, and nothing else. */
export async function maySubscribe(
  db: Kysely<Database>,
  userId: string | undefined,
  channel: string,
): Promise<boolean> {
  const [allowed] = await subscribable(db, [{ userId, channel }]);
  return allowed === true;
}
