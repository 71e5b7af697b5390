import type { FastifyBaseLogger } from 'fastify';
import pg from 'pg';

const FIRST_RETRY_DELAY_MS = 1_000;
const MAX_RETRY_DELAY_MS = 30_000;

export interface NotificationListenerOptions {
  /** The PostgreSQL connection string. */
  url: string;
  /** The channels to LISTEN on (plain identifiers). */
  channels: readonly string[];
  /** Names the listener in log lines ("realtime policy listener"). */
  name: string;
  log: FastifyBaseLogger;
  onNotification(channel: string, payload: string | undefined): void;
  /**
   * Runs after every (re)connection, once LISTEN is in place and before `listening` turns true:
   * whatever was announced while no connection listened was missed, so catch up here. It may query
   * through `client`. A throw counts as a failed connection (closed and retried).
   */
  onConnected?(client: pg.Client): Promise<void> | void;
}

/**
 * One dedicated PostgreSQL connection that LISTENs on a few channels and comes back by itself:
 * after a loss it reconnects after 1 s, doubling up to 30 s while the database stays away, and
 * calls `onConnected` each time so the owner can catch up on what it missed. `listening` says
 * whether notifications are arriving right now (owners fall back to polling while it is false).
 */
export class NotificationListener {
  #client: pg.Client | undefined;
  #listening = false;
  #closed = false;
  #reconnectTimer: NodeJS.Timeout | undefined;
  #retryDelayMs = FIRST_RETRY_DELAY_MS;

  readonly #options: NotificationListenerOptions;

  constructor(options: NotificationListenerOptions) {
    this.#options = options;
    for (const channel of options.channels) {
      if (!/^[a-z_][a-z0-9_]*$/.test(channel)) throw new Error(`not a plain channel name: ${channel}`);
    }
  }

  /** Whether the connection is up, listening, and caught up (onConnected done). */
  get listening(): boolean {
    return this.#listening;
  }

  /** Connects; resolves once the first attempt is settled (a failure schedules a retry, it does not throw). */
  async start(): Promise<void> {
    if (!this.#closed && this.#client === undefined) await this.#connect();
  }

  async #connect(): Promise<void> {
    const { url, channels, onNotification, onConnected, log, name } = this.#options;
    const client = new pg.Client({
      connectionString: url,
      connectionTimeoutMillis: 5_000,
      // A silently dead connection (a dropped NAT entry, a failover) is found within a minute.
      keepAlive: true,
      keepAliveInitialDelayMillis: 30_000,
    });
    this.#client = client;
    client.on('notification', (msg) => {
      try {
        onNotification(msg.channel, msg.payload);
      } catch (err) {
        log.error({ err }, `${name}: notification handler failed`);
      }
    });
    client.on('error', (err) => this.#lost(client, err));
    client.on('end', () => this.#lost(client));
    try {
      await client.connect();
      for (const channel of channels) await client.query(`listen ${channel}`);
      await onConnected?.(client);
      if (this.#client !== client) return;
      this.#listening = true;
      if (this.#retryDelayMs !== FIRST_RETRY_DELAY_MS) log.info(`${name} back`);
      this.#retryDelayMs = FIRST_RETRY_DELAY_MS;
    } catch (err) {
      this.#lost(client, err as Error);
    }
  }

  #lost(client: pg.Client, err?: Error): void {
    if (this.#client !== client) return;
    this.#client = undefined;
    this.#listening = false;
    client.removeAllListeners();
    client.on('error', () => {});
    void client.end().catch(() => {});
    if (this.#closed) return;
    // Warns on the first loss only, while the retries back off.
    const delay = this.#retryDelayMs;
    this.#retryDelayMs = Math.min(delay * 2, MAX_RETRY_DELAY_MS);
    if (delay === FIRST_RETRY_DELAY_MS) {
      this.#options.log.warn(
        { err: err ? { message: err.message } : undefined },
        `${this.#options.name} lost; retrying`,
      );
    }
    this.#reconnectTimer = setTimeout(() => {
      if (!this.#closed) void this.#connect();
    }, delay);
    this.#reconnectTimer.unref();
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#reconnectTimer);
    const client = this.#client;
    this.#client = undefined;
    this.#listening = false;
    if (client) {
      client.removeAllListeners();
      client.on('error', () => {});
      await client.end().catch(() => {});
    }
  }
}
