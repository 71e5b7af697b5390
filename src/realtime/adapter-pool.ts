import pg from 'pg';
import type { FanoutLink } from './fanout-links.ts';

/**
 * The connections of the socket.io Postgres adapter: a small pool of its own, which it can close
 * at any moment. The adapter takes a connection for LISTEN when it starts, asynchronously; a server
 * closed before that finished would otherwise get it afterwards and keep it forever (pg's end()
 * waits for every checked-out connection). Here a connection given out after close is released at
 * once, and the ones still out at close are destroyed.
 *
 * The connection it LISTENs on is watched: `listening` is up once its LISTEN succeeded and down
 * when that connection ends (the adapter then takes another one).
 */
export class AdapterPool {
  readonly #pool: pg.Pool;
  readonly #out = new Set<pg.PoolClient>();
  #closed = false;
  readonly #listening: FanoutLink;
  readonly #onNotification: (payload: string) => void;

  /** `onNotification` hears every notification the LISTEN connection receives, as the adapter does. */
  constructor(connectionString: string, listening: FanoutLink, onNotification: (payload: string) => void) {
    this.#listening = listening;
    this.#onNotification = onNotification;
    // A frozen database host must not hold a connection attempt forever: the adapter tries again.
    this.#pool = new pg.Pool({
      connectionString,
      max: 3,
      idleTimeoutMillis: 30_000,
      connectionTimeoutMillis: 2_000,
      application_name: 'realtime-adapter',
    });
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
      if (listener === client) this.#listening.down();
      release(destroy);
    };
    // Only the adapter's LISTEN connection is taken with connect() (its other queries use query()).
    let listener: pg.PoolClient | undefined;
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
      const result = query(...args);
      if (typeof args[0] === 'string' && args[0].startsWith('LISTEN ') && result instanceof Promise) {
        result.then(
          () => {
            if (!ended && !this.#closed && listener !== client) {
              listener = client;
              client.on('notification', (msg: pg.Notification) => this.#onNotification(msg.payload ?? ''));
              this.#listening.up();
            }
          },
          () => {},
        );
      }
      return result;
    };
    let ended = false;
    client.on('end', () => {
      ended = true;
      if (listener === client) this.#listening.down();
      // The adapter drops a lost LISTEN connection without releasing it: its place in the pool is
      // freed here, or after three losses the adapter could never connect again.
      if (this.#out.has(client)) client.release(true);
    });
    return client;
  }

  async end(): Promise<void> {
    this.#closed = true;
    for (const client of [...this.#out]) client.release(true);
    await this.#pool.end();
  }
}
