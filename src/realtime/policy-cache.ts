import type { FastifyBaseLogger } from 'fastify';
import type { DatabaseConfig } from '../config.ts';
import { NotificationListener } from '../db/notification-listener.ts';
import { listRealtimePolicies, type PolicyRow } from '../db/repositories/realtime-policies.ts';
import type { Executor } from '../db/schema.ts';

export const POLICY_CHANNEL = 'realtime_policies_changed';
/** Freshness without notifications (PGlite, or while the listening connection is down). */
export const POLICY_TTL_MS = 1_000;
/** With a live LISTEN connection the cache is still reloaded this often, as a safety net. */
const LISTENING_TTL_MS = 60_000;

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
  #listener: NotificationListener | undefined;
  /** Whether the database has the event trigger that announces policy changes. */
  #notifying = false;

  readonly #db: Executor;
  readonly #database: DatabaseConfig;
  readonly #log: FastifyBaseLogger;

  constructor(db: Executor, database: DatabaseConfig, log: FastifyBaseLogger) {
    this.#db = db;
    this.#database = database;
    this.#log = log;
  }

  /** Starts listening for changes (PostgreSQL only); resolves once the first attempt is settled. */
  async start(): Promise<void> {
    if (this.#database.kind !== 'postgres' || this.#listener !== undefined) return;
    this.#listener = new NotificationListener({
      url: this.#database.url,
      channels: [POLICY_CHANNEL],
      name: 'realtime policy listener',
      log: this.#log,
      onNotification: () => this.invalidate(),
      onConnected: async (client) => {
        const trigger = await client.query(
          "select 1 from pg_event_trigger where evtname = 'realtime_policy_change' and evtenabled <> 'D'",
        );
        // Without the trigger (created only by a superuser) nothing is ever announced: keep the short TTL.
        this.#notifying = trigger.rowCount === 1;
        // Changes made while no connection was listening were missed.
        this.invalidate();
      },
    });
    await this.#listener.start();
  }

  get(): Promise<RealtimePermissions> | RealtimePermissions {
    const ttl = this.#listener?.listening === true && this.#notifying ? LISTENING_TTL_MS : POLICY_TTL_MS;
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
    const rows = await listRealtimePolicies(this.#db);
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

  async close(): Promise<void> {
    await this.#listener?.close();
  }
}
