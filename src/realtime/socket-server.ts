import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyInstance } from 'fastify';
import type { Redis } from 'ioredis';
import type { Kysely } from 'kysely';
import { Server } from 'socket.io';
import type { SessionRevocations } from '../auth/session-revocations.ts';
import type { SigningKeys } from '../auth/signing-keys.ts';
import type { Config } from '../config.ts';
import { socketOriginAllowed } from '../cors.ts';
import type { Database } from '../db/schema.ts';
import { errorBody } from '../errors.ts';
import { RealtimeConnection } from './connection.ts';
import { attachFanout, channelOfRoom, type Fanout } from './fanout.ts';
import { admitSockets, type RealtimeSocket } from './handshake.ts';
import { LiveSubscriptions } from './live-subscriptions.ts';
import type { PolicyCache } from './policy-cache.ts';
import { channelMembers } from './presence.ts';
import { PublishSlots } from './publish-budget.ts';
import { createPublisher, type PublishInput, type PublishOutcome } from './publisher.ts';
import type { RecheckPass } from './recheck.ts';
import { watchSessionEnds } from './session-ends.ts';
import { closeSockets } from './shutdown.ts';
import { createSocketQuota } from './socket-quota.ts';

export interface RealtimeServer {
  /** Publishes as `input.userId` (the HTTP side uses this too): same policies, same fan-out. */
  publish(input: PublishInput): Promise<PublishOutcome>;
  /** This instance's connected sockets, and their channel subscriptions. */
  stats(): RealtimeStats;
  close(): Promise<void>;
}

export interface RealtimeStats {
  sockets: number;
  subscriptions: number;
}

/** What the realtime server reports as it happens (the metrics count it). */
export interface RealtimeEvents {
  /** A published message was handed to one socket of this instance. */
  delivered(): void;
  /** A socket was disconnected for not reading its messages fast enough. */
  slowConsumerDisconnected(): void;
  /** A pass of the re-check of live subscriptions ended. */
  rechecked?(pass: RecheckPass): void;
}

/** What the realtime server works with. */
export interface RealtimeServerOptions {
  config: Readonly<Config>;
  db: Kysely<Database>;
  now: () => Date;
  revocations: SessionRevocations;
  /** The keys of access tokens: a revoked key's sockets are ended. */
  signingKeys: Pick<SigningKeys, 'onChange' | 'verifying'>;
  /** Says when policies or channels change (re-checks every live subscription). */
  policies: PolicyCache;
  /** Counts sockets per user across instances; undefined: per instance. */
  redis: Redis | undefined;
  events?: RealtimeEvents | undefined;
}

/** Larger frames close the connection; anything smaller is checked against the payload limit. */
const MAX_FRAME_BYTES = 1_048_576;
const SOCKET_PATH = '/socket.io/';
/**
 * Batches of publishes (socket and HTTP; one batch per channel at a time) holding a database
 * connection at once on one instance: half of the service's pool of 10 on PostgreSQL, so that
 * requests keep the other half whatever publishes wait for; one on PGlite, whose one session
 * requests then wait behind at most one batch.
 */
const PUBLISH_SLOTS = { postgres: 5, pglite: 1 } as const;
/**
 * How long a publish waits for one of those places (as a request waits for a pooled connection), and
 * behind its channel's earlier batches, before it is refused (SERVICE_UNAVAILABLE).
 */
const PUBLISH_SLOT_WAIT_MS = 2_000;

/**
 * The realtime server: socket.io on the service's own HTTP server (path /socket.io/, websocket only).
 * Handshakes carry the access token (handshake.ts); each connection's events are carried out by a
 * RealtimeConnection (connection.ts), subscribing and publishing as the caller in the database, so
 * the realtime policies decide. When a session is revoked (here or on another instance), its
 * sockets are told (SESSION_REVOKED) and disconnected. Protocol: asyncapi.yaml.
 */
export function startRealtimeServer(app: FastifyInstance, options: RealtimeServerOptions): RealtimeServer {
  const { config, db, now, revocations, signingKeys, policies, redis, events } = options;
  const log = app.log.child({ component: 'realtime' });
  const io = new Server(app.server, {
    path: SOCKET_PATH,
    transports: ['websocket'],
    serveClient: false,
    maxHttpBufferSize: MAX_FRAME_BYTES,
    // Other sites' pages may not open sockets: the origins of CORS_ORIGINS, and PUBLIC_URL's.
    allowRequest: (req, callback) => {
      const allowed = socketOriginAllowed(config, req.headers.origin);
      callback(allowed ? null : 'This origin is not allowed', allowed);
    },
  });
  refusePlainHttp(app);
  const fanout: Fanout = attachFanout(io, config, log);
  const slots = new PublishSlots(
    config.database.kind === 'postgres' ? PUBLISH_SLOTS.postgres : PUBLISH_SLOTS.pglite,
    PUBLISH_SLOT_WAIT_MS,
  );
  const publishAt = createPublisher({
    db,
    fanout,
    slots,
    maxWaitMs: PUBLISH_SLOT_WAIT_MS,
    maxPayloadBytes: config.realtime.maxPayloadBytes,
  });
  const publish = (input: PublishInput) => publishAt(input, now());
  const sessionEnds = watchSessionEnds(revocations, signingKeys);
  const live = new LiveSubscriptions({
    db,
    policies,
    periodMs: config.realtime.recheckSeconds * 1000,
    log,
    onPass: (pass) => events?.rechecked?.(pass),
  });
  const quota = createSocketQuota({
    max: config.realtime.maxSocketsPerUser,
    redis,
    keyPrefix: config.redisKeyPrefix,
    instanceId: randomUUID(),
    log,
  });
  admitSockets(io, { app, config, quota, log });
  const members = channelMembers(io, fanout, log);
  const context = { io, config, db, live, members, sessionEnds, publish, events, log };
  io.on('connection', (socket) => RealtimeConnection.open(socket as unknown as RealtimeSocket, context));

  return {
    publish,
    stats() {
      const namespace = io.of('/');
      let subscriptions = 0;
      for (const [room, members] of namespace.adapter.rooms) {
        if (channelOfRoom(room) !== undefined) subscriptions += members.size;
      }
      return { sockets: namespace.sockets.size, subscriptions };
    },
    async close() {
      sessionEnds.close();
      live.close();
      quota.close();
      await closeSockets(io);
      await fanout.close();
    },
  };
}

/**
 * Only WebSocket upgrades reach socket.io (they arrive as 'upgrade', not 'request'): a plain HTTP
 * request to its path (long-polling, a browser) gets a 400 in the service's Error shape instead of
 * engine.io's own body.
 */
function refusePlainHttp(app: FastifyInstance): void {
  const server = app.server;
  const listeners = server.listeners('request') as Array<(req: IncomingMessage, res: ServerResponse) => void>;
  server.removeAllListeners('request');
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    if (req.url?.startsWith(SOCKET_PATH) !== true) {
      for (const listener of listeners) listener.call(server, req, res);
      return;
    }
    const message = 'Realtime connections use the WebSocket transport only (socket.io: transports: ["websocket"])';
    res.writeHead(400, {
      'content-type': 'application/json; charset=utf-8',
      'x-content-type-options': 'nosniff',
      connection: 'close',
    });
    res.end(JSON.stringify(errorBody('INVALID_INPUT', message)));
  });
}
