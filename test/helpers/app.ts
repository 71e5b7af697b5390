import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.ts';
import type { Clock } from '../../src/clock.ts';
import { type Config, type Env, loadConfig } from '../../src/config.ts';
import { checkResponsesAgainstContract } from './contract-check.ts';
import { createTestDatabase, type TestDatabase } from './database.ts';

interface Teardown {
  teardown(fn: () => unknown): void;
}

export interface TestApp {
  app: FastifyInstance;
  config: Readonly<Config>;
  database: TestDatabase;
}

export interface TestAppOptions {
  /** Environment variables on top of the test defaults (NODE_ENV=test, silent logs, plain-http cookies). */
  env?: Env;
  clock?: Clock;
}

/** A fresh app on a fresh, migrated database, closed and dropped when the test `t` ends. */
export async function buildTestApp(t: Teardown, options: TestAppOptions = {}): Promise<TestApp> {
  const database = await createTestDatabase();
  const config = loadConfig({
    NODE_ENV: 'test',
    LOG_LEVEL: 'silent',
    DATABASE_URL: database.url,
    ...options.env,
  });
  const app = await buildApp(config, {
    database: database.handle,
    logger: false,
    ...(options.clock ? { clock: options.clock } : {}),
  });
  checkResponsesAgainstContract(app);
  await app.ready();
  t.teardown(async () => {
    await app.close();
    await database.drop();
  });
  return { app, config, database };
}

/**
 * An app whose log lines are collected in `lines` (not yet ready, so tests may add routes), on a
 * fresh database closed and dropped when `t` ends.
 */
export async function buildAppCapturingLogs(
  t: Teardown,
  level: 'error' | 'info' | 'trace',
  env: Env = {},
): Promise<TestApp & { lines: string[] }> {
  const database = await createTestDatabase();
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      lines.push(String(chunk));
      done();
    },
  });
  const config = loadConfig({ NODE_ENV: 'test', DATABASE_URL: database.url, ...env });
  const app = await buildApp(config, { database: database.handle, logger: { level, stream } });
  checkResponsesAgainstContract(app);
  t.teardown(async () => {
    await app.close();
    await database.drop();
  });
  return { app, config, database, lines };
}
