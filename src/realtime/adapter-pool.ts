import pg from 'pg';

/**
 * The connections of the socket.io Postgres adapter: a small pool of its own, which it can close
 * at any moment. The adapter takes a connection for LISTEN when it starts, asynchronously; a server
 * closed before that finished would otherwise get it afterwards and keep it forever (pg's end()
 * waits for every checked-out connection). Here a connection given out after close is released at
 * once, and the ones still out at close are destroyed.
 */
export class AdapterPool {
  readonly #pool: pg.Pool;
  readonly #out = new Set<pg.PoolClient>();
  #closed = false;

  constructor(connectionString: string) {
    this.#pool = new pg.Pool({ connectionString, max: 3, idleTimeoutMillis: 30_000 });
    this.#pool.on('error', () => {});
    this.#pool.on('connect', (client) => client.on('error', () => {}));
  }

  query(text: string, values?: unknown[]): Promise<pg.QueryResult> {
    return this.#pool.query(text, values);
  }

  /** A connection; after close(), a promise that never settles (the adapter then stays idle). */
  async connect(): Promise<pg.PoolClient> {
    const never = new Promise<pg.PoolClient>(() => {});
    if (this.#closed) return never;
    const client = await this.#pool.connect();
    if (this.#closed) {
      client.release(true);
      return never;
    }
    this.#out.add(client);
    const release = client.release.bind(client);
    client.release = (destroy?: boolean | Error) => {
      this.#out.delete(client);
      release(destroy);
    };
    return client;
  }

  async end(): Promise<void> {
    this.#closed = true;
    for (const client of [...this.#out]) client.release(true);
    await this.#pool.end();
  }
}
