/**
 * Loads N synthetic users straight into the database (see scripts/lib/seed.ts).
 *
 *   npm run seed -- --users 1000000            # the configured database (DATABASE_URL, or PGlite under DATA_DIR)
 *   DATABASE_URL=postgres://… npm run seed -- --users 100000
 */
import { parseArgs } from 'node:util';
import { sql } from 'kysely';
import { ConfigError, loadConfig } from '../src/config.ts';
import { openDatabase } from '../src/db/database.ts';
import { migrateToLatest } from '../src/db/migrate.ts';
import { seedUsers } from './lib/seed.ts';

const { values } = parseArgs({
  options: { users: { type: 'string', default: '100000' }, batch: { type: 'string', default: '25000' } },
});
const total = Number(values.users);
const batch = Number(values.batch);
if (!Number.isSafeInteger(total) || total < 1 || !Number.isSafeInteger(batch) || batch < 1) {
  console.error('--users and --batch must be positive integers');
  process.exit(1);
}

try {
  const database = await openDatabase(loadConfig().database);
  try {
    await migrateToLatest(database.db);
    const seconds = await seedUsers(database.db, total, batch);
    const count = await sql<{ n: number }>`select n::int as n from user_count`.execute(database.db);
    console.log(
      `${total.toLocaleString('en-US')} users added in ${seconds.toFixed(1)} s; ${count.rows[0]?.n.toLocaleString('en-US')} in all`,
    );
  } finally {
    await database.close();
  }
} catch (err) {
  console.error(`seed failed: ${err instanceof ConfigError ? err.message : ((err as Error).stack ?? String(err))}`);
  process.exit(1);
}
