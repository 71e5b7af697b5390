import { sql } from 'kysely';
import type { DatabaseHandle } from '../../src/db/database.ts';

/** What an embedded database holds, in a line: its accounts, live sessions and realtime messages. */
export async function contentsLine(database: DatabaseHandle): Promise<string> {
  const count = async (query: ReturnType<typeof sql<{ n: number }>>, one: string, many: string) => {
    const n = (await query.execute(database.db)).rows[0]?.n ?? 0;
    return `${n.toLocaleString('en-US')} ${n === 1 ? one : many}`;
  };
  return [
    await count(sql<{ n: number }>`select count(*)::int as n from users`, 'account', 'accounts'),
    await count(
      sql<{ n: number }>`select count(*)::int as n from sessions where revoked_at is null`,
      'live session',
      'live sessions',
    ),
    await count(
      sql<{ n: number }>`select count(*)::int as n from realtime.messages`,
      'realtime message',
      'realtime messages',
    ),
  ].join(', ');
}
