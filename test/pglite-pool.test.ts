import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import t from 'tap';
import { createTestDatabase } from './helpers/database.ts';

// On PGlite (one Postgres session) this proves that whole transactions are serialised; on
// PostgreSQL the same test holds trivially, which keeps both dialects to one contract.
t.test('concurrent writes inside and outside a transaction are neither lost nor rolled back together', async (t) => {
  const database = await createTestDatabase();
  t.teardown(() => database.drop());
  const db = database.handle.db;
  await sql`create table writes (id serial primary key, origin text not null)`.execute(db);

  const outside = Array.from({ length: 40 }, (_, i) =>
    sql`insert into writes (origin) values (${`outside-${i}`})`.execute(db),
  );
  const doomed = db
    .transaction()
    .execute(async (trx) => {
      await sql`insert into writes (origin) values ('doomed-1')`.execute(trx);
      await sleep(30); // let the outside writes queue up while this transaction is open
      await sql`insert into writes (origin) values ('doomed-2')`.execute(trx);
      throw new Error('roll me back');
    })
    .then(
      () => 'committed',
      (err: Error) => err.message,
    );
  const kept = db.transaction().execute(async (trx) => {
    await sql`insert into writes (origin) values ('kept-1')`.execute(trx);
    await sleep(10);
    await sql`insert into writes (origin) values ('kept-2')`.execute(trx);
  });
  const more = Array.from({ length: 40 }, (_, i) =>
    sql`insert into writes (origin) values (${`late-${i}`})`.execute(db),
  );

  const [doomedResult] = await Promise.all([doomed, kept, ...outside, ...more]);
  t.equal(doomedResult, 'roll me back', 'the failing transaction rolled back');

  const rows = await sql<{ origin: string }>`select origin from writes`.execute(db);
  const origins = rows.rows.map((r) => r.origin);
  t.equal(origins.filter((o) => o.startsWith('outside-')).length, 40, 'every write outside survived');
  t.equal(origins.filter((o) => o.startsWith('late-')).length, 40, 'every later write survived');
  t.same(
    origins.filter((o) => o.startsWith('kept-')),
    ['kept-1', 'kept-2'],
    'the committed transaction kept both rows',
  );
  t.same(
    origins.filter((o) => o.startsWith('doomed-')),
    [],
    'nothing of the rolled-back transaction remains',
  );
});

t.test('a statement error inside a transaction does not poison the next borrower', async (t) => {
  const database = await createTestDatabase();
  t.teardown(() => database.drop());
  const db = database.handle.db;
  const failing = db.transaction().execute(async (trx) => {
    await sql`select 1/0`.execute(trx);
  });
  const next = sql<{ ok: number }>`select 1 as ok`.execute(db);
  await t.rejects(failing, /division by zero/);
  t.same((await next).rows, [{ ok: 1 }]);
});
