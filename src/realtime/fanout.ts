import { createAdapter as createPostgresAdapter } from '@socket.io/postgres-adapter';
import { createAdapter as createRedisAdapter } from '@socket.io/redis-adapter';
import type { FastifyBaseLogger } from 'fastify';
import { Redis } from 'ioredis';
import { type RawBuilder, sql } from 'kysely';
import pg from 'pg';
import type { Server } from 'socket.io';
import { MessageType } from 'socket.io-adapter';
import type { Config } from '../config.ts';

/** A message on its way to the subscribers of its channel: the socket.io event and its argument. */
export interface Delivery {
  channel: string;
  event: string;
  body: Record<string, unknown>;
}

/**
 * How accepted messages reach every subscriber on every instance. With PostgreSQL the notification is
 * part of the publishing transaction: PostgreSQL delivers notifications in commit order and only for
 * committed transactions, so every instance sees a channel's messages in commit order. Otherwise the
 * message is broadcast once the transaction has committed.
 */
export interface Fanout {
  /** A select-list expression to run inside the publishing transaction, or undefined. */
  inTransaction(delivery: Delivery): RawBuilder<unknown> | undefined;
  /** Called once the publishing transaction has committed. */
  afterCommit(delivery: Delivery): void;
  close(): Promise<void>;
}

// A notification carries at most 7999 bytes: the payload limit (REALTIME_MAX_PAYLOAD_BYTES, at most
// 6 KiB) and the limits on channel and event names keep every message below it.
const NOTIFY_CHANNEL = 'socket.io#/';
/** socket.io-parser's packet type of an event. */
const EVENT_PACKET = 2;
/** The sender id the cluster adapter gives messages that come from outside any server. */
const EMITTER_UID = 'emitter';

/** Sets up `io`'s adapter for the configured kind and returns how to deliver messages through it. */
export function attachFanout(io: Server, config: Readonly<Config>, log: FastifyBaseLogger): Fanout {
  const broadcast: Fanout['afterCommit'] = (d) => {
    io.to(d.channel).emit(d.event, d.body);
  };
  switch (config.realtime.adapter) {
    case 'postgres': {
      if (config.database.kind !== 'postgres') throw new Error('the Postgres adapter needs PostgreSQL');
      // Its own small pool: one connection LISTENs for as long as the server runs, the others carry
      // presence requests; the service's pool keeps all of its connections for requests.
      const pool = new pg.Pool({ connectionString: config.database.url, max: 3, idleTimeoutMillis: 30_000 });
      pool.on('error', () => {});
      pool.on('connect', (client) => client.on('error', () => {}));
      io.adapter(
        createPostgresAdapter(pool, {
          tableName: 'realtime.socket_io_attachments',
          errorHandler: (err: Error) => log.warn({ err }, 'realtime: postgres adapter error'),
        }),
      );
      return {
        inTransaction: (d) => sql`pg_notify(${NOTIFY_CHANNEL}, ${emitterMessage(d)})`,
        afterCommit: () => {},
        close: () => pool.end(),
      };
    }
    case 'redis': {
      if (config.redisUrl === undefined) throw new Error('the Redis adapter needs REDIS_URL');
      const pub = new Redis(config.redisUrl, { maxRetriesPerRequest: 2 });
      const sub = pub.duplicate();
      for (const client of [pub, sub]) {
        client.on('error', (err: Error) => log.warn({ err: err.message }, 'realtime: redis adapter connection error'));
      }
      io.adapter(createRedisAdapter(pub, sub, { key: `${config.redisKeyPrefix}socket.io` }));
      return {
        inTransaction: () => undefined,
        afterCommit: broadcast,
        close: async () => {
          sub.disconnect();
          pub.disconnect();
        },
      };
    }
    case 'memory':
      return { inTransaction: () => undefined, afterCommit: broadcast, close: async () => {} };
  }
}

/** The cluster adapter's broadcast message, as an emitter outside the cluster would send it. */
export function emitterMessage(d: Delivery): string {
  return JSON.stringify({
    uid: EMITTER_UID,
    nsp: '/',
    type: MessageType.BROADCAST,
    data: {
      opts: { rooms: [d.channel], except: [], flags: {} },
      packet: { type: EVENT_PACKET, data: [d.event, d.body], nsp: '/' },
    },
  });
}
