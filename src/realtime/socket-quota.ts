import type { FastifyBaseLogger } from 'fastify';
import type { Redis } from 'ioredis';
import { redisFallback } from '../redis-fallback.ts';

/** How long a socket's place in Redis lasts unless its instance renews it (an instance that died frees its places). */
export const SOCKET_LEASE_MS = 60_000;
const RENEW_EVERY_MS = SOCKET_LEASE_MS / 3;
const WARN_INTERVAL_MS = 60_000;

/**
 * Takes a place if the user has fewer than `max` live ones: drops lapsed places, counts, adds.
 * KEYS[1] the user's sorted set (member: instance and socket id, score: lease end in ms).
 * ARGV: now, lease end, max, member, lease length.
 */
const TAKE_SCRIPT = `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
`;

/** How many sockets each user (or anonymous client address) has open: on this instance, or with Redis on every instance together. */
export interface SocketQuota {
  /** Takes a place for the socket; false when the user already has `max` sockets open. */
  take(userId: string, socketId: string): Promise<boolean>;
  /** Gives the socket's place back (its disconnect). */
  release(userId: string, socketId: string): void;
  close(): void;
}

export interface SocketQuotaOptions {
  max: number;
  /** Shared counts across instances; undefined: this instance only. */
  redis: Redis | undefined;
  keyPrefix: string;
  /** Tells this instance's places apart from other instances' in Redis. */
  instanceId: string;
  log: FastifyBaseLogger;
}

/**
 * Counts in memory and, given Redis, in one sorted set per user whose entries are leases that the
 * owning instance renews while the socket is open. Should Redis fail, the count of this instance
 * decides (logged), so that an outage never shuts every user out.
 */
export function createSocketQuota(options: SocketQuotaOptions): SocketQuota {
  const { max, redis, keyPrefix, instanceId, log } = options;
  /** This instance's open sockets by user. */
  const local = new Map<string, Set<string>>();
  const keyOf = (userId: string) => `${keyPrefix}realtime:sockets:${userId}`;
  const memberOf = (socketId: string) => `${instanceId}:${socketId}`;
  const shared = redisFallback({ redis, log, counts: 'sockets per user', warnEveryMs: WARN_INTERVAL_MS });

  const renewal =
    redis === undefined
      ? undefined
      : setInterval(() => {
          if (local.size === 0) return;
          const until = Date.now() + SOCKET_LEASE_MS;
          const pipeline = redis.pipeline();
          for (const [userId, sockets] of local) {
            // Added again if missing: Redis may have lost its data (a restart without persistence).
            for (const socketId of sockets) pipeline.zadd(keyOf(userId), until, memberOf(socketId));
            pipeline.pexpire(keyOf(userId), SOCKET_LEASE_MS);
          }
          pipeline.exec().catch(shared.failed);
        }, RENEW_EVERY_MS);
  renewal?.unref();

  const remember = (userId: string, socketId: string) => {
    let sockets = local.get(userId);
    if (sockets === undefined) {
      sockets = new Set();
      local.set(userId, sockets);
    }
    sockets.add(socketId);
  };

  return {
    async take(userId, socketId) {
      const here = local.get(userId)?.size ?? 0;
      if (here >= max) return false;
      // While Redis does not answer, the count of this instance decides.
      const taken = await shared.run(
        async (redis) => {
          const now = Date.now();
          const args = [now, now + SOCKET_LEASE_MS, max, memberOf(socketId), SOCKET_LEASE_MS];
          return (await redis.eval(TAKE_SCRIPT, 1, keyOf(userId), ...args)) === 1;
        },
        () => true,
      );
      if (!taken) return false;
      remember(userId, socketId);
      return true;
    },

    release(userId, socketId) {
      const sockets = local.get(userId);
      if (sockets?.delete(socketId) !== true) return;
      if (sockets.size === 0) local.delete(userId);
      redis?.zrem(keyOf(userId), memberOf(socketId)).catch(shared.failed);
    },

    close() {
      clearInterval(renewal);
      if (redis !== undefined) {
        for (const [userId, sockets] of local) {
          for (const socketId of sockets) redis.zrem(keyOf(userId), memberOf(socketId)).catch(() => {});
        }
      }
      local.clear();
    },
  };
}
