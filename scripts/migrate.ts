/** Applies pending migrations to the configured database (DATABASE_URL, or PGlite under DATA_DIR) and exits. */
import { ConfigError, loadConfig } from '../src/config.ts';
import { DataDirLockedError } from '../src/db/data-dir-lock.ts';
import { openDatabase } from '../src/db/database.ts';
import { migrateToLatest } from '../src/db/migrate.ts';

try {
  const config = loadConfig();
  const database = await openDatabase(config.database);
  try {
    const results = await migrateToLatest(database.db);
    for (const r of results) console.log(`${r.status === 'Success' ? 'applied' : r.status}: ${r.migrationName}`);
    if (results.length === 0) console.log('database is up to date');
  } finally {
    await database.close();
  }
} catch (err) {
  const known = err instanceof ConfigError || err instanceof DataDirLockedError;
  console.error(`migrate failed: ${known ? (err as Error).message : String((err as Error)?.stack ?? err)}`);
  process.exit(1);
}
