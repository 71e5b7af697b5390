import type { FastifyBaseLogger } from 'fastify';
import { sql } from 'kysely';
import { FALLBACK_POLL_MS, type NotificationListener } from '../db/notification-listener.ts';
import { listRealtimePolicies, type PolicyRow } from '../db/repositories/realtime-policies.ts';
import type { Executor } from '../db/schema.ts';

export const POLICY_CHANNEL = 'realtime_policies_changed';
/** Announces a change to realtime.channels made through the API (no policy changed, but who may subscribe did). */
export const CHANNELS_CHANNEL = 'realtime_channels_changed';
/** Freshness without notifications (PGlite, or while the listening connection is down): the fallback poll's period. */
export const POLICY_TTL_MS = FALLBACK_POLL_MS;
/** With a live LISTEN connection the cache is still reloaded this often, as a safety net. */
const LISTENING_TTL_MS = 60_000;

export interface RealtimePermissions {
  subscribe: { policies: PolicyRow[] };
  publish: { policies: PolicyRow[] };
}

/**
 * The realtime policies, served from memory, and the news that who may subscribe may have changed.
 * On PostgreSQL the process's LISTEN connection (src/db/notification-listener.ts) hears the event
 * trigger's notification, so that a policy created, altered or dropped anywhere is seen by every
 * instance within a round trip, and channels changed through the API on any instance. Without
 * notifications (PGlite, no event trigger, or the connection down) entries live POLICY_TTL_MS, and
 * the listener's fallback poll reads the policies every POLICY_TTL_MS to notice a change. Concurrent misses share one load, and a load overtaken by a
 * notification is not kept. `onChange` listeners hear of every change (src/realtime/recheck.ts
 * re-checks the live subscriptions).
 */
export class PolicyCache {
  #value: RealtimePermissions | undefined;
  #loadedAt = 0;
  #loading: Promise<RealtimePermissions> | undefined;
  /** Bumped by every notification: a load that started under an older generation is stale. */
  #generation = 0;
  /** Whether the database has the event trigger that announces policy changes. */
  #notifying = false;
  readonly #changeListeners = new Set<() => void>();
  /** The policies last read (JSON), to notice a change when nothing announces one. */
  #lastSeen: string | undefined;
  #started = false;

  readonly #db: Executor;
  readonly #notifications: NotificationListener;
  readonly #unsubscribe: () => void;
  readonly #log: FastifyBaseLogger;

  /** Subscribes to `notifications`, which its owner starts once every subscriber is in. */
  constructor(db: Executor, notifications: NotificationListener, log: FastifyBaseLogger) {
    this.#db = db;
    this.#notifications = notifications;
    this.#log = log;
    this.#unsubscribe = notifications.subscribe({
      name: 'realtime policies',
      channels: [POLICY_CHANNEL, CHANNELS_CHANNEL],
      onNotification: (channel) => {
        if (channel === POLICY_CHANNEL) this.invalidate();
        this.#changed();
      },
      onConnected: async (client) => {
        const trigger = await client.query(
          "select 1 from pg_event_trigger where evtname = 'realtime_policy_change' and evtenabled <> 'D'",
        );
        // Without the trigger (created only by a superuser) nothing is ever announced: keep the short TTL.
        this.#notifying = trigger.rowCount === 1;
        // Changes made while no connection was listening were missed.
        this.invalidate();
        this.#changed();
      },
      poll: () => this.#pollPolicies(),
      missesNotifications: () => !this.#notifying,
    });
  }

  /** Reads the policies a change is compared with; the poll runs from then on. */
  async start(): Promise<void> {
    if (this.#started) return;
    this.#started = true;
    this.#lastSeen = JSON.stringify(await listRealtimePolicies(this.#db).catch(() => undefined));
  }

  /** Whether policy changes arrive as notifications right now. */
  get #announced(): boolean {
    return this.#notifications.listening && this.#notifying;
  }

  /** Calls `listener` whenever the policies or the channels may have changed. Returns an unsubscribe. */
  onChange(listener: () => void): () => void {
    const entry = () => listener();
    this.#changeListeners.add(entry);
    return () => {
      this.#changeListeners.delete(entry);
    };
  }

  /**
   * Tells this instance, and through PostgreSQL every other one, that channels changed (the API's
   * create, update and delete).
   */
  async channelsChanged(): Promise<void> {
    // With a live listener, this instance hears its own announcement like every other one.
    if (!this.#notifications.listening) this.#changed();
    if (!this.#notifications.connects) return;
    // The change is stored already: should the announcement fail, the other instances see it at
    // their next periodic re-check (or when their listener reconnects), and the caller still succeeds.
    await sql`select pg_notify(${CHANNELS_CHANNEL}, '')`.execute(this.#db).catch((err: Error) => {
      this.#log.warn({ err: { message: err.message } }, 'realtime: channel change not announced to other instances');
      this.#changed();
    });
  }

  #changed(): void {
    for (const listener of this.#changeListeners) {
      try {
        listener();
      } catch (err) {
        this.#log.error({ err }, 'realtime policies: a change listener failed');
      }
    }
  }

  /** Where nothing announces policy changes (the listener's fallback poll), reads them and compares. */
  async #pollPolicies(): Promise<void> {
    if (!this.#started) return;
    const seen = JSON.stringify(await listRealtimePolicies(this.#db));
    if (seen === this.#lastSeen) return;
    const first = this.#lastSeen === undefined;
    this.#lastSeen = seen;
    if (!first) {
      this.invalidate();
      this.#changed();
    }
  }

  get(): Promise<RealtimePermissions> | RealtimePermissions {
    const ttl = this.#announced ? LISTENING_TTL_MS : POLICY_TTL_MS;
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
    this.#unsubscribe();
    this.#changeListeners.clear();
  }
}
