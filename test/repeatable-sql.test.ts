// The repeatable SQL files (src/db/sql/): applied after the migrations, again only when their text
// changes, and once when several instances start at the same moment.
import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import pg from 'pg';
import t from 'tap';
import type { DatabaseConfig } from '../src/config.ts';
import { openDatabase } from '../src/db/database.ts';
import { migrateToLatest } from '../src/db/migrate.ts';
import { applyRepeatableSql, hashOf, type RepeatableFile, readRepeatableFiles } from '../src/db/repeatable-sql.ts';
import { createTestDatabase, usingPostgres } from './helpers/database.ts';

const recorded = async (db: Parameters<typeof applyRepeatableSql>[0]) =>
  (
    await sql<{ name: string; hash: string; appliedAt: Date }>`
      select name, hash, applied_at as "appliedAt" from repeatable_sql order by name`.execute(db)
  ).rows;

/** realtime.sql with one more statement at its end, which shows whether it ran. */
const changed = (files: RepeatableFile[], label: string): RepeatableFile[] =>
  files.map((file) =>
    file.name === 'realtime.sql'
      ? {
          ...file,
          text: `${file.text}\ncomment on function realtime.act_as_caller(uuid, text) is '${label}';\n`,
        }
      : file,
  );

const commentOfActAsCaller = async (db: Parameters<typeof applyRepeatableSql>[0]) =>
  (
    await sql<{ comment: string | null }>`
      select obj_description('realtime.act_as_caller(uuid, text)'::regprocedure, 'pg_proc') as comment`.execute(db)
  ).rows[0]?.comment ?? null;

t.test('applied with the migrations, again only when the text changes', async (t) => {
  const database = await createTestDatabase();
  t.teardown(() => database.drop());
  const db = database.handle.db;
  const files = readRepeatableFiles();
  t.same(
    files.map((f) => f.name),
    ['realtime.sql'],
    'realtime.sql is read from the source tree',
  );

  const first = await recorded(db);
  t.match(
    first,
    [{ name: 'realtime.sql', hash: hashOf(files[0]?.text ?? '') }],
    'the migrated database records its hash',
  );
  const actAsCaller = await sql<{ n: number }>`
    select count(*)::int as n from pg_proc where proname = 'act_as_caller'`.execute(db);
  t.equal(actAsCaller.rows[0]?.n, 1, 'and has its functions');

  t.same(await migrateToLatest(db), [], 'a restart finds no migration to run');
  t.same(await applyRepeatableSql(db), [], 'nor a changed file');
  t.same(await recorded(db), first, 'the record is untouched');

  const v2 = changed(files, 'v2');
  t.same(await applyRepeatableSql(db, v2), ['realtime.sql'], 'a changed file is applied');
  t.equal(await commentOfActAsCaller(db), 'v2', 'its statements ran');
  const second = await recorded(db);
  t.equal(second[0]?.hash, hashOf(v2[0]?.text ?? ''), 'and its new hash is recorded');
  t.same(await applyRepeatableSql(db, v2), [], 'once');

  t.same(await applyRepeatableSql(db, files), ['realtime.sql'], 'going back to the earlier text applies it again');
  t.equal((await recorded(db))[0]?.hash, first[0]?.hash, 'with the earlier hash');

  // Statements still act as the caller after the file is applied again.
  const settings = await db.transaction().execute(async (trx) => {
    await sql`select realtime.act_as_caller(${'00000000-0000-4000-8000-000000000001'}::uuid, 'room:1')`.execute(trx);
    return (
      await sql<{ uid: string; role: string; channel: string; user: string }>`
        select auth.uid() as uid, auth.role() as role, realtime.channel_name() as channel, current_user as "user"`.execute(
        trx,
      )
    ).rows[0];
  });
  t.same(settings, {
    uid: '00000000-0000-4000-8000-000000000001',
    role: 'authenticated',
    channel: 'room:1',
    user: 'authenticated',
  });
});

t.test('instances starting at the same moment apply a changed file once, and none fails', async (t) => {
  const database = await createTestDatabase();
  t.teardown(() => database.drop());
  // On PostgreSQL each instance has a pool of its own; PGlite has one process and one session.
  const others = usingPostgres
    ? await Promise.all([openDatabase(database.config), openDatabase(database.config)])
    : [database.handle, database.handle];
  if (usingPostgres) t.teardown(() => Promise.all(others.map((h) => h.close())));
  const v3 = changed(readRepeatableFiles(), 'v3');
  const results = await Promise.all(others.map((h) => applyRepeatableSql(h.db, v3)));
  t.same(results.flat(), ['realtime.sql'], 'one instance applied it, the other found it applied');
  t.equal(await commentOfActAsCaller(database.handle.db), 'v3');
  t.equal((await recorded(database.handle.db))[0]?.hash, hashOf(v3[0]?.text ?? ''));
});

t.test(
  'two instances migrating a new database at the same moment both start',
  { skip: !usingPostgres && 'PostgreSQL only (PGlite has one process)' },
  async (t) => {
    const serverUrl = process.env.TEST_DATABASE_URL ?? '';
    const name = `test_${process.pid}_${randomBytes(4).toString('hex')}`;
    const admin = new pg.Client({ connectionString: serverUrl });
    await admin.connect();
    await admin.query(`create database ${name}`);
    t.teardown(async () => {
      await admin.query(`drop database if exists ${name} with (force)`);
      await admin.end();
    });
    const url = new URL(serverUrl);
    url.pathname = `/${name}`;
    const config: DatabaseConfig = { kind: 'postgres', url: url.toString() };
    const instances = await Promise.all([openDatabase(config), openDatabase(config)]);
    t.teardown(() => Promise.all(instances.map((h) => h.close())));
    const outcomes = await Promise.allSettled(instances.map((h) => migrateToLatest(h.db)));
    t.same(
      outcomes.map((o) => (o.status === 'fulfilled' ? 'started' : String(o.reason))),
      ['started', 'started'],
      'both migrated',
    );
    const first = instances[0]?.db;
    if (first === undefined) return;
    t.match(await recorded(first), [{ name: 'realtime.sql', hash: hashOf(readRepeatableFiles()[0]?.text ?? '') }]);
  },
);
