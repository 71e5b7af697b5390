import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyInstance } from 'fastify';
import type { Redis } from 'ioredis';
import type { Kysely } from 'kysely';
import { Server, type Socket } from 'socket.io';
import { AccessTokenRefused, verifyAccessToken } from '../auth/access-token.ts';
import type { SessionRevocations } from '../auth/session-revocations.ts';
import { clientAddress, proxyTrust } from '../client-address.ts';
import type { Config } from '../config.ts';
import { socketOriginAllowed } from '../cors.ts';
import { isDatabaseUnavailable } from '../db/errors.ts';
import type { Database } from '../db/schema.ts';
import { ApiError } from '../errors.ts';
import { describeJsonProblem, findJsonProblem } from '../json-values.ts';
import { maySubscribe, subscribable } from './channel-access.ts';
import { attachFanout, channelOfRoom, type Fanout, roomOf } from './fanout.ts';
import type { PolicyCache } from './policy-cache.ts';
import {
  type ClientEvent,
  checkClientPayload,
  isClientEvent,
  type PresenceMember,
  type PublishRequest,
  type RealtimeErrorCode,
} from './protocol.ts';
import { PublishBudget } from './publish-budget.ts';
import { type PublishInput, type PublishOutcome, publishMessage } from './publisher.ts';
import { type RecheckPass, SubscriptionRecheck } from './recheck.ts';
import { watchOutput } from './slow-consumers.ts';
import { createSocketQuota } from './socket-quota.ts';

/** What the server keeps on each socket (socket.data). */
interface Caller {
  /** The signed-in user; undefined on an anonymous socket (role anon). */
  userId: string | undefined;
  /** The session of the access token; undefined when anonymous. */
  sessionId: string | undefined;
  presenceId: string;
  /** When the access token expires (ms since the epoch); undefined when anonymous. */
  expiresAt: number | undefined;
}
type RealtimeSocket = Socket<Record<string, never>, Record<string, (...args: unknown[]) => void>, never, Caller>;
type Ack = (response: unknown) => void;

export interface RealtimeServer {
  /** Publishes as `input.userId` (the HTTP side uses this too): same policies, same fan-out. */
  publish(input: PublishInput): Promise<PublishOutcome>;
  /** This instance's connected sockets, and their channel subscriptions. */
  stats(): RealtimeStats;
  /** Re-checks every live subscription of this instance now; resolves when done (tests, benches). */
  recheck(): Promise<void>;
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
/** setTimeout's longest delay. */
const MAX_TIMER_MS = 2_147_483_647;
const SESSION_REVOKED_MESSAGE = 'This session has ended; sign in again';
/** A subscribe that met a policy change while checking asks again, at most this many times in all. */
const SUBSCRIBE_ATTEMPTS = 3;

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
  const publish = (input: PublishInput) => publishMessage(db, fanout, input, now(), config.realtime.maxPayloadBytes);
  const emitError = (socket: RealtimeSocket, code: RealtimeErrorCode, message: string, channel: string | null) =>
    socket.emit('realtime:error', { code, message, channel });

  /** This instance's signed-in sockets by session id, so that a revocation finds them without a scan. */
  const bySession = new Map<string, Set<RealtimeSocket>>();
  const stopRevocations = revocations.onRevoked((sessionId) => {
    const sockets = bySession.get(sessionId);
    if (sockets === undefined) return;
    for (const socket of [...sockets]) {
      emitError(socket, 'SESSION_REVOKED', SESSION_REVOKED_MESSAGE, null);
      socket.disconnect(true);
    }
  });

  /** This instance's subscriptions: for each socket, its channels and which joining each one is. */
  const live = new Map<RealtimeSocket, Map<string, number>>();
  let joinings = 0;
  /** Ends a subscription the policies no longer allow: out of the room first, then told why. */
  const endSubscription = (socket: RealtimeSocket, channel: string, joined: number): boolean => {
    if (live.get(socket)?.get(channel) !== joined || socket.disconnected) return false;
    leaveRoom(socket, channel);
    emitError(socket, 'UNAUTHORIZED', 'The realtime policies no longer allow this subscription', channel);
    return true;
  };
  const recheck = new SubscriptionRecheck<RealtimeSocket>({
    *list() {
      for (const [socket, channels] of live) {
        for (const [channel, joined] of channels) yield { socket, userId: socket.data.userId, channel, joined };
      }
    },
    check: (questions) => subscribable(db, questions),
    end: (s) => endSubscription(s.socket, s.channel, s.joined),
    isTransient,
    periodMs: config.realtime.recheckSeconds * 1000,
    log,
    onPass: (pass) => {
      events?.rechecked?.(pass);
      if (pass.ended > 0) log.info(pass, 'realtime: subscriptions ended by the re-check');
    },
  });
  const stopPolicyWatch = policies.onChange(() => recheck.changed());

  const trustProxy = proxyTrust(config.trustProxy);
  const quota = createSocketQuota({
    max: config.realtime.maxSocketsPerUser,
    redis,
    keyPrefix: config.redisKeyPrefix,
    instanceId: randomUUID(),
    log,
  });

  /** Leaves the channel's room (synchronously on every adapter: nothing more is delivered) and says so to the others. */
  const leaveRoom = (socket: RealtimeSocket, channel: string) => {
    live.get(socket)?.delete(channel);
    void socket.leave(roomOf(channel));
    const member: PresenceMember = { presenceId: socket.data.presenceId, userId: socket.data.userId ?? null };
    socket.to(roomOf(channel)).emit('presence:leave', { meta: { channel }, member });
  };

  /**
   * A place among the REALTIME_MAX_SOCKETS_PER_USER sockets of a user (or of an anonymous client's
   * address), given back when the connection ends; else the refusal.
   */
  const takeSocketPlace = async (socket: RealtimeSocket, quotaKey: string): Promise<Error | undefined> => {
    if (!(await quota.take(quotaKey, socket.id))) {
      const max = config.realtime.maxSocketsPerUser;
      return refusal(
        'TOO_MANY_CONNECTIONS',
        `At most ${max} realtime connections are open at once per user (per address without a token)`,
      );
    }
    const release = () => quota.release(quotaKey, socket.id);
    // Either ends the place: a socket that never completes its connection has no disconnect.
    socket.once('disconnect', release);
    if (socket.conn.readyState === 'closed') release();
    else socket.conn.once('close', release);
    return undefined;
  };

  io.use((socket, next) => {
    const token = (socket.handshake.auth as { token?: unknown } | undefined)?.token;
    // The handshake travels to the other instances when they list a channel's members
    // (fetchSockets), where adapters serialize it: of what the client sent, only the token is
    // read, and it, any cookie and any other (possibly huge or deeply nested) value stay here.
    socket.handshake.auth = {};
    delete socket.handshake.headers.authorization;
    delete socket.handshake.headers.cookie;
    const presenceId = randomUUID();
    const placeTaken = (quotaKey: string) =>
      takeSocketPlace(socket as unknown as RealtimeSocket, quotaKey).then(next, (err: unknown) => {
        log.error({ err }, 'realtime: counting the sockets failed');
        next(refusal('INTERNAL_ERROR', 'The handshake could not be completed'));
      });
    if (token === undefined || token === null || token === '') {
      if (config.realtime.allowAnon) {
        socket.data = { userId: undefined, sessionId: undefined, presenceId, expiresAt: undefined } satisfies Caller;
        // Anonymous sockets are counted per client address, against the same limit.
        return void placeTaken(`anon:${clientAddress(socket.request, trustProxy)}`);
      }
      return next(refusal('UNAUTHORIZED', 'An access token is required in the handshake (auth.token)'));
    }
    if (typeof token !== 'string') return next(refusal('UNAUTHORIZED', 'auth.token must be a string'));
    try {
      const claims = verifyAccessToken(app, token);
      socket.data = {
        userId: claims.sub,
        sessionId: claims.sid,
        presenceId,
        expiresAt: claims.exp === undefined ? undefined : claims.exp * 1000,
      } satisfies Caller;
      void placeTaken(claims.sub);
    } catch (err) {
      // The socket protocol keeps its own codes for a token that expired or is not valid.
      if (err instanceof AccessTokenRefused) {
        return next(refusal(err.reason === 'expired' ? 'TOKEN_EXPIRED' : 'UNAUTHORIZED', err.message));
      }
      if (err instanceof ApiError) return next(refusal(err.code, err.message));
      log.error({ err }, 'realtime: handshake failed');
      next(refusal('INTERNAL_ERROR', 'The handshake could not be completed'));
    }
  });

  io.on('connection', (raw) => {
    const socket = raw as unknown as RealtimeSocket;
    const caller = socket.data;
    const member: PresenceMember = { presenceId: caller.presenceId, userId: caller.userId ?? null };
    const sendError = (code: RealtimeErrorCode, message: string, channel: string | null) =>
      emitError(socket, code, message, channel);

    if (caller.sessionId !== undefined) {
      const sessionId = caller.sessionId;
      // Revoked between the handshake's check and now: the revocation did not find this socket.
      if (revocations.isRevoked(sessionId)) {
        sendError('SESSION_REVOKED', SESSION_REVOKED_MESSAGE, null);
        socket.disconnect(true);
        return;
      }
      let sockets = bySession.get(sessionId);
      if (sockets === undefined) {
        sockets = new Set();
        bySession.set(sessionId, sockets);
      }
      sockets.add(socket);
      socket.once('disconnect', () => {
        const current = bySession.get(sessionId);
        current?.delete(socket);
        if (current?.size === 0) bySession.delete(sessionId);
      });
    }
    if (caller.expiresAt !== undefined) {
      const expiresAt = caller.expiresAt;
      let expiry: NodeJS.Timeout;
      // Re-armed until the expiry: a timer cannot wait longer than about 24.8 days.
      const arm = () => {
        const left = expiresAt - Date.now();
        if (left > MAX_TIMER_MS) {
          expiry = setTimeout(arm, MAX_TIMER_MS);
          return;
        }
        expiry = setTimeout(
          () => {
            sendError('TOKEN_EXPIRED', 'The access token has expired; reconnect with a fresh one', null);
            socket.disconnect(true);
          },
          Math.max(left, 0),
        );
      };
      arm();
      socket.once('disconnect', () => clearTimeout(expiry));
    }
    /** This socket's channels (see `live`). */
    const subscriptions = new Map<string, number>();
    live.set(socket, subscriptions);
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
      if (!socket.rooms.has(room) && subscriptions.size >= config.realtime.maxSubscriptions) {
        const message = `At most ${config.realtime.maxSubscriptions} channels may be subscribed to on one connection`;
        return refuse(ack, 'TOO_MANY_SUBSCRIPTIONS', message, channel);
      }
      let allowed = false;
      try {
        // A policy change while the check ran: its re-check may have passed before this joins, so ask again.
        let settled = false;
        for (let attempt = 1; attempt <= SUBSCRIBE_ATTEMPTS && !settled; attempt++) {
          const generation = recheck.generation;
          allowed = await maySubscribe(db, caller.userId, channel);
          settled = !allowed || generation === recheck.generation;
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
        if (socket.rooms.has(room)) leaveRoom(socket, channel);
        return refuse(ack, 'UNAUTHORIZED', 'The realtime policies do not allow subscribing to this channel', channel);
      }
      // A re-check may have ended the subscription while this one was being checked.
      const joining = !socket.rooms.has(room);
      await socket.join(room);
      // A repeated subscribe was just checked again: it counts as a new joining.
      subscriptions.set(channel, ++joinings);
      if (joining) socket.to(room).emit('presence:join', { meta: { channel }, member });
      ack?.({ ok: true, channel, presence: { members: await membersOf(channel) } });
    };

    const unsubscribe = async (channel: string, ack: Ack | undefined) => {
      if (socket.rooms.has(roomOf(channel))) leaveRoom(socket, channel);
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
      live.delete(socket);
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
    recheck: () => {
      recheck.changed();
      return recheck.settled();
    },
    stats() {
      const namespace = io.of('/');
      let subscriptions = 0;
      for (const [room, members] of namespace.adapter.rooms) {
        if (channelOfRoom(room) !== undefined) subscriptions += members.size;
      }
      return { sockets: namespace.sockets.size, subscriptions };
    },
    async close() {
      stopRevocations();
      stopPolicyWatch();
      recheck.close();
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

/** A handshake refusal: connect_error's message, and `data` {code, message} for programs. */
function refusal(code: string, message: string): Error {
  return Object.assign(new Error(message), { data: { code, message } });
}

/** The channel a (possibly malformed) request names, echoed back in errors as given when it is a string. */
function channelOf(payload: unknown): string | null {
  const channel = (payload as { channel?: unknown } | null)?.channel;
  return typeof channel === 'string' ? channel : null;
}
