import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type { DatabaseConfig } from '../../src/config.ts';
import { type DatabaseHandle, openDatabase } from '../../src/db/database.ts';
import { migrateToLatest } from '../../src/db/migrate.ts';

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

/** Creates a migrated database for one test file. */
export async function createTestDatabase(): Promise<TestDatabase> {
  const serverUrl = process.env.TEST_DATABASE_URL;
  if (!serverUrl) {
    const config: DatabaseConfig = { kind: 'pglite-memory' };
    const handle = await openDatabase(config);
    await migrateToLatest(handle.db);
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
