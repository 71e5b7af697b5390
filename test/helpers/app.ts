import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.ts';
import type { Clock } from '../../src/clock.ts';
import { type Config, type Env, loadConfig } from '../../src/config.ts';
import { openDatabase } from '../../src/db/database.ts';
import { checkResponsesAgainstContract } from './contract-check.ts';
import { createTestDatabase, type TestDatabase } from './database.ts';
import { type TypedInject, typedInject } from './typed-inject.ts';

interface Teardown {
  teardown(fn: () => unknown): void;
}

export interface TestApp {
  app: FastifyInstance;
  /** The typed client over `app` (test/helpers/typed-inject.ts). */
  api: TypedInject;
  config: Readonly<Config>;
  database: TestDatabase;
}

export interface TestAppOptions {
  /** Environment variables on top of the test defaults (NODE_ENV=test, silent logs, plain-http cookies). */
  env?: Env;
  clock?: Clock;
}

type LogLevel = 'error' | 'warn' | 'info' | 'trace';

/** A logger configuration for an app whose log lines (JSON text) are collected in `lines`. */
export function captureLogs(level: LogLevel): { logger: { level: LogLevel; stream: Writable }; lines: string[] } {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      lines.push(String(chunk));
      done();
    },
  });
  return { logger: { level, stream }, lines };
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
  return { app, api: typedInject(app), config, database };
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
  const { logger, lines } = captureLogs(level);
  const config = loadConfig({ NODE_ENV: 'test', DATABASE_URL: database.url, ...env });
  const app = await buildApp(config, { database: database.handle, logger });
  checkResponsesAgainstContract(app);
  t.teardown(async () => {
    await app.close();
    await database.drop();
  });
  return { app, api: typedInject(app), config, database, lines };
}

/** How buildAnotherInstance configures the second app. */
export interface AnotherInstanceOptions {
  /**
   * Its configuration: by default the first app's own; with `env`, loaded from the test defaults
   * (NODE_ENV=test, silent logs), the first's DATABASE_URL and `env` (as a restart with another
   * environment would be).
   */
  env?: Env;
  clock?: Clock;
  /** Its own connection pool on the first's database, as another process has; by default it shares the first's handle. */
  ownConnection?: boolean;
  /** Collects its log lines at this level in `lines`. */
  logLevel?: LogLevel;
}

/**
 * A second app (instance) on the database of `first`, ready and checked against the contract,
 * closed (with its own connection pool, if any) when `t` ends.
 */
export async function buildAnotherInstance(
  t: Teardown,
  first: Pick<TestApp, 'config' | 'database'>,
  options: AnotherInstanceOptions = {},
): Promise<Omit<TestApp, 'database'> & { lines: string[] }> {
  const config =
    options.env === undefined
      ? first.config
      : loadConfig({ NODE_ENV: 'test', LOG_LEVEL: 'silent', DATABASE_URL: first.database.url, ...options.env });
  const database = options.ownConnection ? await openDatabase(first.database.config) : first.database.handle;
  const { logger, lines } =
    options.logLevel === undefined ? { logger: false as const, lines: [] } : captureLogs(options.logLevel);
  const app = await buildApp(config, { database, logger, ...(options.clock ? { clock: options.clock } : {}) });
  checkResponsesAgainstContract(app);
  t.teardown(async () => {
    await app.close();
    if (options.ownConnection) await database.close();
  });
  await app.ready();
  return { app, api: typedInject(app), config, lines };
}
