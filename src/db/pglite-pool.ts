import type { PGlite, Results } from '@electric-sql/pglite';
import type { PostgresPool, PostgresPoolClient, PostgresQueryResult } from 'kysely';
import type { PoolStats } from './database.ts';

/**
 * A pg-Pool look-alike over one PGlite instance, for Kysely's PostgresDialect.
 *
 * PGlite is a single Postgres session. If two requests shared it freely, a statement of one
 * could run inside the other's open transaction and commit or roll back with it. So this pool
 * has exactly one client and lends it to one borrower at a time: Kysely holds a connection for
 * the whole of a transaction, which makes every transaction (and every lone query) run alone.
 */
export class PGlitePool implements PostgresPool {
  readonly #client: PostgresPoolClient;
  #tail: Promise<void> = Promise.resolve();
  #ended = false;
  /** Borrowers waiting for the session, and whether it is lent now. */
  #waiting = 0;
  #lent = false;
  readonly #pglite: PGlite;
  /** pg.Pool's options, which Kysely reads to open a side connection that cancels a query; PGlite has none. */
  readonly options = {};

  constructor(pglite: PGlite) {
    this.#pglite = pglite;
    this.#client = {
      query: ((sql: string, parameters: ReadonlyArray<unknown>) =>
        runQuery(pglite, sql, parameters)) as PostgresPoolClient['query'],
      release: () => {
        throw new Error('PGlitePool client released before it was lent');
      },
    };
  }

  /**
   * Runs `prepare` each time the session is about to be lent, in that turn, before the borrower has
   * it (the wire server resets what a departed psql left: pglite-wire.ts). It reports its own errors.
   */
  beforeEachLend(prepare: () => Promise<void>): void {
    this.#beforeLend = prepare;
  }

  #beforeLend: (() => Promise<void>) | undefined;

  /** Waits until the session is free, then lends it; `release()` hands it to the next borrower. */
  async connect(): Promise<PostgresPoolClient> {
    if (this.#ended) throw new Error('the embedded database is closed');
    let release!: () => void;
    const turn = new Promise<void>((resolve) => {
      release = resolve;
    });
    const previous = this.#tail;
    this.#tail = previous.then(() => turn);
    this.#waiting += 1;
    await previous;
    this.#waiting -= 1;
    await this.#beforeLend?.().catch(() => {});
    this.#lent = true;
    let released = false;
    this.#client.release = () => {
      if (released) return;
      released = true;
      this.#lent = false;
      release();
    };
    return this.#client;
  }

  /** As a pg Pool counts them: the one session (none once ended), idle or lent, and the borrowers queued for it. */
  get stats(): PoolStats {
    const total = this.#ended ? 0 : 1;
    return { total, idle: this.#lent ? 0 : total, waiting: this.#waiting };
  }

  /** Closes PGlite after the borrowers already queued have finished. */
  async end(): Promise<void> {
    if (this.#ended) return;
    this.#ended = true;
    await this.#tail;
    await this.#pglite.close();
  }
}

const writeCommands = new Set(['INSERT', 'UPDATE', 'DELETE', 'MERGE']);

async function runQuery(
  pglite: PGlite,
  sql: string,
  parameters: ReadonlyArray<unknown>,
): Promise<PostgresQueryResult<unknown>> {
  // Without parameters the simple protocol is used, which (like pg) accepts several statements.
  const result: Results =
    parameters.length === 0
      ? ((await pglite.exec(sql)).at(-1) ?? { rows: [], fields: [] })
      : await pglite.query(sql, [...parameters]);
  const command = (result.command ?? '').toUpperCase();
  return {
    command: (writeCommands.has(command) ? command : 'SELECT') as PostgresQueryResult<unknown>['command'],
    rowCount: result.affectedRows ?? result.rowCount ?? result.rows.length,
    rows: result.rows,
  };
}
