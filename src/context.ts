import type { Kysely } from 'kysely';
import type { Config } from './config.ts';
import type { DatabaseKind } from './db/database.ts';
import type { Database } from './db/schema.ts';

/** What handlers and services are given: the configuration and the open database. */
export interface AppContext {
  config: Readonly<Config>;
  db: Kysely<Database>;
  databaseKind: DatabaseKind;
  startedAt: number;
}
