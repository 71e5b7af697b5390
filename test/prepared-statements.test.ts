import { sql } from 'kysely';
import t from 'tap';
import { createTestDatabase, usingPostgres } from './helpers/database.ts';

// PostgreSQL connections prepare each parameterised statement once; PGlite runs in-process and
// does not go through the pg client, so there is nothing to prepare there.
t.test(
  'prepared statements survive a change of the table they read',
  { skip: !usingPostgres && 'PostgreSQL only' },
  async (t) => {
    const database = await createTestDatabase();
    t.teardown(() => database.drop());
    const db = database.handle.db;
    await db.insertInto('users').values({ email: 'shape@example.com', password_hash: null }).execute();
    const read = () =>
      sql<Record<string, unknown>>`select * from users where email = ${'shape@example.com'}`.execute(db);

    // Run on every connection of the pool so that each one holds the prepared statement.
    const before = await Promise.all(Array.from({ length: 12 }, read));
    t.ok(before.every((r) => r.rows.length === 1 && !('nickname' in (r.rows[0] ?? {}))));
    const prepared = await sql<{ n: number }>`select count(*)::int as n from pg_prepared_statements`.execute(db);
    t.ok((prepared.rows[0]?.n ?? 0) > 0, 'the connection holds prepared statements');

    await sql`alter table users add column nickname text`.execute(db);
    const after = await Promise.all(Array.from({ length: 12 }, read));
    t.ok(
      after.every((r) => r.rows.length === 1 && 'nickname' in (r.rows[0] ?? {})),
      'every connection answers with the new shape',
    );
    const again = await Promise.all(Array.from({ length: 12 }, read));
    t.ok(
      again.every((r) => 'nickname' in (r.rows[0] ?? {})),
      'and keeps doing so',
    );
  },
);
