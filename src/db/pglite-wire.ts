import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { PGlite } from '@electric-sql/pglite';
import type { FastifyInstance } from 'fastify';
import type { PostgresPoolClient } from 'kysely';
import { type Config, ConfigError } from '../config.ts';
import type { DatabaseHandle } from './database.ts';
import type { PGlitePool } from './pglite-pool.ts';
import { MAX_CLIENTS, startWireGuard } from './wire-guard.ts';

/** How long a client may hold the session (the service's requests wait meanwhile). */
export const HOLD_LIMIT_MS = 30_000;

/** How the embedded database is served over the wire. */
export interface WireOptions {
  /** How long one client may hold the session: one statement, an open transaction, a sequence without its Sync. */
  holdLimitMs?: number;
  /** Hears a failure of the clean-up after a client left (the service's next statements may see its state). */
  onCleanupError?: (err: unknown) => void;
}

/** The embedded database served over the PostgreSQL protocol (PGLITE_SOCKET_PORT, development only). */
export interface WireServer {
  port: number;
  close(): Promise<void>;
}

/** Messages of the extended protocol, which leave PGlite mid-sequence until their Sync. */
const EXTENDED_TYPES = new Set('BCDEHP'.split('').map((c) => c.charCodeAt(0)));

/** A simple-protocol Query message. */
function queryMessage(text: string): Uint8Array {
  const body = Buffer.from(`${text}\0`);
  const head = Buffer.alloc(5);
  head.write('Q', 0);
  head.writeInt32BE(body.length + 4, 1);
  return Buffer.concat([head, body]);
}

/** How long the socket server has to let go of a departed client before it is rolled back here. */
const LET_GO_MS = 100;

/** Once no client is connected, what clients leave behind on a session (each statement on its own). */
const DISCARD_CLIENT_STATE = [
  'DEALLOCATE ALL',
  'CLOSE ALL',
  'UNLISTEN *',
  'SELECT pg_advisory_unlock_all()',
  'DISCARD TEMP',
  'DISCARD SEQUENCES',
];

/**
 * What the socket server runs its clients' messages on: PGlite itself, but each message in a turn of
 * the service's own pool. PGlite is one session, and the service's transactions span several
 * statements, so a message from psql must never land inside one of them; and while psql has a
 * transaction open (BEGIN without COMMIT yet), or has sent extended-protocol messages whose Sync has
 * not come yet, the turn is kept, so that no statement of the service lands inside psql's (and the
 * socket server keeps the session for that client: it asks `isInTransaction`).
 *
 * What a client leaves on the session is undone before the service has it again: once the last
 * client has gone, every lend of the pool first resets the session if a client ran anything since
 * the last reset (pool.beforeEachLend); a client that leaves while others stay has its transaction
 * rolled back and the settings reset at once.
 */
class TurnTakingPGlite {
  readonly #pglite: PGlite;
  readonly #pool: PGlitePool;
  readonly #onCleanupError: (err: unknown) => void;
  #turn: PostgresPoolClient | undefined;
  /** Counts the turns taken: tells the turn a departed client held from one another client took since. */
  #turnsTaken = 0;
  /** Extended-protocol messages ran, their Sync not yet: PGlite is inside an implicit transaction. */
  #midSequence = false;
  /** A client's message ran since the session was last reset. */
  #dirty = false;
  #clients = 0;
  /** The client message running now, if any. */
  #inFlight: Promise<unknown> = Promise.resolve();
  /** The role the session started as, by its oid: a client may rename it. */
  #sessionUserOid = 10;

  constructor(pglite: PGlite, pool: PGlitePool, onCleanupError: (err: unknown) => void) {
    this.#pglite = pglite;
    this.#pool = pool;
    this.#onCleanupError = onCleanupError;
    pool.beforeEachLend(() => this.#resetIfNoClient());
  }

  get waitReady(): Promise<void> {
    return this.#pglite.waitReady.then(async () => {
      const turn = await this.#pool.connect();
      try {
        const { rows } = await this.#pglite.query<{ oid: number }>(
          'select oid::int as oid from pg_roles where rolname = session_user',
        );
        this.#sessionUserOid = rows[0]?.oid ?? this.#sessionUserOid;
      } finally {
        turn.release();
      }
    });
  }

  /**
   * True while a client holds the session (inside its transaction or unsynced sequence): the socket
   * server then serves only that client. Never for the service's own transactions: the socket server
   * would hold back the other clients' messages and not look at them again.
   */
  isInTransaction(): boolean {
    return this.#turn !== undefined && this.#holding();
  }

  #holding(): boolean {
    return this.#midSequence || this.#pglite.isInTransaction();
  }

  async #takeTurn(): Promise<void> {
    if (this.#turn !== undefined) return;
    this.#turn = await this.#pool.connect();
    this.#turnsTaken++;
  }

  async runExclusive<T>(work: () => Promise<T>): Promise<T> {
    await this.#takeTurn();
    const running = work();
    this.#inFlight = running.catch(() => {});
    try {
      return await running;
    } finally {
      this.#endTurnUnlessHeld();
    }
  }

  execProtocolRawStream(...[message, options]: Parameters<PGlite['execProtocolRawStream']>) {
    const type = message[0] as number;
    if (EXTENDED_TYPES.has(type)) this.#midSequence = true;
    else if (type !== 'X'.charCodeAt(0)) this.#midSequence = false; // Sync, Query, FunctionCall end it
    this.#dirty = true;
    return this.#pglite.execProtocolRawStream(message, options);
  }

  /** The socket server's rollback of a departed client's transaction: in the turn that client held. */
  async exec(query: string) {
    if (query !== 'ROLLBACK') throw new Error(`unexpected statement from the socket server: ${query}`);
    await this.#takeTurn();
    try {
      await this.#rollback();
      return [];
    } finally {
      this.#endTurnUnlessHeld();
    }
  }

  clientCame(): void {
    this.#clients++;
  }

  /**
   * A client left (`leftOpen`: inside a transaction or an unsynced sequence, by what the front saw).
   * Its transaction is rolled back in the turn it held; the settings are reset now if other clients
   * stay, and everything before the service's next turn if none does.
   */
  async clientGone(leftOpen: boolean): Promise<void> {
    this.#clients--;
    this.#dirty = true;
    try {
      if (leftOpen) {
        // The socket server rolls back the transaction of a client it lets go of (exec, above), and
        // then serves the others; this is the net for when it did not: the turn the client held when
        // it left is still held. Another client's turn, taken meanwhile, is that client's own.
        const turnLeft = this.#turn === undefined ? undefined : this.#turnsTaken;
        await new Promise((resolve) => setTimeout(resolve, LET_GO_MS));
        await this.#inFlight;
        if (turnLeft !== undefined && turnLeft === this.#turnsTaken && this.isInTransaction()) {
          try {
            await this.#rollback();
          } finally {
            this.#endTurnUnlessHeld();
          }
        }
      }
      const turn = await this.#pool.connect(); // with no client left, this lend resets everything
      try {
        if (this.#clients > 0 && !this.#pglite.isInTransaction()) await this.#resetSettings();
      } finally {
        turn.release();
      }
    } catch (err) {
      this.#onCleanupError(err);
    }
  }

  /** Before a lend of the pool: with no client connected, undoes whatever clients left on the session. */
  async #resetIfNoClient(): Promise<void> {
    if (!this.#dirty || this.#clients > 0) return;
    try {
      if (this.#holding()) await this.#rollback();
      await this.#resetSettings(DISCARD_CLIENT_STATE);
      this.#dirty = false;
    } catch (err) {
      this.#onCleanupError(err); // still dirty: tried again at the next lend
    }
  }

  /**
   * The session user and every setting back to the service's own, then `more`: each statement on
   * its own, all of them tried (one failing does not undo or skip the others), the first failure
   * thrown at the end. SET SESSION AUTHORIZATION DEFAULT does nothing on PGlite: the role is named,
   * as it is called now.
   */
  async #resetSettings(more: readonly string[] = []): Promise<void> {
    const { rows } = await this.#pglite.query<{ name: string }>('select rolname as name from pg_roles where oid = $1', [
      this.#sessionUserOid,
    ]);
    const name = rows[0]?.name;
    const statements = [
      ...(name === undefined ? [] : [`SET SESSION AUTHORIZATION "${name.replaceAll('"', '""')}"`]),
      'RESET ALL',
      ...more,
    ];
    let failure: unknown =
      name === undefined ? new Error(`the session's role (oid ${this.#sessionUserOid}) is gone`) : undefined;
    for (const statement of statements) {
      await this.#pglite.exec(statement).catch((err: unknown) => {
        failure ??= err;
      });
    }
    if (failure !== undefined) throw failure;
  }

  /** A simple-protocol ROLLBACK: it ends an explicit transaction and an implicit (unsynced) one alike. */
  async #rollback(): Promise<void> {
    await this.#pglite.execProtocolRaw(queryMessage('ROLLBACK'));
    this.#midSequence = false;
  }

  #endTurnUnlessHeld(): void {
    if (this.#holding()) return;
    const turn = this.#turn;
    this.#turn = undefined;
    turn?.release();
  }
}

/**
 * Serves `pglite` on 127.0.0.1:`port` (trust authentication, any user name and database name):
 * PGlite's socket server on a Unix socket of a private directory, behind a front that lets only
 * well-formed protocol messages through and ends a client that holds the session longer than
 * `holdLimitMs` (wire-guard.ts).
 */
export async function serveOverWire(
  pglite: PGlite,
  pool: PGlitePool,
  port: number,
  { holdLimitMs = HOLD_LIMIT_MS, onCleanupError = () => {} }: WireOptions = {},
): Promise<WireServer> {
  // Loaded only when asked for (development): a service without PGLITE_SOCKET_PORT never needs it.
  const { PGLiteSocketServer } = await import('@electric-sql/pglite-socket');
  const dir = mkdtempSync(path.join(tmpdir(), 'pglite-wire-'));
  const socketPath = path.join(dir, 'pglite.sock');
  const turns = new TurnTakingPGlite(pglite, pool, onCleanupError);
  const server = new PGLiteSocketServer({
    db: turns as unknown as PGlite,
    path: socketPath,
    // Above the front's own limit: the socket server lets go of a departed client a little later.
    maxConnections: 2 * MAX_CLIENTS,
  });
  await server.start();
  let guard: { close(): Promise<void> };
  try {
    guard = await startWireGuard(port, socketPath, holdLimitMs, {
      came: () => turns.clientCame(),
      gone: (leftOpen) => void turns.clientGone(leftOpen),
    });
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
  const wire = await database.serveOverWire(config.pgliteSocketPort, {
    onCleanupError: (err) =>
      app.log.error({ err }, 'The embedded database could not be reset after a psql client left'),
  });
  app.addHook('onClose', () => wire.close());
  app.log.info(
    `The embedded database answers the PostgreSQL protocol on 127.0.0.1:${wire.port}: psql -h 127.0.0.1 -p ${wire.port} (any user name, no password; development only)`,
  );
  return wire;
}
