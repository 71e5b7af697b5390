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
 * trigger-kept counter, and its page is found on the (created_at, id) index before being joined
 * to the full rows (a deferred join), so that deep offsets skip index entries, not rows.
 */
export async function listUsersPage(db: Kysely<Database>, q: DirectoryQuery): Promise<DirectoryPage> {
  const result = await userDirectoryQuery(q).execute(db);
  const first = result.rows[0];
  return {
    total: Number(first?.total ?? 0),
    rows: result.rows.filter((r) => r.id !== null),
  };
}

export interface DirectoryQuery {
  offset: number;
  limit: number;
  search: string | undefined;
}

/** The single statement behind listUsersPage (exported so that benchmarks can EXPLAIN it). */
export function userDirectoryQuery(q: DirectoryQuery) {
  const columns = sql`users.*,
      array(select p.provider from user_providers p where p.user_id = users.id order by p.provider)::text[] as providers`;
  if (q.search === undefined) {
    return sql<UserRow & { total: number | string; id: string | null }>`
      with page as (
        select id, created_at from users
        order by created_at desc, id desc
        limit ${q.limit} offset ${q.offset}
      )
      select t.total, ${columns}
      from (select n as total from user_count) t
      left join page on true
      left join users on users.id = page.id
      order by page.created_at desc, page.id desc
    `;
  }
  // Filtered: the matches are found once (candidates from a search index, then the exact
  // condition) and both counted and paged.
  const pattern = likeContains(q.search);
  const length = [...q.search].length;
  const candidates =
    length >= 4
      ? // every four-character gram of the term appears in the email's or the name's grams
        sql`(directory_grams(email) || directory_grams(coalesce(profile->>'name', ''))) @> directory_grams(${q.search}) and`
      : length === 3
        ? sql`(email || ' ' || coalesce(profile->>'name', '')) ilike ${pattern} and`
        : // under three characters there is nothing to look up: scanning beats an index
          sql``;
  return sql<UserRow & { total: number | string; id: string | null }>`
    with matches as materialized (
      select id, created_at from users
      where ${candidates} (email ilike ${pattern} or (profile->>'name') ilike ${pattern})
    ), page as (
      select id, created_at from matches
      order by created_at desc, id desc
      limit ${q.limit} offset ${q.offset}
    )
    select t.total, ${columns}
    from (select count(*) as total from matches) t
    left join page on true
    left join users on users.id = page.id
    order by page.created_at desc, page.id desc
  `;
}
