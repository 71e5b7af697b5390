import { type Kysely, sql } from 'kysely';
import type { Database } from '../schema.ts';
import type { UserRow } from './users.ts';

export interface DirectoryPage {
  rows: UserRow[];
  total: number;
}

/** `%`, `_` and `\` match themselves in ILIKE once escaped with a backslash (the default escape). */
function likeContains(text: string): string {
  return `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

/**
 * One page of users, newest first (id breaks ties), with the exact number of matching users.
 * Page and total come from one statement, hence one snapshot. The unfiltered total is the
 * trigger-kept counter; a filtered one counts through the trigram indexes. The page is found
 * on the (created_at, id) index first and only then joined to the full rows (a deferred join),
 * so that deep offsets skip index entries rather than whole rows.
 */
export async function listUsersPage(
  db: Kysely<Database>,
  q: { offset: number; limit: number; search: string | undefined },
): Promise<DirectoryPage> {
  const pattern = q.search === undefined ? undefined : likeContains(q.search);
  const filter =
    pattern === undefined ? sql`true` : sql`(u.email ilike ${pattern} or (u.profile->>'name') ilike ${pattern})`;
  const total =
    pattern === undefined ? sql`(select n from user_count)` : sql`(select count(*) from users u where ${filter})`;
  const result = await sql<UserRow & { total: number | string; id: string | null }>`
    with page as (
      select u.id, u.created_at from users u
      where ${filter}
      order by u.created_at desc, u.id desc
      limit ${q.limit} offset ${q.offset}
    )
    select t.total, users.*,
      array(select p.provider from user_providers p where p.user_id = users.id order by p.provider)::text[] as providers
    from (select ${total} as total) t
    left join page on true
    left join users on users.id = page.id
    order by page.created_at desc, page.id desc
  `.execute(db);
  const first = result.rows[0];
  return {
    total: Number(first?.total ?? 0),
    rows: result.rows.filter((r) => r.id !== null),
  };
}
