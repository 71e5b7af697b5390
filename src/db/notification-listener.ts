import type { FastifyBaseLogger } from 'fastify';
import pg from 'pg';

const FIRST_RETRY_DELAY_MS = 1_000;
const MAX_RETRY_DELAY_MS = 30_000;
/** While notifications do not arrive, how often each subscriber reads what they would have said. */
export const FALLBACK_POLL_MS = 1_000;
/** How the connection shows in pg_stat_activity. */
export const LISTENER_APPLICATION_NAME = 'notification-listener';

/** One user of the listener: the channels it hears, and how it catches up on what it missed. */
export interface NotificationSubscriber {
  /** Names the subscriber in log lines ("session revocations"). */
  name: string;
  /** The channels to LISTEN on (plain identifiers). */
  channels: readonly string[];
  onNotification(channel: string, payload: string | undefined): void;
  /**
   * Runs after every (re)connection, once LISTEN is in place and before `listening` turns true:
   * whatever was announced while no connection listened was missed, so catch up here. It may query
   * through `client`. A throw counts as a failed connection (closed and retried).
   */
  onConnected?(client: pg.Client): Promise<void> | void;
  /** Reads what the notifications would have said; called every FALLBACK_POLL_MS while they do not arrive. */
  poll?(): Promise<void>;
  /** Whether this subscriber's notifications fail to come even while listening (nothing announces them). */
  missesNotifications?(): boolean;
}

export interface NotificationListenerOptions {
  /** The PostgreSQL connection string; undefined on PGlite (one process: nothing to listen to, never listening). */
  url: string | undefined;
  /** Names the listener in log lines ("notification listener"). */
  name: string;
  log: FastifyBaseLogger;
}

/**
 * The process's one dedicated PostgreSQL connection that LISTENs on the channels of all its
 * subscribers, and the one fallback for when it cannot: after a loss it reconnects after 1 s,
 * doubling up to 30 s while the database stays away, and calls each subscriber's `onConnected` every
 * time so that it catches up on what it missed; while not listening (and for a subscriber whose
 * notifications never come), each subscriber's `poll` runs every FALLBACK_POLL_MS, one at a time per
 * subscriber. Subscribers subscribe before `start`.
 */
export class NotificationListener {
  #client: pg.Client | undefined;
  #listening = false;
  #started = false;
  #closed = false;
  #reconnectTimer: NodeJS.Timeout | undefined;
  #pollTimer: NodeJS.Timeout | undefined;
  #retryDelayMs = FIRST_RETRY_DELAY_MS;
  readonly #subscribers = new Set<NotificationSubscriber>();
  readonly #polling = new Set<NotificationSubscriber>();

  readonly #options: NotificationListenerOptions;

  constructor(options: NotificationListenerOptions) {
    this.#options = options;
  }

  /** Whether there is a database to listen to (PostgreSQL). */
  get connects(): boolean {
    return this.#options.url !== undefined;
  }

  /** Whether the connection is up, listening, and caught up (every onConnected done). */
  get listening(): boolean {
    return this.#listening;
  }

  /** Adds a subscriber (before `start`); returns its removal. */
  subscribe(subscriber: NotificationSubscriber): () => void {
    if (this.#started) throw new Error(`${this.#options.name}: ${subscriber.name} subscribed after start`);
    for (const channel of subscriber.channels) {
      if (!/^[a-z_][a-z0-9_]*$/.test(channel)) throw new Error(`not a plain channel name: ${channel}`);
    }
    this.#subscribers.add(subscriber);
    return () => {
      this.#subscribers.delete(subscriber);
    };
  }

  /** Starts the fallback poll and connects; resolves once the first attempt is settled (a failure schedules a retry, it does not throw). */
  async start(): Promise<void> {
    if (this.#closed || this.#started) return;
    this.#started = true;
    this.#pollTimer = setInterval(() => this.#poll(), FALLBACK_POLL_MS);
    this.#pollTimer.unref();
    if (this.connects) await this.#connect();
  }

  #poll(): void {
    for (const subscriber of this.#subscribers) {
      if (subscriber.poll === undefined || this.#polling.has(subscriber)) continue;
      if (this.#listening && subscriber.missesNotifications?.() !== true) continue;
      this.#polling.add(subscriber);
      subscriber
        .poll()
        .catch((err: Error) =>
          this.#options.log.debug({ err: { message: err.message } }, `${subscriber.name}: poll failed`),
        )
        .finally(() => this.#polling.delete(subscriber));
    }
  }

  async #connect(): Promise<void> {
    const { url, log, name } = this.#options;
    const client = new pg.Client({
      connectionString: url,
      connectionTimeoutMillis: 5_000,
      application_name: LISTENER_APPLICATION_NAME,
      // A silently dead connection (a dropped NAT entry, a failover) is found within a minute.
      keepAlive: true,
      keepAliveInitialDelayMillis: 30_000,
    });
    this.#client = client;
    client.on('notification', (msg) => {
      for (const subscriber of this.#subscribers) {
        if (!subscriber.channels.includes(msg.channel)) continue;
        try {
          subscriber.onNotification(msg.channel, msg.payload);
        } catch (err) {
          log.error({ err }, `${subscriber.name}: notification handler failed`);
        }
      }
    });
    client.on('error', (err) => this.#lost(client, err));
    client.on('end', () => this.#lost(client));
    try {
      await client.connect();
      const channels = new Set([...this.#subscribers].flatMap((s) => s.channels));
      for (const channel of channels) await client.query(`listen ${channel}`);
      for (const subscriber of this.#subscribers) await subscriber.onConnected?.(client);
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
    clearInterval(this.#pollTimer);
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
