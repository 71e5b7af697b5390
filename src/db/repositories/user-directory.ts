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
 * trigger-kept counter. An unfiltered page is found on the (created_at, id) index before being
 * joined to the full rows (a deferred join); a deep one starts from the bookmark of the chunk that
 * holds its offset (user_directory_chunks, kept exact by the same triggers, see migration 0027),
 * so that it skips fewer than 2 × 1,000 index entries whatever its depth.
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

/**
 * From this offset on, an unfiltered page starts from a chunk's bookmark: below it, walking the
 * index from the newest user skips no more entries than a chunk's walk (chunks hold at most 2,000).
 */
const CHUNKED_FROM = 2000;

/**
 * The single statement behind listUsersPage (exported so that benchmarks can EXPLAIN it). Rows are
 * joined by a lateral lookup per page entry: a generic plan (prepared statements) does not know the
 * page's size and would otherwise hash-join the whole table.
 */
export function userDirectoryQuery(q: DirectoryQuery) {
  const columns = sql`users.*,
      array(select p.provider from user_providers p where p.user_id = users.id order by p.provider)::text[] as providers`;
  if (q.search === undefined && q.offset >= CHUNKED_FROM) {
    // The chunk holding position `offset` is the first whose running count (newest chunk first)
    // passes it; the page starts that many positions into it, walking from its start key.
    return sql<UserRow & { total: number | string; id: string | null }>`
      with chunks as (
        select start_created_at, start_id, n,
          sum(n) over (order by start_created_at desc, start_id desc) as through
        from user_directory_chunks
      ), bookmark as (
        select start_created_at, start_id, ${q.offset} - (through - n) as skip
        from chunks where through > ${q.offset}
        order by through limit 1
      ), page as (
        select walked.id, walked.created_at from bookmark
        cross join lateral (
          select id, created_at from users
          where (created_at, id) <= (bookmark.start_created_at, bookmark.start_id)
          order by created_at desc, id desc
          limit ${q.limit} offset bookmark.skip
        ) walked
      )
      select (select n from user_count) as total, ${columns}
      from (select) one
      left join page on true
      left join lateral (select * from users where users.id = page.id limit 1) users on true
      order by page.created_at desc, page.id desc
    `;
  }
  if (q.search === undefined) {
    return sql<UserRow & { total: number | string; id: string | null }>`
      with page as (
        select id, created_at from users
        order by created_at desc, id desc
        limit ${q.limit} offset ${q.offset}
      )
      select (select n from user_count) as total, ${columns}
      from (select) one
      left join page on true
      left join lateral (select * from users where users.id = page.id limit 1) users on true
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
