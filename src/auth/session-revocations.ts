import type { FastifyBaseLogger } from 'fastify';
import type { Kysely } from 'kysely';
import type { DatabaseConfig } from '../config.ts';
import { NotificationListener } from '../db/notification-listener.ts';
import { listRevokedSince, SESSION_REVOKED_CHANNEL } from '../db/repositories/sessions.ts';
import type { Database } from '../db/schema.ts';

/** How many revoked sessions are remembered at most; the oldest make room. */
export const MAX_REVOKED_SESSIONS = 100_000;
/**
 * Added to the access-token lifetime when deciding how far back to look and how long to remember:
 * `revoked_at` comes from the clock of the instance that revoked, which may be a little off ours.
 */
const CLOCK_SKEW_MARGIN_MS = 60_000;
const SESSION_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const FULL_WARNING_INTERVAL_MS = 60_000;

export interface SessionRevocations {
  /** Records revocations this instance made (it does not wait for its own notification). */
  add(sessionIds: readonly string[]): void;
  isRevoked(sessionId: string): boolean;
  /** Called once for each session id newly known as revoked (local or from another instance). Returns an unsubscribe. */
  onRevoked(listener: (sessionId: string) => void): () => void;
  start(): Promise<void>;
  close(): Promise<void>;
}

export interface SessionRevocationsOptions {
  db: Kysely<Database>;
  database: DatabaseConfig;
  /**
   * The process's LISTEN connection (src/db/notification-listener.ts), started by its owner once
   * every subscriber is in. Without one (an instance of its own, as in tests), the revocations open
   * and close their own.
   */
  notifications?: NotificationListener | undefined;
  accessTokenTtlSeconds: number;
  log: FastifyBaseLogger;
  /** Milliseconds since the epoch; the clock access tokens expire by (Date.now by default). */
  now?: () => number;
  /** MAX_REVOKED_SESSIONS unless given (tests). */
  maxEntries?: number;
}

/**
 * The sessions revoked within the last access-token lifetime, in memory, so that a revoked
 * session's access tokens (which stay validly signed until they expire) are refused with one Map
 * lookup. A revoked session never comes back: an entry is only needed while some access token of
 * its session may still be unexpired (revoked time + access-token TTL), and is then dropped.
 *
 * Instances learn of each other's revocations through PostgreSQL NOTIFY on SESSION_REVOKED_CHANNEL,
 * sent by the revoking transaction itself (so a notification means a committed revocation). On
 * start and after every (re)connection of the LISTEN connection the recent revocations are read
 * from the sessions table, and while that connection is down they are read every second (the
 * listener's fallback poll), so an instance that was away misses nothing. On PGlite there is only ever
 * one process: what it revokes itself (add) and what the table held at start are all there is.
 */
export function createSessionRevocations(opts: SessionRevocationsOptions): SessionRevocations {
  const { db, database, log } = opts;
  const now = opts.now ?? Date.now;
  const ttlMs = opts.accessTokenTtlSeconds * 1000;
  const maxEntries = opts.maxEntries ?? MAX_REVOKED_SESSIONS;
  /** Session id -> when the last access token it may have issued expires (ms); oldest insertion first. */
  const revoked = new Map<string, number>();
  const listeners = new Set<(sessionId: string) => void>();
  const ownListener =
    opts.notifications === undefined
      ? new NotificationListener({
          url: database.kind === 'postgres' ? database.url : undefined,
          name: 'session revocation listener',
          log,
        })
      : undefined;
  const notifications = opts.notifications ?? (ownListener as NotificationListener);
  let started = false;
  let loading: Promise<void> | undefined;
  let lastFullWarning = Number.NEGATIVE_INFINITY;
  let closed = false;

  /** Drops expired entries from the front (insertion order is nearly expiry order). */
  function sweep(at: number): void {
    for (const [sessionId, expiresAt] of revoked) {
      if (expiresAt > at) return;
      revoked.delete(sessionId);
    }
  }

  function remember(sessionId: string, expiresAt: number): void {
    const at = now();
    if (expiresAt <= at) return;
    const known = revoked.get(sessionId);
    if (known !== undefined && known > at) {
      if (expiresAt > known) revoked.set(sessionId, expiresAt);
      return;
    }
    if (known !== undefined) revoked.delete(sessionId);
    sweep(at);
    if (revoked.size >= maxEntries) {
      const oldest = revoked.keys().next().value;
      if (oldest !== undefined) revoked.delete(oldest);
      if (at - lastFullWarning >= FULL_WARNING_INTERVAL_MS) {
        lastFullWarning = at;
        log.warn(
          { maxEntries },
          'revoked sessions: the set is full; the oldest unexpired revocations are being forgotten',
        );
      }
    }
    revoked.set(sessionId, expiresAt);
    for (const notify of listeners) {
      try {
        notify(sessionId);
      } catch (err) {
        log.error({ err }, 'revoked sessions: a listener failed');
      }
    }
  }

  /** Reads every session revoked recently enough that one of its access tokens may still be valid. */
  async function loadRecent(): Promise<void> {
    const since = new Date(now() - ttlMs - CLOCK_SKEW_MARGIN_MS);
    const rows = await listRevokedSince(db, since);
    const at = now();
    for (const row of rows) {
      const revokedAt = row.revoked_at?.getTime() ?? at;
      // Never less than a full lifetime from now: harmless (the session stays revoked), and it
      // covers a revoking clock behind ours.
      remember(row.id, Math.max(revokedAt, at) + ttlMs + CLOCK_SKEW_MARGIN_MS);
    }
  }

  /** One load at a time; a caller arriving while one runs shares it. */
  function load(): Promise<void> {
    if (loading === undefined) {
      const started = loadRecent().finally(() => {
        if (loading === started) loading = undefined;
      });
      loading = started;
    }
    return loading;
  }

  const unsubscribe = notifications.subscribe({
    name: 'revoked sessions',
    channels: [SESSION_REVOKED_CHANNEL],
    onNotification: (_channel, payload) => {
      if (payload !== undefined && SESSION_ID.test(payload)) {
        remember(payload, now() + ttlMs + CLOCK_SKEW_MARGIN_MS);
      } else {
        log.warn({ payload: payload?.slice(0, 64) }, 'revoked sessions: a notification without a session id');
      }
    },
    // Revocations committed while no connection listened were not announced to this one. A
    // poll already under way may have read the table before LISTEN: read it again after.
    onConnected: async () => {
      await loading?.catch(() => {});
      await load();
    },
    // Other processes revoke only on PostgreSQL.
    ...(notifications.connects ? { poll: load } : {}),
  });

  return {
    add(sessionIds) {
      const expiresAt = now() + ttlMs + CLOCK_SKEW_MARGIN_MS;
      for (const sessionId of sessionIds) remember(sessionId, expiresAt);
    },

    isRevoked(sessionId) {
      const expiresAt = revoked.get(sessionId);
      if (expiresAt === undefined) return false;
      if (expiresAt > now()) return true;
      revoked.delete(sessionId);
      return false;
    },

    onRevoked(callback) {
      // A wrapper per subscription: the same function subscribed twice unsubscribes separately.
      const entry = (sessionId: string) => callback(sessionId);
      listeners.add(entry);
      return () => {
        listeners.delete(entry);
      };
    },

    async start() {
      if (closed || started) return;
      started = true;
      if (!notifications.connects) {
        // One process only: what an earlier run revoked is in the table.
        await load();
        return;
      }
      await ownListener?.start();
      if (!notifications.listening)
        await load().catch((err: Error) => log.warn({ err }, 'revoked sessions: load failed'));
    },

    async close() {
      closed = true;
      unsubscribe();
      await ownListener?.close();
      await loading?.catch(() => {});
      listeners.clear();
    },
  };
}
