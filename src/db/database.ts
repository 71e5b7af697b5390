import { existsSync } from 'node:fs';
import path from 'node:path';
import { PGlite, type PGliteOptions } from '@electric-sql/pglite';
import { pg_trgm } from '@electric-sql/pglite/contrib/pg_trgm';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import type { DatabaseConfig } from '../config.ts';
import { lockDataDir } from './data-dir-lock.ts';
import { isRetryable } from './errors.ts';
import { PGlitePool } from './pglite-pool.ts';
import { refuseExternalPrograms } from './pglite-programs.ts';
import { readTemplate } from './pglite-template.ts';
import { serveOverWire, type WireOptions, type WireServer } from './pglite-wire.ts';
import { PreparingClient } from './prepared-statements.ts';
import { ReadReplica, type ReplicaStatus } from './read-replica.ts';
import type { Database } from './schema.ts';

export type DatabaseKind = DatabaseConfig['kind'];

/** A connection pool's occupancy: connections open, of them idle, and requests waiting for one. */
export interface PoolStats {
  total: number;
  idle: number;
  waiting: number;
}

/** An open database: the typed query builder, its pool's occupancy, and how to close it. */
export interface DatabaseHandle {
  db: Kysely<Database>;
  kind: DatabaseKind;
  poolStats(): PoolStats;
  /**
   * Runs a read that tolerates a little lag: on the replica (DATABASE_READ_URL) while it is within
   * DATABASE_READ_MAX_LAG_MS of the primary, else on the primary. docs/operations.md ("Read replicas")
   * lists the operations that read this way; everything else uses `db`.
   */
  read<T>(work: (db: Kysely<Database>) => Promise<T>): Promise<T>;
  /** With DATABASE_READ_URL: the replica's state and lag at the last measurement. */
  replicaStatus?(): ReplicaStatus;
  /** The embedded database only: serves it over the PostgreSQL protocol on 127.0.0.1 (pglite-wire.ts). */
  serveOverWire?(port: number, options?: WireOptions): Promise<WireServer>;
  /**
   * The embedded database only: its whole data directory as a tarball (gzipped with `gzip`), taken
   * between two transactions (no statement of the service runs meanwhile); `openDatabase`'s
   * `loadDataDir` opens a copy of it.
   */
  dumpDataDir?(compression?: 'gzip' | 'none'): Promise<Blob>;
  close(): Promise<void>;
}

// pg hands int8 (count(*), bigint) back as strings and PGlite as numbers: make both numbers.
const INT8_OID = 20;
const pgTypes = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    oid === INT8_OID ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format)) as typeof pg.types.getTypeParser,
};

// Postgres zeroes its shared buffers at start, so all of them are resident from the first moment:
// the default 128MB made up 40% of an idle service. An embedded database serves one process and a
// small data set: 8MB keeps its hot pages, and the operating system's page cache the rest.
const PGLITE_SHARED_BUFFERS = '8MB';
// Postgres sizes its shared memory (process slots, lock tables) for max_connections, 100 by default.
// The embedded database has one backend, whatever talks to it (the service's pool and a psql client
// share it): 5, the least its 3 reserved connections allow with room to spare, holds about 5 MB less.
const PGLITE_MAX_CONNECTIONS = 5;

function pgliteOptions(config: Exclude<DatabaseConfig, { kind: 'postgres' }>, loadDataDir?: Blob): PGliteOptions {
  const isNew = config.kind === 'pglite-memory' || !existsSync(path.join(config.dataDir, 'PG_VERSION'));
  const template = isNew ? (loadDataDir ?? readTemplate()) : undefined;
  return {
    extensions: { pg_trgm },
    // pg_temp searched last: a temporary table a psql client makes (PGLITE_SOCKET_PORT shares the
    // session) never hides the service's table of that name.
    startParams: [
      ...PGlite.defaultStartParams,
      '-c',
      `shared_buffers=${PGLITE_SHARED_BUFFERS}`,
      '-c',
      `max_connections=${PGLITE_MAX_CONNECTIONS}`,
      '-c',
      'search_path=public,pg_temp',
    ],
    ...(config.kind === 'pglite' ? { dataDir: config.dataDir } : {}),
    ...(template ? { loadDataDir: template } : {}),
  };
}

/** A pool of connections to a PostgreSQL server, with the settings every request relies on. */
function postgresPool(url: string, limits: { connectionTimeoutMillis: number; queryTimeoutMillis?: number }): pg.Pool {
  const pool = new pg.Pool({
    connectionString: url,
    max: 10,
    // Bounds both the wait for a pooled connection (queued behind busy ones) and the opening of a
    // new one: past it the request answers 503 with Retry-After instead of hanging, for instance
    // while the database host is unreachable (a stopped server refuses at once).
    connectionTimeoutMillis: limits.connectionTimeoutMillis,
    ...(limits.queryTimeoutMillis === undefined ? {} : { query_timeout: limits.queryTimeoutMillis }),
    idleTimeoutMillis: 30_000,
    // A connection whose server vanished without a word (host lost, failover) is found by TCP.
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    types: pgTypes,
    // JIT compilation costs tens of milliseconds and only pays off for long analytical queries;
    // every query here is short, and JIT made a 0.3 ms page take 25 ms.
    options: '-c jit=off',
    Client: PreparingClient,
  });
  // An idle client that loses its server emits here; without a listener the process would crash.
  pool.on('error', () => {});
  // A checked-out client emits 'error' too when its server goes away between two of its queries
  // (a transaction's statements, say: admin_shutdown arrives while no query is active), and the
  // pool listens only to idle clients. Unheard, that error crashed the process. The client is
  // then marked unusable: the request's next statement fails as unavailable (503) and the pool
  // discards the client on release.
  pool.on('connect', (client) => {
    client.on('error', () => {});
  });
  return pool;
}

/**
 * A lag-tolerant read on the replica while it is in use; if the replica fails it meanwhile (stopped,
 * unreachable, a conflict with recovery cancelled the query), the read is made again on the primary
 * and the replica is measured again before it gets another.
 */
async function readFromReplica<T>(
  replica: ReadReplica,
  primary: Kysely<Database>,
  work: (db: Kysely<Database>) => Promise<T>,
): Promise<T> {
  const db = replica.reads();
  if (db === primary) return work(primary);
  try {
    return await work(db);
  } catch (err) {
    // pg's query_timeout names itself "Query read timeout"; a recovery conflict is SQLSTATE 40001.
    if (!isRetryable(err) && !/Query read timeout/.test((err as Error).message)) throw err;
    replica.markDown();
    return work(primary);
  }
}

/**
 * Opens the database that the configuration names. For PGlite on disk, the directory is locked first.
 * `loadDataDir` (the embedded database, new data directories only): start from that dump
 * (`dumpDataDir`) instead of an empty cluster.
 */
export async function openDatabase(
  config: DatabaseConfig,
  options: { loadDataDir?: Blob } = {},
): Promise<DatabaseHandle> {
  if (config.kind === 'postgres') {
    const primary = postgresPool(config.url, { connectionTimeoutMillis: 2_000 });
    const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool: primary }) });
    const replica =
      config.replica === undefined
        ? undefined
        : new ReadReplica(
            db,
            new Kysely<Database>({
              dialect: new PostgresDialect({
                // A replica that stopped answering must not hold the reads it was given: they go to
                // the primary after these (read()).
                pool: postgresPool(config.replica.url, { connectionTimeoutMillis: 1_000, queryTimeoutMillis: 10_000 }),
              }),
            }),
            config.replica,
          );
    await replica?.start();
    return {
      db,
      kind: config.kind,
      poolStats: () => ({ total: primary.totalCount, idle: primary.idleCount, waiting: primary.waitingCount }),
      read: replica === undefined ? (work) => work(db) : (work) => readFromReplica(replica, db, work),
      ...(replica === undefined ? {} : { replicaStatus: () => replica.status }),
      close: async () => {
        replica?.stop();
        await Promise.all([db.destroy(), replica?.db.destroy()]);
      },
    };
  }

  const unlock = config.kind === 'pglite' ? lockDataDir(config.dataDir) : () => {};
  try {
    const pglite = await PGlite.create(pgliteOptions(config, options.loadDataDir));
    refuseExternalPrograms(pglite);
    const pool = new PGlitePool(pglite);
    const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
    return {
      db,
      kind: config.kind,
      poolStats: () => pool.stats,
      read: (work) => work(db),
      serveOverWire: (port, options) => serveOverWire(pglite, pool, port, options),
      dumpDataDir: async (compression = 'none') => {
        const turn = await pool.connect();
        try {
          return await pglite.dumpDataDir(compression);
        } finally {
          turn.release();
        }
      },
      close: async () => {
        try {
          await db.destroy();
          // Kysely ends a pool only once it has used it: a database closed before its first query
          // would stay open (and keep the process alive) without this. Ending twice is a no-op.
          await pool.end();
        } finally {
          unlock();
        }
      },
    };
  } catch (err) {
    unlock();
    throw err;
  }
}
