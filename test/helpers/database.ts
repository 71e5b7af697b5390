import { randomBytes } from 'node:crypto';
import type { Kysely } from 'kysely';
import pg from 'pg';
import type { DatabaseConfig } from '../../src/config.ts';
import { type DatabaseHandle, openDatabase } from '../../src/db/database.ts';
import { migrateToLatest } from '../../src/db/migrate.ts';
import type { Database } from '../../src/db/schema.ts';

/** The database a test file runs on: in-memory PGlite, or a fresh database on TEST_DATABASE_URL's server. */
export interface TestDatabase {
  handle: DatabaseHandle;
  config: DatabaseConfig;
  /** The DATABASE_URL an app (or a child process) should use for this database. */
  url: string;
  /** Closes the handle and drops the database. */
  drop(): Promise<void>;
}

export const usingPostgres = (process.env.TEST_DATABASE_URL ?? '') !== '';

let migrated: Promise<Blob> | undefined;

/**
 * An embedded database with every migration applied, as a dump made once per test process: each
 * test database starts from a copy of it rather than running the migrations again.
 */
export function migratedPGlite(): Promise<Blob> {
  migrated ??= (async () => {
    const handle = await openDatabase({ kind: 'pglite-memory' });
    try {
      await migrateToLatest(handle.db);
      const dump = await handle.dumpDataDir?.();
      if (dump === undefined) throw new Error('the embedded database cannot be dumped');
      return dump;
    } finally {
      await handle.close();
    }
  })();
  return migrated;
}

/** Creates a migrated database for one test file. */
export async function createTestDatabase(): Promise<TestDatabase> {
  const serverUrl = process.env.TEST_DATABASE_URL;
  if (!serverUrl) {
    const config: DatabaseConfig = { kind: 'pglite-memory' };
    const handle = await openDatabase(config, { loadDataDir: await migratedPGlite() });
    await migrateToLatest(handle.db); // nothing left to do: it checks, as a start does
    return { handle, config, url: 'memory://', drop: () => handle.close() };
  }
  const name = `test_${process.pid}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    await admin.query(`create database ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  const config: DatabaseConfig = { kind: 'postgres', url: url.toString() };
  const handle = await openDatabase(config);
  await migrateToLatest(handle.db);
  return {
    handle,
    config,
    url: url.toString(),
    drop: async () => {
      await handle.close();
      const dropper = new pg.Client({ connectionString: serverUrl });
      await dropper.connect();
      try {
        await dropper.query(`drop database if exists ${name} with (force)`);
      } finally {
        await dropper.end();
      }
    },
  };
}

/**
 * A connection of its own to `url` (PostgreSQL) that tells when another connection waits for a lock
 * while running a statement like one of `statements` (ILIKE patterns); closed when `t` ends. Polls
 * for 10 s at most, then answers false.
 */
export async function lockWaits(
  t: { teardown(fn: () => unknown): void },
  url: string,
): Promise<(...statements: string[]) => Promise<boolean>> {
  const waiting = await lockWaiters(t, url);
  return (...statements) => waiting(1, statements);
}

/**
 * Like lockWaits, but tells when at least `count` connections wait for a lock (while running a
 * statement like one of `statements`, any statement when there are none). Only connections to
 * `url`'s database count: other test files share the server.
 */
export async function lockWaiters(
  t: { teardown(fn: () => unknown): void },
  url: string,
): Promise<(count: number, statements?: readonly string[]) => Promise<boolean>> {
  const watcher = new pg.Client({ connectionString: url });
  await watcher.connect();
  t.teardown(() => watcher.end());
  return async (count, statements = ['%']) => {
    for (let i = 0; i < 400; i++) {
      const { rows } = await watcher.query(
        `select count(*)::int as n from pg_stat_activity
         where datname = current_database() and wait_event_type = 'Lock' and query ilike any($1::text[])`,
        [statements],
      );
      if ((rows[0] as { n: number }).n >= count) return true;
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    return false;
  };
}

/**
 * A transaction held open: `before` runs, then it waits until `commit()` is called, then `after`
 * runs and it commits. For the tests that put a request between another flow's statements and its
 * commit (row locks between connections: PostgreSQL).
 */
export function heldTransaction(
  db: Kysely<Database>,
  before: (trx: Kysely<Database>) => Promise<unknown>,
  after?: (trx: Kysely<Database>) => Promise<unknown>,
): { held: Promise<void>; commit(): Promise<void> } {
  let release!: () => void;
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  let reached!: () => void;
  const beforeDone = new Promise<void>((resolve) => {
    reached = resolve;
  });
  const done = db.transaction().execute(async (trx) => {
    await before(trx);
    reached();
    await released;
    await after?.(trx);
  });
  return {
    // Settles when `before` is done, or when the transaction failed without reaching that point.
    held: Promise.race([beforeDone, done.then(() => undefined)]),
    async commit() {
      release();
      await done;
    },
  };
}
