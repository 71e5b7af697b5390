import { createRequire } from 'node:module';
import type { FastifyBaseLogger } from 'fastify';
import notepack from 'notepack.io';
import type pg from 'pg';
import type { Server } from 'socket.io';
import { MessageType } from 'socket.io-adapter';
import type { Config } from '../config.ts';
import { isDatabaseUnavailable } from '../db/errors.ts';
import { AdapterPool } from './adapter-pool.ts';

// The adapters are loaded when configured (they and their clients cost about 0.1 s at start).
const requirePackage = createRequire(import.meta.url);
const postgresAdapter = () =>
  requirePackage('@socket.io/postgres-adapter') as typeof import('@socket.io/postgres-adapter');
const redisAdapter = () => requirePackage('@socket.io/redis-adapter') as typeof import('@socket.io/redis-adapter');
const ioredis = () => requirePackage('ioredis') as typeof import('ioredis');

const ROOM_PREFIX = 'channel:';
/** The socket.io room of a channel. Prefixed, so that no channel name can be a socket's own room (its id). */
export const roomOf = (channel: string): string => ROOM_PREFIX + channel;
/** The channel of a room, or undefined for a socket's own room. */
export const channelOfRoom = (room: string): string | undefined =>
  room.startsWith(ROOM_PREFIX) ? room.slice(ROOM_PREFIX.length) : undefined;

/** A message on its way to the subscribers of its channel: the socket.io event and its argument. */
export interface Delivery {
  channel: string;
  event: string;
  body: Record<string, unknown>;
}

/**
 * How accepted messages reach every subscriber on every instance, in commit order per channel:
 *
 * - `notify` (Postgres adapter): the notification is part of the publishing transaction. PostgreSQL
 *   delivers notifications only for committed transactions and in commit order, to every instance.
 * - `publish-under-lock` (Redis adapter): the message is published to Redis after the commit but
 *   before the channel's lock is released, and Redis's reply is awaited, so the next message on the
 *   channel is published after it. Every instance, the publishing one too, delivers what its Redis
 *   subscription hands it, in the order Redis took the messages.
 * - `local` (in-memory adapter, PGlite): one process, one database connection: emitted after commit.
 */
export interface Fanout {
  ordering: 'notify' | 'publish-under-lock' | 'local';
  /** The notification to send from the publishing transaction (`notify`). */
  notification(delivery: Delivery): { channel: string; payload: string } | undefined;
  /**
   * Delivers a committed message (`publish-under-lock`, `local`); resolves once it is on its way to
   * every instance. Never rejects: the message is stored, and history has it whatever happens here.
   */
  afterCommit(delivery: Delivery): Promise<void>;
  close(): Promise<void>;
}

/** How long a publish may wait for Redis to take a message before the channel's lock is released anyway. */
const REDIS_PUBLISH_DEADLINE_MS = 1_000;

// A notification carries at most 7999 bytes: the payload limit (REALTIME_MAX_PAYLOAD_BYTES, at most
// 6 KiB) and the limits on channel and event names keep every message below it.
const NOTIFY_CHANNEL = 'socket.io#/';
/** socket.io-parser's packet type of an event. */
const EVENT_PACKET = 2;
/** The sender id the cluster adapter gives messages that come from outside any server. */
const EMITTER_UID = 'emitter';

/** Sets up `io`'s adapter for the configured kind and returns how to deliver messages through it. */
export function attachFanout(io: Server, config: Readonly<Config>, log: FastifyBaseLogger): Fanout {
  const emit = (d: Delivery) => {
    io.to(roomOf(d.channel)).emit(d.event, d.body);
  };
  switch (config.realtime.adapter) {
    case 'postgres': {
      if (config.database.kind !== 'postgres') throw new Error('the Postgres adapter needs PostgreSQL');
      // Its own small pool: one connection LISTENs for as long as the server runs, the others carry
      // presence requests; the service's pool keeps all of its connections for requests.
      const pool = new AdapterPool(config.database.url);
      io.adapter(
        postgresAdapter().createAdapter(pool as unknown as pg.Pool, {
          tableName: 'realtime.socket_io_attachments',
          // An outage is already reported by the requests that meet it (503, logged at warn).
          errorHandler: (err: Error) =>
            isDatabaseUnavailable(err)
              ? log.info({ err: err.message }, 'realtime: postgres adapter waiting for the database')
              : log.warn({ err }, 'realtime: postgres adapter error'),
        }),
      );
      return {
        ordering: 'notify',
        notification: (d) => ({ channel: NOTIFY_CHANNEL, payload: emitterMessage(d) }),
        afterCommit: async () => {},
        close: () => pool.end(),
      };
    }
    case 'redis': {
      if (config.redisUrl === undefined) throw new Error('the Redis adapter needs REDIS_URL');
      const { Redis } = ioredis();
      const pub = new Redis(config.redisUrl, { maxRetriesPerRequest: 2 });
      const sub = pub.duplicate();
      for (const client of [pub, sub]) {
        client.on('error', (err: Error) => log.warn({ err: err.message }, 'realtime: redis adapter connection error'));
        // The adapter sends these without handling their failure; during a Redis outage a rejected
        // command would otherwise end the process.
        for (const command of ['publish', 'subscribe', 'psubscribe', 'unsubscribe', 'punsubscribe'] as const) {
          const send = client[command].bind(client) as (...args: unknown[]) => Promise<unknown>;
          (client as unknown as Record<string, unknown>)[command] = (...args: unknown[]) =>
            send(...args).catch((err: Error) => {
              log.warn({ err: err.message, command }, 'realtime: redis command failed');
            });
        }
      }
      const key = `${config.redisKeyPrefix}socket.io`;
      io.adapter(redisAdapter().createAdapter(pub, sub, { key }));
      return {
        ordering: 'publish-under-lock',
        notification: () => undefined,
        async afterCommit(d) {
          // Every instance, this one included, takes the message from Redis, in the order Redis took
          // them; the channel's lock is held until Redis answers, so the next one comes after it.
          const sent = pub.publish(`${key}#/#${roomOf(d.channel)}#`, emitterMessagePack(d)).then(
            () => true,
            () => false,
          );
          let timer: NodeJS.Timeout | undefined;
          const late = new Promise<boolean>((resolve) => {
            timer = setTimeout(() => resolve(false), REDIS_PUBLISH_DEADLINE_MS);
          });
          const delivered = await Promise.race([sent, late]);
          clearTimeout(timer);
          if (!delivered) log.warn({ channel: d.channel }, 'realtime: Redis did not take a message in time');
        },
        close: async () => {
          // Not quit(): while Redis is unreachable it would wait for a connection that never comes.
          sub.disconnect();
          pub.disconnect();
        },
      };
    }
    case 'memory':
      return {
        ordering: 'local',
        notification: () => undefined,
        afterCommit: async (d) => emit(d),
        close: async () => {},
      };
  }
}

/** The Redis adapter's broadcast message (msgpack), as an emitter outside the cluster would send it. */
export function emitterMessagePack(d: Delivery): Buffer {
  return notepack.encode([
    EMITTER_UID,
    { type: EVENT_PACKET, data: [d.event, d.body], nsp: '/' },
    { rooms: [roomOf(d.channel)], except: [], flags: {} },
  ]);
}

/** The cluster adapter's broadcast message, as an emitter outside the cluster would send it. */
export function emitterMessage(d: Delivery): string {
  return JSON.stringify({
    uid: EMITTER_UID,
    nsp: '/',
    type: MessageType.BROADCAST,
    data: {
      opts: { rooms: [roomOf(d.channel)], except: [], flags: {} },
      packet: { type: EVENT_PACKET, data: [d.event, d.body], nsp: '/' },
    },
  });
}
