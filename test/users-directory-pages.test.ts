// Deep pages of the user directory (GET /api/auth/users without a search) start from the bookmark of
// the chunk that holds their offset (table user_directory_chunks, kept by the triggers of migration
// 0027). They must stay exact, the same as a plain `offset` query, whatever happened to the users:
// bulk inserts in one statement, single inserts, deletes, changed creation times, concurrent sign-ups;
// and a deep page must walk no more than a chunk's worth of index entries.
import { type Kysely, sql } from 'kysely';
import t, { type Test } from 'tap';
import { listUsersPage, userDirectoryQuery } from '../src/db/repositories/user-directory.ts';
import type { Database } from '../src/db/schema.ts';
import { buildTestApp } from './helpers/app.ts';
import { usingPostgres } from './helpers/database.ts';
import { accessTokenFor } from './helpers/tokens.ts';

/** Inserts `count` users in one statement; creation times repeat (ties are broken by id). */
async function insertUsers(db: Kysely<Database>, count: number, label: string): Promise<void> {
  await sql`
    insert into users (email, created_at)
    select ${label} || '-' || i || '@pages.example', timestamptz '2026-01-01' + ((i * 7919) % 997) * interval '1 minute'
    from generate_series(1, ${count}) as i
  `.execute(db);
}

/** The ids of a page as a plain offset query finds them, and the number of users. */
async function plainPage(db: Kysely<Database>, offset: number, limit: number) {
  const { rows } = await sql<{ id: string }>`
    select id from users order by created_at desc, id desc limit ${limit} offset ${offset}`.execute(db);
  const { rows: count } = await sql<{ n: number }>`select count(*)::int as n from users`.execute(db);
  return { ids: rows.map((r) => r.id), total: count[0]?.n ?? 0 };
}

/** Offsets worth checking: around every chunk's first position, the edges, and past the end. */
async function offsetsToCheck(db: Kysely<Database>): Promise<number[]> {
  const { rows } = await sql<{ first: number }>`
    select (sum(n) over (order by start_created_at desc, start_id desc) - n)::int as first
    from user_directory_chunks`.execute(db);
  const { total } = await plainPage(db, 0, 0);
  const offsets = new Set<number>([0, 1, 1999, 2000, 2001, total - 1, total, total + 5]);
  for (const { first } of rows) for (const d of [-3, -1, 0, 1, 7]) offsets.add(first + d);
  return [...offsets].filter((o) => o >= 0).sort((a, b) => a - b);
}

/** Every chunk's count is the number of users in its key range, and none holds more than 2,000 after inserts. */
async function assertChunks(t: Test, db: Kysely<Database>, what: string, bounded = true): Promise<void> {
  const { rows } = await sql<{ n: number; actual: number }>`
    select c.n::int as n, (
      select count(*)::int from users u
      where (u.created_at, u.id) <= (c.start_created_at, c.start_id)
        and (u.created_at, u.id) > coalesce((
          select (b.start_created_at, b.start_id) from user_directory_chunks b
          where (b.start_created_at, b.start_id) < (c.start_created_at, c.start_id)
          order by b.start_created_at desc, b.start_id desc limit 1
        ), ('-infinity'::timestamptz, '00000000-0000-0000-0000-000000000000'::uuid))
    ) as actual
    from user_directory_chunks c`.execute(db);
  const wrong = rows.filter((r) => r.n !== r.actual);
  t.same(wrong, [], `${what}: every chunk counts its users`);
  if (bounded) t.ok(Math.max(...rows.map((r) => r.n)) <= 2000, `${what}: no chunk holds more than 2,000`);
  const { rows: count } = await sql<{ n: number }>`select n::int as n from user_count`.execute(db);
  t.equal(count[0]?.n, (await plainPage(db, 0, 0)).total, `${what}: the counter is exact`);
}

t.test('deep directory pages are exact, the same as a plain offset query', async (t) => {
  const { app, api, database } = await buildTestApp(t);
  const db = database.handle.db;
  const admin = { authorization: `Bearer ${accessTokenFor(app, 'admin')}` };

  async function assertPagesExact(what: string, limit = 7): Promise<void> {
    await assertChunks(t, db, what);
    const offsets = await offsetsToCheck(db);
    const wrong: number[] = [];
    for (const offset of offsets) {
      const res = await api.get('/api/auth/users', {
        query: { offset: String(offset), limit: String(limit) },
        headers: admin,
      });
      const body = res.json() as { data: Array<{ id: string }>; pagination: { total: number } };
      const plain = await plainPage(db, offset, limit);
      const same = body.pagination.total === plain.total && body.data.map((u) => u.id).join() === plain.ids.join();
      if (res.statusCode !== 200 || !same) wrong.push(offset);
    }
    t.same(wrong, [], `${what}: ${offsets.length} pages through the API equal the plain query`);
  }

  await insertUsers(db, 6500, 'bulk');
  await assertPagesExact('6,500 users inserted by one statement');

  for (let i = 0; i < 30; i++) {
    await sql`insert into users (email, created_at) values (${`single-${i}@pages.example`}, now())`.execute(db);
  }
  await assertPagesExact('30 single inserts, newest first');

  await sql`delete from users where email like '%3@pages.example'`.execute(db);
  await assertPagesExact('a tenth deleted in one statement');

  // Most of the users go: chunks empty out and merge into the chunks above them.
  await sql`delete from users where email not like '%0@pages.example'`.execute(db);
  await assertPagesExact('nine in ten of the rest deleted');

  await insertUsers(db, 5000, 'again');
  await assertPagesExact('5,000 more in one statement');

  // Creation times and ids never change in the service, but an UPDATE that changes them moves the
  // user's count to its new chunk.
  await sql`update users set created_at = created_at - interval '3 days' where email like '%7@pages.example'`.execute(
    db,
  );
  await assertPagesExact('creation times changed');
  await sql`update users set id = gen_random_uuid() where email like '%9@pages.example'`.execute(db);
  await assertPagesExact('ids changed');
  await sql`update users set created_at = timestamptz '2025-06-01' where email like 'again-%'`.execute(db);
  await assertPagesExact('5,000 moved into one chunk at once');

  // A page and the plain query in one snapshot (a repeatable-read transaction) must agree while
  // sign-ups and deletes commit around them.
  const writers = Array.from({ length: 8 }, async (_, w) => {
    for (let i = 0; i < 25; i++) {
      await sql`insert into users (email) values (${`concurrent-${w}-${i}@pages.example`})`.execute(db);
      if (i % 5 === 4) {
        await sql`delete from users where id = (
          select id from users where email like 'bulk-%' order by email limit 1)`.execute(db);
      }
    }
  });
  const readers = Array.from({ length: 4 }, async (_, r) => {
    const mismatches: number[] = [];
    for (let i = 0; i < 10; i++) {
      const offset = 2500 + 97 * i + r;
      await db
        .transaction()
        .setIsolationLevel('repeatable read')
        .execute(async (trx) => {
          const page = await listUsersPage(trx, { offset, limit: 5, search: undefined });
          const plain = await plainPage(trx, offset, 5);
          if (page.total !== plain.total || page.rows.map((u) => u.id).join() !== plain.ids.join()) {
            mismatches.push(offset);
          }
        });
    }
    return mismatches;
  });
  await Promise.all(writers);
  t.same((await Promise.all(readers)).flat(), [], 'pages read while others sign up and are deleted are exact');
  await assertPagesExact(`after concurrent sign-ups and deletes${usingPostgres ? '' : ' (one session on PGlite)'}`);

  await sql`truncate users cascade`.execute(db);
  await assertPagesExact('after TRUNCATE');
  await insertUsers(db, 2500, 'after-truncate');
  await assertPagesExact('2,500 users after TRUNCATE');
});

t.test('a deep page walks at most a chunk of the index, however deep', async (t) => {
  const { database } = await buildTestApp(t);
  const db = database.handle.db;
  await insertUsers(db, 20_000, 'deep');
  for (const offset of [5_000, 12_345, 19_990]) {
    const { rows } = await sql<{ 'QUERY PLAN': unknown }>`
      explain (analyze, format json) ${userDirectoryQuery({ offset, limit: 10, search: undefined })}`.execute(db);
    const plan = rows[0]?.['QUERY PLAN'];
    const nodes: Array<{ 'Index Name'?: string; 'Actual Rows'?: number; Plans?: unknown[] }> = [];
    const walk = (node: unknown) => {
      const n = node as (typeof nodes)[number];
      nodes.push(n);
      for (const child of n.Plans ?? []) walk(child);
    };
    const parsed = (typeof plan === 'string' ? JSON.parse(plan) : plan) as Array<{ Plan: unknown }>;
    walk(parsed[0]?.Plan);
    const walked = nodes
      .filter((n) => n['Index Name'] === 'users_created_at_id_idx')
      .reduce((sum, n) => sum + (n['Actual Rows'] ?? 0), 0);
    t.ok(walked > 0 && walked <= 2 * 1000 + 10, `offset ${offset}: ${walked} index entries walked (at most 2,010)`);
  }
});
