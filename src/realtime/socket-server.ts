import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyInstance } from 'fastify';
import type { Redis } from 'ioredis';
import type { Kysely } from 'kysely';
import { Server } from 'socket.io';
import type { SessionRevocations } from '../auth/session-revocations.ts';
import type { Config } from '../config.ts';
import { socketOriginAllowed } from '../cors.ts';
import { isDatabaseUnavailable } from '../db/errors.ts';
import type { Database } from '../db/schema.ts';
import { describeJsonProblem, findJsonProblem, prototypeKeyProblem } from '../json-values.ts';
import { maySubscribe } from './channel-access.ts';
import { attachFanout, channelOfRoom, type Fanout, roomOf } from './fanout.ts';
import { admitSockets, type Caller, emitRealtimeError, type RealtimeSocket } from './handshake.ts';
import { LiveSubscriptions } from './live-subscriptions.ts';
import type { PolicyCache } from './policy-cache.ts';
import {
  type ClientEvent,
  checkClientPayload,
  isClientEvent,
  type PresenceMember,
  type PublishRequest,
  type RealtimeErrorCode,
} from './protocol.ts';
import { PublishBudget, PublishSlots } from './publish-budget.ts';
import { type PublishInput, type PublishOutcome, publishMessage } from './publisher.ts';
import type { RecheckPass } from './recheck.ts';
import { watchSessionEnds } from './session-ends.ts';
import { watchOutput } from './slow-consumers.ts';
import { createSocketQuota } from './socket-quota.ts';

type Ack = (response: unknown) => void;

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
  /** Says when policies or channels change (re-checks every live subscription). */
  policies: PolicyCache;
  /** Counts sockets per user across instances; undefined: per instance. */
  redis: Redis | undefined;
  events?: RealtimeEvents | undefined;
}

/** Larger frames close the connection; anything smaller is checked against the payload limit. */
const MAX_FRAME_BYTES = 1_048_576;
const SOCKET_PATH = '/socket.io/';
/** At shutdown, how long clients have to complete the WebSocket close before they are cut. */
const CLOSE_GRACE_MS = 1_000;
const WS_CLOSED = 3;
/** The part of a `ws` WebSocket that shutdown uses (engine.io's transport holds one). */
interface RawWebSocket {
  readyState: number;
  terminate(): void;
}
/** Requests of one connection waiting to be carried out (each at most a few KiB); more are refused (RATE_LIMITED). */
const MAX_QUEUED = 64;
/** A subscribe that met a policy change while checking asks again, at most this many times in all. */
const SUBSCRIBE_ATTEMPTS = 3;
/**
 * Publishes (socket and HTTP) holding a database connection at once on one instance: half of the
 * service's pool of 10 on PostgreSQL, so that requests keep the other half whatever publishes wait
 * for; one on PGlite, whose one session requests then wait behind at most one publish.
 */
const PUBLISH_SLOTS = { postgres: 5, pglite: 1 } as const;
/** How long a publish waits for one of those places (as a request waits for a pooled connection) before it is refused (SERVICE_UNAVAILABLE). */
const PUBLISH_SLOT_WAIT_MS = 2_000;

/**
 * The realtime server: socket.io on the service's own HTTP server (path /socket.io/, websocket only).
 * Handshakes carry the access token; subscribing and publishing run as the caller in the database,
 * so the realtime policies decide. When a session is revoked (here or on another instance), its
 * sockets are told (SESSION_REVOKED) and disconnected. Protocol: asyncapi.yaml.
 */
export function startRealtimeServer(app: FastifyInstance, options: RealtimeServerOptions): RealtimeServer {
  const { config, db, now, revocations, policies, redis, events } = options;
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
  const publish = (input: PublishInput) =>
    publishMessage(db, fanout, slots, input, now(), config.realtime.maxPayloadBytes);
  const sessionEnds = watchSessionEnds(revocations);
  const live = new LiveSubscriptions({
    db,
    policies,
    periodMs: config.realtime.recheckSeconds * 1000,
    isTransient,
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

  io.on('connection', (raw) => {
    const socket = raw as unknown as RealtimeSocket;
    const caller = socket.data;
    const member: PresenceMember = { presenceId: caller.presenceId, userId: caller.userId ?? null };
    const sendError = (code: RealtimeErrorCode, message: string, channel: string | null) =>
      emitRealtimeError(socket, code, message, channel);

    if (!sessionEnds.watch(socket)) return;
    live.add(socket);
    const budget = new PublishBudget(config.realtime.publishRate, Date.now());
    watchOutput(socket, {
      maxBytes: config.realtime.maxBufferedBytes,
      onSlow: () => {
        events?.slowConsumerDisconnected();
        log.info({ presenceId: caller.presenceId }, 'realtime: slow consumer disconnected');
        sendError('SLOW_CONSUMER', 'Messages were not read fast enough; reconnect and fetch the history', null);
      },
      // Sees what the adapters hand this socket too, whichever instance published it.
      onMessage: events === undefined ? undefined : () => events.delivered(),
    });

    /**
     * A failure: to the acknowledgement when there is one, else as realtime:error. Malformed requests,
     * unknown events and refused publishes are also sent as realtime:error (`alsoAsEvent`).
     */
    const refuse = (
      ack: Ack | undefined,
      code: RealtimeErrorCode,
      message: string,
      channel: string | null,
      alsoAsEvent = false,
    ) => {
      ack?.({ ok: false, channel, error: { code, message } });
      if (ack === undefined || alsoAsEvent) sendError(code, message, channel);
    };
    const failure = (err: unknown): [RealtimeErrorCode, string] => {
      if (isTransient(err)) {
        return ['SERVICE_UNAVAILABLE', 'The database is not answering; try again shortly'];
      }
      log.error({ err }, 'realtime: event failed');
      return ['INTERNAL_ERROR', 'Internal server error'];
    };

    /**
     * Checks a request when it arrives (shape, and for a publish its size and the rate) and returns
     * the work it asks for, or refuses it at once. Only checked requests wait in the queue.
     */
    const accept = (event: ClientEvent, payload: unknown, ack: Ack | undefined): (() => Promise<void>) | undefined => {
      switch (event) {
        case 'realtime:subscribe': {
          const checked = checkClientPayload(event, payload);
          if (!checked.ok) return void refuse(ack, 'INVALID_PAYLOAD', checked.message, channelOf(payload), true);
          return () => subscribe(checked.value.channel, ack);
        }
        case 'realtime:unsubscribe': {
          const checked = checkClientPayload(event, payload);
          if (!checked.ok) return void refuse(ack, 'INVALID_PAYLOAD', checked.message, channelOf(payload), true);
          return () => unsubscribe(checked.value.channel, ack);
        }
        case 'realtime:publish': {
          const checked = checkClientPayload(event, payload);
          if (!checked.ok) return void refuse(ack, 'INVALID_PAYLOAD', checked.message, channelOf(payload), true);
          const request = checked.value;
          const prototypeKey = prototypeKeyProblem(request.payload, 'payload');
          if (prototypeKey !== undefined)
            return void refuse(ack, 'INVALID_PAYLOAD', prototypeKey, request.channel, true);
          if (Buffer.byteLength(JSON.stringify(request.payload)) > config.realtime.maxPayloadBytes) {
            const message = `The payload is larger than ${config.realtime.maxPayloadBytes} bytes`;
            return void refuse(ack, 'PAYLOAD_TOO_LARGE', message, request.channel, true);
          }
          if (!budget.take(Date.now())) {
            const message = `At most ${config.realtime.publishRate} publishes per second per connection`;
            return void refuse(ack, 'RATE_LIMITED', message, request.channel, true);
          }
          return () => publishFromSocket(request, ack);
        }
      }
    };

    const subscribe = async (channel: string, ack: Ack | undefined) => {
      const room = roomOf(channel);
      if (!socket.rooms.has(room) && live.count(socket) >= config.realtime.maxSubscriptions) {
        const message = `At most ${config.realtime.maxSubscriptions} channels may be subscribed to on one connection`;
        return refuse(ack, 'TOO_MANY_SUBSCRIPTIONS', message, channel);
      }
      let allowed = false;
      try {
        // A policy change while the check ran: its re-check may have passed before this joins, so ask again.
        let settled = false;
        for (let attempt = 1; attempt <= SUBSCRIBE_ATTEMPTS && !settled; attempt++) {
          const generation = live.generation;
          allowed = await maySubscribe(db, caller.userId, channel);
          settled = !allowed || generation === live.generation;
        }
        if (!settled) {
          const message = 'The realtime policies are changing; subscribe again shortly';
          return refuse(ack, 'SERVICE_UNAVAILABLE', message, channel);
        }
      } catch (err) {
        return refuse(ack, ...failure(err), channel);
      }
      if (socket.disconnected) return;
      if (!allowed) {
        // A refused repeat subscription ends the one in place: the policies have changed.
        if (socket.rooms.has(room)) live.leave(socket, channel);
        return refuse(ack, 'UNAUTHORIZED', 'The realtime policies do not allow subscribing to this channel', channel);
      }
      // A re-check may have ended the subscription while this one was being checked.
      const joining = !socket.rooms.has(room);
      await socket.join(room);
      // A repeated subscribe was just checked again: it counts as a new joining.
      live.joined(socket, channel);
      if (joining) socket.to(room).emit('presence:join', { meta: { channel }, member });
      ack?.({ ok: true, channel, presence: { members: await membersOf(channel) } });
    };

    const unsubscribe = async (channel: string, ack: Ack | undefined) => {
      if (socket.rooms.has(roomOf(channel))) live.leave(socket, channel);
      ack?.({ ok: true, channel });
    };

    const publishFromSocket = async (request: PublishRequest, ack: Ack | undefined) => {
      if (!socket.rooms.has(roomOf(request.channel))) {
        return refuse(ack, 'NOT_SUBSCRIBED', 'Subscribe to the channel before publishing on it', request.channel, true);
      }
      let outcome: PublishOutcome;
      try {
        outcome = await publish({ userId: caller.userId, ...request });
      } catch (err) {
        return refuse(ack, ...failure(err), request.channel, true);
      }
      if (!outcome.ok) return refuse(ack, outcome.code, outcome.message, request.channel, true);
      ack?.({ ok: true, channel: request.channel, messageId: outcome.meta.messageId });
    };

    // A connection's requests are carried out one at a time, in the order they came: a publish sent
    // right after a subscribe finds the subscription, and one sender's messages keep their order.
    let queue: Promise<void> = Promise.resolve();
    let waiting = 0;
    // Called inside socket.io's event dispatch: nothing may escape from it (an uncaught exception
    // there would end the process).
    socket.onAny((name: unknown, ...args: unknown[]) => {
      const ack = typeof args.at(-1) === 'function' ? (args.pop() as Ack) : undefined;
      try {
        const event = String(name);
        if (!isClientEvent(event)) {
          return refuse(ack, 'UNKNOWN_EVENT', `Unknown event ${JSON.stringify(event.slice(0, 64))}`, null, true);
        }
        if (waiting >= MAX_QUEUED) {
          const message = `At most ${MAX_QUEUED} requests may wait on one connection`;
          return refuse(ack, 'RATE_LIMITED', message, channelOf(args[0]), true);
        }
        // Before the schema: strings the database cannot store, binary data, and nesting past
        // MAX_JSON_DEPTH (which serializing would meet as a stack overflow).
        const problem = findJsonProblem(args[0], '');
        if (problem !== undefined) {
          return refuse(ack, 'INVALID_PAYLOAD', describeJsonProblem(problem), channelOf(args[0]), true);
        }
        const work = accept(event, args[0], ack);
        if (work === undefined) return;
        waiting += 1;
        queue = queue
          .then(work)
          .catch((err: unknown) => {
            log.error({ err, event }, 'realtime: request failed');
            refuse(ack, 'INTERNAL_ERROR', 'Internal server error', channelOf(args[0]));
          })
          .finally(() => {
            waiting -= 1;
          });
      } catch (err) {
        log.error({ err }, 'realtime: event dispatch failed');
        // Never silence: the client hears that this request failed.
        try {
          refuse(ack, 'INTERNAL_ERROR', 'Internal server error', channelOf(args[0]));
        } catch {}
      }
    });

    socket.on('disconnecting', () => {
      live.remove(socket);
      for (const room of socket.rooms) {
        const channel = channelOfRoom(room);
        if (channel !== undefined) socket.to(room).emit('presence:leave', { meta: { channel }, member });
      }
    });
  });

  /** Everyone subscribed to `channel`, on every instance; only this instance's if the others do not answer. */
  const membersOf = async (channel: string): Promise<PresenceMember[]> => {
    const toMember = (s: { data: Caller }): PresenceMember => ({
      presenceId: s.data.presenceId,
      userId: s.data.userId ?? null,
    });
    try {
      return (await io.in(roomOf(channel)).fetchSockets()).map(toMember);
    } catch (err) {
      log.warn({ err, channel }, 'realtime: presence from other instances unavailable');
      return (await io.local.in(roomOf(channel)).fetchSockets()).map(toMember);
    }
  };

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
      const engine = io.engine as unknown as { clients: Record<string, { transport?: { socket?: RawWebSocket } }> };
      const connections = Object.values(engine.clients)
        .map((c) => c.transport?.socket)
        .filter((ws): ws is RawWebSocket => ws !== undefined);
      io.local.disconnectSockets(true);
      io.engine.close();
      // Clients get a moment to take the disconnect; one that does not answer the close is cut, so
      // that the HTTP server (which waits for every connection) can close.
      const deadline = Date.now() + CLOSE_GRACE_MS;
      while (connections.some((ws) => ws.readyState !== WS_CLOSED) && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      for (const ws of connections) if (ws.readyState !== WS_CLOSED) ws.terminate();
      // Closes the adapter (and tells the other instances) without closing the HTTP server, which is Fastify's.
      const adapter = io.of('/').adapter as { close?: () => Promise<void> | void };
      await Promise.resolve(adapter.close?.()).catch(() => {});
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
    res.end(JSON.stringify({ error: 'INVALID_INPUT', message, statusCode: 400 }));
  });
}

/** The database is unreachable, a serialization failure or deadlock (class 40), or a lock wait past lock_timeout (55P03). */
function isTransient(err: unknown): boolean {
  return isDatabaseUnavailable(err) || /^(40|55P03)/.test(String((err as { code?: unknown }).code));
}

/** The channel a (possibly malformed) request names, echoed back in errors as given when it is a string. */
function channelOf(payload: unknown): string | null {
  const channel = (payload as { channel?: unknown } | null)?.channel;
  return typeof channel === 'string' ? channel : null;
}
