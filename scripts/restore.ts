/**
 * `npm run restore -- <file>`: makes the embedded database under DATA_DIR from a backup written by
 * `npm run backup`. DATA_DIR must hold no database yet (a new directory, or the old one moved away):
 * a restore never overwrites one. Start the service on it afterwards; it applies any newer migrations.
 */
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { ConfigError, loadConfig } from '../src/config.ts';
import { DataDirLockedError } from '../src/db/data-dir-lock.ts';
import { openDatabase } from '../src/db/database.ts';
import { contentsLine } from './lib/embedded-contents.ts';
import { failsAs } from './lib/fail.ts';

const fail = failsAs('restore');

const file = process.argv[2];
if (!file || file.startsWith('-')) fail('name the backup to restore: npm run restore -- <file>');
const source = path.resolve(file as string);
if (!existsSync(source)) fail(`${source} does not exist`);
try {
  const config = loadConfig();
  const database = config.database;
  if (database.kind !== 'pglite') {
    fail('a backup restores into the embedded database: unset DATABASE_URL and set DATA_DIR to the directory to make');
  } else {
    if (existsSync(database.dataDir) && readdirSync(database.dataDir).length > 0) {
      fail(
        `${database.dataDir} holds a database already: move it away, or set DATA_DIR to a new directory, then restore again`,
      );
    }
    const dump = new Blob([readFileSync(source)]);
    console.log(`restore: making the embedded database in ${database.dataDir} from ${source}`);
    let contents: string;
    try {
      const handle = await openDatabase(database, { loadDataDir: dump });
      try {
        // A PGlite dump of some other database opens too: this one's tables must be there.
        contents = await contentsLine(handle);
      } finally {
        await handle.close();
      }
    } catch (err) {
      if (err instanceof DataDirLockedError) throw err;
      rmSync(database.dataDir, { recursive: true, force: true }); // it held nothing before
      fail(`${source} is not a backup of this service's database (${(err as Error).message}); nothing was restored`);
      throw err;
    }
    console.log(`restore: done: ${contents}`);
  }
} catch (err) {
  if (err instanceof DataDirLockedError || err instanceof ConfigError) fail(err.message);
  throw err;
}
