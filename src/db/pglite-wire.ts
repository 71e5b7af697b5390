import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { PGlite } from '@electric-sql/pglite';
import type { FastifyInstance } from 'fastify';
import type { PostgresPoolClient } from 'kysely';
import { type Config, ConfigError } from '../config.ts';
import type { DatabaseHandle } from './database.ts';
import type { PGlitePool } from './pglite-pool.ts';
import { startWireGuard } from './wire-guard.ts';

/** How long a client may keep a transaction open (the service's requests wait meanwhile). */
export const TRANSACTION_LIMIT_MS = 30_000;

/** The embedded database served over the PostgreSQL protocol (PGLITE_SOCKET_PORT, development only). */
export interface WireServer {
  port: number;
  close(): Promise<void>;
}

/**
 * What the socket server runs its clients' messages on: PGlite itself, but each message in a turn of
 * the service's own pool. PGlite is one session, and the service's transactions span several
 * statements, so a message from psql must never land inside one of them; and while psql has a
 * transaction open (BEGIN without COMMIT yet) the turn is kept, so that no statement of the service
 * lands inside psql's. A client that disconnects mid-transaction is rolled back by the socket
 * server, and the turn then ends.
 */
class TurnTakingPGlite {
  readonly #pglite: PGlite;
  readonly #pool: PGlitePool;
  #turn: PostgresPoolClient | undefined;

  constructor(pglite: PGlite, pool: PGlitePool) {
    this.#pglite = pglite;
    this.#pool = pool;
  }

  get waitReady(): Promise<void> {
    return this.#pglite.waitReady;
  }

  isInTransaction(): boolean {
    return this.#pglite.isInTransaction();
  }

  async runExclusive<T>(work: () => Promise<T>): Promise<T> {
    this.#turn ??= await this.#pool.connect();
    try {
      return await work();
    } finally {
      this.#endTurnUnlessInTransaction();
    }
  }

  execProtocolRawStream(...args: Parameters<PGlite['execProtocolRawStream']>) {
    return this.#pglite.execProtocolRawStream(...args);
  }

  /** The socket server's rollback of a departed client's transaction: in the turn that client held. */
  async exec(query: string) {
    this.#turn ??= await this.#pool.connect();
    try {
      return await this.#pglite.exec(query);
    } finally {
      this.#endTurnUnlessInTransaction();
    }
  }

  /** Resets every setting a departed client changed (SET, SET ROLE): they would stay in force for the service. */
  async resetSettings(): Promise<void> {
    const turn = await this.#pool.connect();
    try {
      if (!this.#pglite.isInTransaction()) await this.#pglite.exec('SET SESSION AUTHORIZATION DEFAULT; RESET ALL');
    } finally {
      turn.release();
    }
  }

  #endTurnUnlessInTransaction(): void {
    if (this.#pglite.isInTransaction()) return;
    const turn = this.#turn;
    this.#turn = undefined;
    turn?.release();
  }
}

/**
 * Serves `pglite` on 127.0.0.1:`port` (trust authentication, any user name and database name):
 * PGlite's socket server on a Unix socket of a private directory, behind a front that lets only
 * well-formed protocol messages through and ends a client whose transaction stays open longer than
 * `transactionLimitMs` (wire-guard.ts).
 */
export async function serveOverWire(
  pglite: PGlite,
  pool: PGlitePool,
  port: number,
  transactionLimitMs = TRANSACTION_LIMIT_MS,
): Promise<WireServer> {
  // Loaded only when asked for (development): a service without PGLITE_SOCKET_PORT never needs it.
  const { PGLiteSocketServer } = await import('@electric-sql/pglite-socket');
  const dir = mkdtempSync(path.join(tmpdir(), 'pglite-wire-'));
  const socketPath = path.join(dir, 'pglite.sock');
  const turns = new TurnTakingPGlite(pglite, pool);
  const server = new PGLiteSocketServer({
    db: turns as unknown as PGlite,
    path: socketPath,
    maxConnections: 8,
  });
  await server.start();
  let guard: { close(): Promise<void> };
  try {
    guard = await startWireGuard(port, socketPath, transactionLimitMs, () => turns.resetSettings());
  } catch (err) {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
    const code = (err as NodeJS.ErrnoException).code;
    const why =
      code === 'EADDRINUSE' ? 'address already in use' : code === 'EACCES' ? 'permission denied' : String(err);
    throw new ConfigError(
      `PGLITE_SOCKET_PORT ${port} on 127.0.0.1 cannot be opened (${why}): set PGLITE_SOCKET_PORT to a free port`,
    );
  }
  return {
    port,
    close: async () => {
      await guard.close();
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * With PGLITE_SOCKET_PORT (the embedded database, never in production: config refuses it otherwise),
 * serves the app's database to psql until the app closes, and says how to connect in the log. Call
 * it before `app.listen` (it adds the app's onClose hook).
 */
export async function serveDatabaseToPsql(
  app: FastifyInstance,
  config: Readonly<Config>,
  database: DatabaseHandle,
): Promise<WireServer | undefined> {
  if (config.pgliteSocketPort === undefined || database.serveOverWire === undefined) return undefined;
  const wire = await database.serveOverWire(config.pgliteSocketPort);
  app.addHook('onClose', () => wire.close());
  app.log.info(
    `The embedded database answers the PostgreSQL protocol on 127.0.0.1:${wire.port}: psql -h 127.0.0.1 -p ${wire.port} (any user name, no password; development only)`,
  );
  return wire;
}
