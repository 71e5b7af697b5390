/**
 * `npm run backup -- <file>`: writes the embedded database (under DATA_DIR, as the service uses it)
 * to <file>, a gzipped tarball of its data directory, which `npm run restore -- <file>` turns into a
 * data directory again. The service must be stopped first (the data directory is open by one process
 * at a time; a running service is named in the refusal). For PostgreSQL use pg_dump.
 */
import { existsSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ConfigError, loadConfig } from '../src/config.ts';
import { DataDirLockedError } from '../src/db/data-dir-lock.ts';
import { openDatabase } from '../src/db/database.ts';
import { contentsLine } from './lib/embedded-contents.ts';
import { failsAs } from './lib/fail.ts';

const fail = failsAs('backup');

const file = process.argv[2];
if (!file || file.startsWith('-')) fail('name the file to write: npm run backup -- <file>');
const target = path.resolve(file as string);
if (existsSync(target)) fail(`${target} exists already: name a new file`);
if (!existsSync(path.dirname(target)))
  fail(`${path.dirname(target)} does not exist: create it, or name a file elsewhere`);
try {
  const config = loadConfig();
  const database = config.database;
  if (database.kind !== 'pglite') {
    fail(
      database.kind === 'postgres'
        ? 'DATABASE_URL names PostgreSQL: back it up with pg_dump (docs/operations.md, "Backups")'
        : 'DATABASE_URL=memory:// keeps nothing to back up',
    );
  } else if (!existsSync(path.join(database.dataDir, 'PG_VERSION'))) {
    fail(`there is no embedded database in ${database.dataDir} (DATA_DIR): nothing to back up`);
  } else {
    console.log(`backup: opening the embedded database in ${database.dataDir}`);
    const handle = await openDatabase(database);
    try {
      const contents = await contentsLine(handle);
      const dump = await handle.dumpDataDir?.('gzip');
      if (dump === undefined) fail('this database cannot be dumped');
      const bytes = Buffer.from(await (dump as Blob).arrayBuffer());
      writeFileSync(target, bytes, { flag: 'wx' });
      console.log(`backup: wrote ${target} (${(bytes.length / 1024 / 1024).toFixed(1)} MiB): ${contents}`);
    } finally {
      await handle.close();
    }
  }
} catch (err) {
  if (err instanceof DataDirLockedError) {
    fail(`${err.message.replace(/ Stop that process.*$/, '')} Stop the service first, then run the backup again.`);
  }
  if (err instanceof ConfigError) fail(err.message);
  throw err;
}
