import type { FastifyBaseLogger } from 'fastify';
import pg from 'pg';
import type { DatabaseConfig } from '../config.ts';
import { listRealtimePolicies, type PolicyRow } from '../db/repositories/realtime-policies.ts';
import type { Executor } from '../db/schema.ts';

export const POLICY_CHANNEL = 'realtime_policies_changed';
/** Freshness without notifications (PGlite, or while the listening connection is down). */
export const POLICY_TTL_MS = 1_000;
/** With a live LISTEN connection the cache is still reloaded this often, as a safety net. */
const LISTENING_TTL_MS = 60_000;
const FIRST_RETRY_DELAY_MS = 1_000;
const MAX_RETRY_DELAY_MS = 30_000;

export interface RealtimePermissions {
  subscribe: { policies: PolicyRow[] };
  publish: { policies: PolicyRow[] };
}

/**
 * The realtime policies, served from memory. On PostgreSQL a dedicated connection LISTENs for the
 * event trigger's notification, so that a policy created, altered or dropped anywhere is seen by
 * every instance within a round trip; without it (PGlite, or the connection down) entries live
 * POLICY_TTL_MS. Concurrent misses share one load, and a load overtaken by a notification is not
 * kept.
 */
export class PolicyCache {
  #value: RealtimePermissions | undefined;
  #loadedAt = 0;
  #loading: Promise<RealtimePermissions> | undefined;
  /** Bumped by every notification: a load that started under an older generation is stale. */
  #generation = 0;
  #listener: pg.Client | undefined;
  #listening = false;
  /** Whether the database has the event trigger that announces policy changes. */
  #notifying = false;
  #closed = false;
  #reconnectTimer: NodeJS.Timeout | undefined;
  #retryDelayMs = FIRST_RETRY_DELAY_MS;

  constructor(
    private readonly db: Executor,
    private readonly database: DatabaseConfig,
    private readonly log: FastifyBaseLogger,
  ) {}

  /** Starts listening for changes (PostgreSQL only); resolves once the first attempt is settled. */
  async start(): Promise<void> {
    if (this.database.kind === 'postgres') await this.#listen(this.database.url);
  }

  get(): Promise<RealtimePermissions> | RealtimePermissions {
    const ttl = this.#listening && this.#notifying ? LISTENING_TTL_MS : POLICY_TTL_MS;
    if (this.#value !== undefined && Date.now() - this.#loadedAt < ttl) return this.#value;
    if (this.#loading === undefined) {
      const loading = this.#load().finally(() => {
        if (this.#loading === loading) this.#loading = undefined;
      });
      this.#loading = loading;
    }
    return this.#loading;
  }

  /** Forgets the cached policies (a notification, or a reconnection after missed ones). */
  invalidate(): void {
    this.#generation++;
    this.#value = undefined;
    // A load already under way may have read the old policies: later callers start a new one.
    this.#loading = undefined;
  }

  async #load(): Promise<RealtimePermissions> {
    const generation = this.#generation;
    const rows = await listRealtimePolicies(this.db);
    const value: RealtimePermissions = {
      subscribe: { policies: rows.filter((r) => r.tableName === 'channels') },
      publish: { policies: rows.filter((r) => r.tableName === 'messages') },
    };
    if (generation === this.#generation) {
      this.#value = value;
      this.#loadedAt = Date.now();
    }
    return value;
  }

  async #listen(url: string): Promise<void> {
    const client = new pg.Client({
      connectionString: url,
      connectionTimeoutMillis: 5_000,
      // A silently dead connection (a dropped NAT entry, a failover) is found within a minute.
      keepAlive: true,
      keepAliveInitialDelayMillis: 30_000,
    });
    this.#listener = client;
    client.on('notification', (msg) => {
      if (msg.channel === POLICY_CHANNEL) this.invalidate();
    });
    client.on('error', (err) => this.#lost(client, err));
    client.on('end', () => this.#lost(client));
    try {
      await client.connect();
      await client.query(`listen ${POLICY_CHANNEL}`);
      const trigger = await client.query(
        "select 1 from pg_event_trigger where evtname = 'realtime_policy_change' and evtenabled <> 'D'",
      );
      // Without the trigger (created only by a superuser) nothing is ever announced: keep the short TTL.
      this.#notifying = trigger.rowCount === 1;
      this.#listening = true;
      if (this.#retryDelayMs !== FIRST_RETRY_DELAY_MS) this.log.info('realtime policy listener back');
      this.#retryDelayMs = FIRST_RETRY_DELAY_MS;
      // Changes made while no connection was listening were missed.
      this.invalidate();
    } catch (err) {
      this.#lost(client, err as Error);
    }
  }

  #lost(client: pg.Client, err?: Error): void {
    if (this.#listener !== client) return;
    this.#listener = undefined;
    this.#listening = false;
    client.removeAllListeners();
    client.on('error', () => {});
    void client.end().catch(() => {});
    if (this.#closed) return;
    // Retries after 1 s, doubling up to 30 s while the database stays away; warns on the first loss only.
    const delay = this.#retryDelayMs;
    this.#retryDelayMs = Math.min(delay * 2, MAX_RETRY_DELAY_MS);
    if (delay === FIRST_RETRY_DELAY_MS) {
      this.log.warn({ err: err ? { message: err.message } : undefined }, 'realtime policy listener lost; retrying');
    }
    this.#reconnectTimer = setTimeout(() => {
      if (!this.#closed && this.database.kind === 'postgres') void this.#listen(this.database.url);
    }, delay);
    this.#reconnectTimer.unref();
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#reconnectTimer);
    const client = this.#listener;
    this.#listener = undefined;
    this.#listening = false;
    if (client) {
      client.removeAllListeners();
      client.on('error', () => {});
      await client.end().catch(() => {});
    }
  }
}
