import { sql } from 'kysely';
import type { Executor } from '../schema.ts';

/** A caller and a channel: may this user (undefined: anonymous) subscribe to this channel? */
export interface SubscriptionQuestion {
  userId: string | undefined;
  channel: string;
}

/**
 * For each question, whether the subscribe policies allow it, in order: realtime.subscribable
 * (src/db/sql/realtime.sql) acts as each caller in turn (realtime.act_as_caller) and SELECTs from
 * realtime.channels. One statement and one round trip for any number of questions.
 */
export async function subscribable(db: Executor, questions: readonly SubscriptionQuestion[]): Promise<boolean[]> {
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
