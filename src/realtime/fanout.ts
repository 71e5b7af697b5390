import { createRequire } from 'node:module';
import type { FastifyBaseLogger } from 'fastify';
import notepack from 'notepack.io';
import type pg from 'pg';
import type { Server } from 'socket.io';
import { MessageType } from 'socket.io-adapter';
import type { Config } from '../config.ts';
import { isDatabaseUnavailable } from '../db/errors.ts';
import { AdapterPool } from './adapter-pool.ts';
import { FanoutLink, unusableLinks } from './fanout-links.ts';

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
 * How accepted messages reach every subscriber on every instance, in commit order per channel. A
 * message is acknowledged only when it is on its way to every instance; otherwise it is refused and
 * not stored (history holds no message that was not acknowledged):
 *
 * - `notify` (Postgres adapter): the notification is part of the publishing transaction. PostgreSQL
 *   delivers notifications only for committed transactions and in commit order, to every instance
 *   that LISTENs. A publish is refused while this instance's LISTEN connection is down, and after
 *   the commit it is acknowledged only once this instance's LISTEN connection has handed it back;
 *   otherwise it is deleted again and refused (other instances may have heard it already: a refused
 *   message can still reach some subscribers, never an acknowledged one miss them).
 * - `publish-under-lock` (Redis adapter): the message is published to Redis inside the publishing
 *   transaction, under the channel's lock, and Redis's reply is awaited: the transaction commits
 *   only if Redis took it (and at least one instance's subscription received it), else it rolls
 *   back; the next message on the channel is published after it. Every instance, the publishing one
 *   too, delivers what its Redis subscription hands it, in the order Redis took the messages. A
 *   publish is refused at once while either Redis connection of this instance is down.
 * - `local` (in-memory adapter, PGlite): one process, one database connection: emitted after commit.
 */
export interface Fanout {
  ordering: 'notify' | 'publish-under-lock' | 'local';
  /** The notification to send from the publishing transaction (`notify`). */
  notification(delivery: Delivery): { channel: string; payload: string } | undefined;
  /**
   * Why a message cannot reach every instance now, or undefined when it can. Asked before a message
   * is stored, and before it takes a database connection.
   */
  unavailable(): string | undefined;
  /**
   * Hands a message to the other instances: for `publish-under-lock` inside the publishing
   * transaction (false: Redis did not take it, and the transaction must roll back); for `local`
   * after the commit. For `notify`, after the commit: whether this instance's LISTEN connection
   * handed the message back (false: it may have reached no one). Never rejects.
   */
  deliver(delivery: Delivery): Promise<boolean>;
  close(): Promise<void>;
}

/** How long a publish may wait for Redis to take a message before it is refused (and rolled back). */
const REDIS_PUBLISH_DEADLINE_MS = 1_000;
/** How long a publish waits, after its commit, for this instance's LISTEN connection to hand it back. */
const NOTIFY_LOOPBACK_DEADLINE_MS = 2_000;
/** The longest wait between two attempts to reconnect to Redis (the adapter's own connections). */
const REDIS_RECONNECT_MAX_MS = 500;
/** How soon the Postgres adapter tries again to LISTEN after its connection was lost. */
const POSTGRES_RELISTEN_MS = 250;

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
      const listening = new FanoutLink('PostgreSQL LISTEN connection');
      const loopback = new Loopback();
      const pool = new AdapterPool(config.database.url, listening, (payload) => loopback.heard(payload));
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
      listenAgainSoon(io, log);
      return {
        ordering: 'notify',
        notification: (d) => {
          loopback.expect(d);
          return { channel: NOTIFY_CHANNEL, payload: emitterMessage(d) };
        },
        unavailable: () => unusableLinks([listening]),
        deliver: (d) => loopback.arrived(d, NOTIFY_LOOPBACK_DEADLINE_MS),
        close: () => pool.end(),
      };
    }
    case 'redis': {
      if (config.redisUrl === undefined) throw new Error('the Redis adapter needs REDIS_URL');
      const { Redis } = ioredis();
      const retryStrategy = (times: number) => Math.min(times * 50, REDIS_RECONNECT_MAX_MS);
      // Commands to the publishing connection fail at once while it is down, and one that was on its
      // way when the connection dropped is not sent again. (One that Redis took after the deadline
      // is delivered though refused: a refused message may reach some subscribers.)
      const pub = new Redis(config.redisUrl, {
        maxRetriesPerRequest: 2,
        enableOfflineQueue: false,
        autoResendUnfulfilledCommands: false,
        retryStrategy,
      });
      // The subscribing connection queues the adapter's SUBSCRIBEs until it is connected.
      const sub = pub.duplicate({ enableOfflineQueue: true, autoResendUnfulfilledCommands: true });
      const publishing = new FanoutLink('Redis publishing connection');
      const subscribed = new FanoutLink('Redis subscribing connection');
      pub.on('ready', () => publishing.up());
      pub.on('close', () => publishing.down());
      // ioredis says 'ready' before its SUBSCRIBEs are answered: a PING sent after them answers after them.
      sub.on('ready', () => {
        sub.ping().then(
          () => {
            if (sub.status === 'ready') subscribed.up();
          },
          () => {},
        );
      });
      sub.on('close', () => subscribed.down());
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
        unavailable: () => unusableLinks([publishing, subscribed]),
        async deliver(d) {
          // Every instance, this one included, takes the message from Redis, in the order Redis took
          // them; the channel's lock is held until Redis answers, so the next one comes after it.
          // Redis answers with how many subscriptions received it: none means no instance has it.
          const sent = pub.publish(`${key}#/#${roomOf(d.channel)}#`, emitterMessagePack(d)).then(
            (receivers) => Number(receivers) > 0,
            () => false,
          );
          let timer: NodeJS.Timeout | undefined;
          const late = new Promise<boolean>((resolve) => {
            timer = setTimeout(() => resolve(false), REDIS_PUBLISH_DEADLINE_MS);
          });
          const delivered = await Promise.race([sent, late]);
          clearTimeout(timer);
          if (!delivered) log.warn({ channel: d.channel }, 'realtime: Redis did not take a message; refused');
          return delivered;
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
        unavailable: () => undefined,
        deliver: async (d) => {
          emit(d);
          return true;
        },
        close: async () => {},
      };
  }
}

/** How long an expected message is remembered when its publish failed and never asked for it. */
const LOOPBACK_FORGET_MS = 60_000;

/** The messages this instance published with NOTIFY, and whether its LISTEN connection handed them back. */
class Loopback {
  readonly #expected = new Map<string, { since: number; heard: boolean; wake?: () => void }>();

  /** Called before the publishing statement: the notification may come back before it answers. */
  expect(d: Delivery): void {
    const now = Date.now();
    for (const [id, entry] of this.#expected) {
      if (now - entry.since < LOOPBACK_FORGET_MS) break; // in insertion order: the rest are younger
      this.#expected.delete(id);
    }
    this.#expected.set(messageIdOf(d), { since: now, heard: false });
  }

  heard(payload: string): void {
    if (this.#expected.size === 0) return;
    let id: unknown;
    try {
      const message = JSON.parse(payload) as { uid?: unknown; data?: { packet?: { data?: unknown[] } } };
      if (message.uid !== EMITTER_UID) return;
      id = (message.data?.packet?.data?.[1] as { meta?: { messageId?: unknown } } | undefined)?.meta?.messageId;
    } catch {
      return;
    }
    const entry = typeof id === 'string' ? this.#expected.get(id) : undefined;
    if (entry === undefined) return;
    entry.heard = true;
    entry.wake?.();
  }

  /** Whether the message came back within `deadlineMs`; forgets it either way. */
  async arrived(d: Delivery, deadlineMs: number): Promise<boolean> {
    const id = messageIdOf(d);
    const entry = this.#expected.get(id);
    if (entry === undefined) return false;
    if (!entry.heard) {
      let timer: NodeJS.Timeout | undefined;
      await new Promise<void>((resolve) => {
        entry.wake = resolve;
        timer = setTimeout(resolve, deadlineMs);
      });
      clearTimeout(timer);
    }
    this.#expected.delete(id);
    return entry.heard;
  }
}

const messageIdOf = (d: Delivery): string => String((d.body.meta as { messageId?: unknown } | undefined)?.messageId);

/**
 * The Postgres adapter (0.5) waits 1 to 3 s before it LISTENs again after losing its connection;
 * here it tries every POSTGRES_RELISTEN_MS, so that delivery resumes within 2 s of the database's
 * return (publishes are refused meanwhile). Its connection attempts fail at once or within the
 * adapter pool's connection timeout.
 */
function listenAgainSoon(io: Server, log: FastifyBaseLogger): void {
  type PubSub = { scheduleReconnection?: unknown; initClient?: unknown; reconnectTimer?: NodeJS.Timeout };
  const pubsub = (io.of('/').adapter as unknown as { client?: PubSub }).client;
  if (typeof pubsub?.scheduleReconnection !== 'function' || typeof pubsub.initClient !== 'function') {
    log.warn('realtime: the Postgres adapter is not the expected version; it LISTENs again on its own schedule');
    return;
  }
  const initClient = pubsub.initClient.bind(pubsub) as () => Promise<void>;
  pubsub.scheduleReconnection = () => {
    pubsub.reconnectTimer = setTimeout(() => void initClient(), POSTGRES_RELISTEN_MS);
  };
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
