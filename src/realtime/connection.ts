import type { FastifyBaseLogger } from 'fastify';
import type { Kysely } from 'kysely';
import type { Server } from 'socket.io';
import type { Config } from '../config.ts';
import { databaseErrorAnswer, isRetryable } from '../db/errors.ts';
import type { Database } from '../db/schema.ts';
import { describeJsonProblem, findJsonProblem, prototypeKeyProblem } from '../json-values.ts';
import { authorizeSubscribe } from './channel-access.ts';
import { roomOf } from './fanout.ts';
import { emitRealtimeError, type RealtimeSocket } from './handshake.ts';
import type { LiveSubscriptions } from './live-subscriptions.ts';
import { announceDeparture, announceJoin, type ChannelMembers } from './presence.ts';
import {
  type ClientEvent,
  checkClientPayload,
  isClientEvent,
  type PublishRequest,
  type RealtimeErrorCode,
} from './protocol.ts';
import { PublishBudget } from './publish-budget.ts';
import type { PublishInput, PublishOutcome } from './publisher.ts';
import type { SessionEnds } from './session-ends.ts';
import { watchOutput } from './slow-consumers.ts';
import type { RealtimeEvents } from './socket-server.ts';
import { batchWrites } from './write-batching.ts';

type Ack = (response: unknown) => void;

/** Requests of one connection waiting to be carried out (each at most a few KiB); more are refused (RATE_LIMITED). */
const MAX_QUEUED = 64;

/** What every connection of the server shares. */
export interface ConnectionContext {
  io: Server;
  config: Readonly<Config>;
  db: Kysely<Database>;
  live: LiveSubscriptions;
  members: ChannelMembers;
  sessionEnds: SessionEnds;
  publish(input: PublishInput): Promise<PublishOutcome>;
  events: RealtimeEvents | undefined;
  log: FastifyBaseLogger;
}

/** A checked request waiting its turn; `publishOn` names the channel of a publish. */
interface Work {
  publishOn?: string;
  run(): Promise<void>;
}

/**
 * One connected socket: its requests, carried out in the order they came (a publish sent right after
 * a subscribe finds the subscription, and one sender's messages keep their order), one method per
 * event. Each waits until the one before it is answered, except a publish following publishes on the
 * same channel: it is handed on behind them at once (the publisher keeps their order), so that a
 * sender's messages can be stored together. Malformed requests, unknown events and refused publishes
 * are answered at once, before they wait in the queue.
 */
export class RealtimeConnection {
  readonly #socket: RealtimeSocket;
  readonly #context: ConnectionContext;
  readonly #budget: PublishBudget;
  #queue: Promise<void> = Promise.resolve();
  /** The publishes handed on and not yet answered (all on one channel), if any. */
  #publishing: { channel: string; answered: Promise<void> } | undefined;
  #waiting = 0;

  /** Takes charge of a socket that has just connected (unless its session has been revoked meanwhile). */
  static open(socket: RealtimeSocket, context: ConnectionContext): void {
    if (!context.sessionEnds.watch(socket)) return;
    new RealtimeConnection(socket, context);
  }

  private constructor(socket: RealtimeSocket, context: ConnectionContext) {
    this.#socket = socket;
    this.#context = context;
    const { config, live, events, log } = context;
    live.add(socket);
    this.#budget = new PublishBudget(config.realtime.publishRate, Date.now());
    batchWrites(socket);
    watchOutput(socket, {
      maxBytes: config.realtime.maxBufferedBytes,
      onSlow: () => {
        events?.slowConsumerDisconnected();
        log.info({ presenceId: socket.data.presenceId }, 'realtime: slow consumer disconnected');
        emitRealtimeError(
          socket,
          'SLOW_CONSUMER',
          'Messages were not read fast enough; reconnect and fetch the history',
          null,
        );
      },
      // Sees what the adapters hand this socket too, whichever instance published it.
      onMessage: events === undefined ? undefined : () => events.delivered(),
    });
    socket.onAny((name: unknown, ...args: unknown[]) => this.#dispatch(name, args));
    socket.on('disconnecting', () => this.disconnecting());
  }

  /** realtime:subscribe: the subscribe policies decide; the others of the channel see presence:join. */
  async subscribe(channel: string, ack: Ack | undefined): Promise<void> {
    const socket = this.#socket;
    const { config, db, live, members } = this.#context;
    const room = roomOf(channel);
    if (!socket.rooms.has(room) && live.count(socket) >= config.realtime.maxSubscriptions) {
      const message = `At most ${config.realtime.maxSubscriptions} channels may be subscribed to on one connection`;
      return this.#refuse(ack, 'TOO_MANY_SUBSCRIPTIONS', message, channel);
    }
    let decision: Awaited<ReturnType<typeof authorizeSubscribe>>;
    try {
      decision = await authorizeSubscribe(db, { userId: socket.data.userId, channel }, () => live.generation);
    } catch (err) {
      return this.#refuse(ack, ...this.#failure(err), channel);
    }
    if (decision === 'unsettled') {
      const message = 'The realtime policies are changing; subscribe again shortly';
      return this.#refuse(ack, 'SERVICE_UNAVAILABLE', message, channel);
    }
    if (socket.disconnected) return;
    if (decision === 'refused') {
      // A refused repeat subscription ends the one in place: the policies have changed.
      if (socket.rooms.has(room)) live.leave(socket, channel);
      return this.#refuse(
        ack,
        'UNAUTHORIZED',
        'The realtime policies do not allow subscribing to this channel',
        channel,
      );
    }
    // A re-check may have ended the subscription while this one was being checked.
    const joining = !socket.rooms.has(room);
    await socket.join(room);
    // A repeated subscribe was just checked again: it counts as a new joining.
    live.joined(socket, channel);
    if (joining) announceJoin(socket, channel);
    ack?.({ ok: true, channel, presence: { members: await members.of(channel) } });
  }

  /** realtime:unsubscribe: leaves the channel (the others see presence:leave); acknowledged either way. */
  async unsubscribe(channel: string, ack: Ack | undefined): Promise<void> {
    if (this.#socket.rooms.has(roomOf(channel))) this.#context.live.leave(this.#socket, channel);
    ack?.({ ok: true, channel });
  }

  /** realtime:publish: on a channel the socket is subscribed to, as its caller (the publish policies decide). */
  async publish(request: PublishRequest, ack: Ack | undefined): Promise<void> {
    const socket = this.#socket;
    if (!socket.rooms.has(roomOf(request.channel))) {
      const message = 'Subscribe to the channel before publishing on it';
      return this.#refuse(ack, 'NOT_SUBSCRIBED', message, request.channel, true);
    }
    let outcome: PublishOutcome;
    try {
      const room = roomOf(request.channel);
      outcome = await this.#context.publish({
        userId: socket.data.userId,
        ...request,
        stillSubscribed: () => socket.rooms.has(room),
      });
    } catch (err) {
      return this.#refuse(ack, ...this.#failure(err), request.channel, true);
    }
    if (!outcome.ok) return this.#refuse(ack, outcome.code, outcome.message, request.channel, true);
    ack?.({ ok: true, channel: request.channel, messageId: outcome.meta.messageId });
  }

  /** The socket is going: nothing of it is re-checked, and every channel it was in hears presence:leave. */
  disconnecting(): void {
    this.#context.live.remove(this.#socket);
    announceDeparture(this.#socket);
  }

  /**
   * Every event the client sends. Called inside socket.io's event dispatch: nothing may escape from
   * it (an uncaught exception there would end the process).
   */
  #dispatch(name: unknown, args: unknown[]) {
    const ack = typeof args.at(-1) === 'function' ? (args.pop() as Ack) : undefined;
    try {
      const event = String(name);
      if (!isClientEvent(event)) {
        return this.#refuse(ack, 'UNKNOWN_EVENT', `Unknown event ${JSON.stringify(event.slice(0, 64))}`, null, true);
      }
      if (this.#waiting >= MAX_QUEUED) {
        const message = `At most ${MAX_QUEUED} requests may wait on one connection`;
        return this.#refuse(ack, 'RATE_LIMITED', message, channelOf(args[0]), true);
      }
      // Before the schema: strings the database cannot store, binary data, and nesting past
      // MAX_JSON_DEPTH (which serializing would meet as a stack overflow).
      const problem = findJsonProblem(args[0], '');
      if (problem !== undefined) {
        return this.#refuse(ack, 'INVALID_PAYLOAD', describeJsonProblem(problem), channelOf(args[0]), true);
      }
      const work = this.#accept(event, args[0], ack);
      if (work === undefined) return;
      this.#waiting += 1;
      const carryOut = () =>
        work
          .run()
          .catch((err: unknown) => {
            this.#context.log.error({ err, event }, 'realtime: request failed');
            this.#refuse(ack, 'INTERNAL_ERROR', 'Internal server error', channelOf(args[0]));
          })
          .finally(() => {
            this.#waiting -= 1;
          });
      this.#queue = this.#queue.then(async () => {
        const channel = work.publishOn;
        const subscribedTo = (name: string | undefined) => name !== undefined && this.#socket.rooms.has(roomOf(name));
        const ahead = this.#publishing;
        const behindSameChannel = ahead !== undefined && ahead.channel === channel && subscribedTo(channel);
        if (ahead !== undefined && !behindSameChannel) await ahead.answered;
        // Anything else, and a publish the socket is not subscribed for (refused at once), is
        // carried out once what came before it is answered.
        if (channel === undefined || !subscribedTo(channel)) return carryOut();
        // Handed on now (the publisher queues it synchronously), answered later: the next request may start.
        const answered = behindSameChannel ? Promise.all([ahead.answered, carryOut()]) : carryOut();
        const entry = { channel, answered: answered.then(() => {}) };
        this.#publishing = entry;
        void entry.answered.then(() => {
          if (this.#publishing === entry) this.#publishing = undefined;
        });
      });
    } catch (err) {
      this.#context.log.error({ err }, 'realtime: event dispatch failed');
      // Never silence: the client hears that this request failed.
      try {
        this.#refuse(ack, 'INTERNAL_ERROR', 'Internal server error', channelOf(args[0]));
      } catch {}
    }
  }

  /**
   * Checks a request when it arrives (shape, and for a publish its size and the rate) and returns
   * the work it asks for, or refuses it at once. Only checked requests wait in the queue.
   */
  #accept(event: ClientEvent, payload: unknown, ack: Ack | undefined): Work | undefined {
    const { config } = this.#context;
    switch (event) {
      case 'realtime:subscribe': {
        const checked = checkClientPayload(event, payload);
        if (!checked.ok) return void this.#refuse(ack, 'INVALID_PAYLOAD', checked.message, channelOf(payload), true);
        return { run: () => this.subscribe(checked.value.channel, ack) };
      }
      case 'realtime:unsubscribe': {
        const checked = checkClientPayload(event, payload);
        if (!checked.ok) return void this.#refuse(ack, 'INVALID_PAYLOAD', checked.message, channelOf(payload), true);
        return { run: () => this.unsubscribe(checked.value.channel, ack) };
      }
      case 'realtime:publish': {
        const checked = checkClientPayload(event, payload);
        if (!checked.ok) return void this.#refuse(ack, 'INVALID_PAYLOAD', checked.message, channelOf(payload), true);
        const request = checked.value;
        const prototypeKey = prototypeKeyProblem(request.payload, 'payload');
        if (prototypeKey !== undefined)
          return void this.#refuse(ack, 'INVALID_PAYLOAD', prototypeKey, request.channel, true);
        if (Buffer.byteLength(JSON.stringify(request.payload)) > config.realtime.maxPayloadBytes) {
          const message = `The payload is larger than ${config.realtime.maxPayloadBytes} bytes`;
          return void this.#refuse(ack, 'PAYLOAD_TOO_LARGE', message, request.channel, true);
        }
        if (!this.#budget.take(Date.now())) {
          const message = `At most ${config.realtime.publishRate} publishes per second per connection`;
          return void this.#refuse(ack, 'RATE_LIMITED', message, request.channel, true);
        }
        return { publishOn: request.channel, run: () => this.publish(request, ack) };
      }
    }
  }

  /**
   * A failure: to the acknowledgement when there is one, else as realtime:error. Malformed requests,
   * unknown events and refused publishes are also sent as realtime:error (`alsoAsEvent`).
   */
  #refuse(
    ack: Ack | undefined,
    code: RealtimeErrorCode,
    message: string,
    channel: string | null,
    alsoAsEvent = false,
  ): void {
    ack?.({ ok: false, channel, error: { code, message } });
    if (ack === undefined || alsoAsEvent) emitRealtimeError(this.#socket, code, message, channel);
  }

  /**
   * What a request that threw is answered: SERVICE_UNAVAILABLE when trying again may work,
   * INVALID_PAYLOAD for a value the database refuses, else INTERNAL_ERROR (logged).
   */
  #failure(err: unknown): [RealtimeErrorCode, string] {
    if (isRetryable(err)) return ['SERVICE_UNAVAILABLE', 'The database is not answering; try again shortly'];
    // A value the database cannot take (SQLSTATE class 22), which only the request can cause.
    const answer = databaseErrorAnswer(err);
    if (answer?.code === 'INVALID_INPUT') return ['INVALID_PAYLOAD', answer.message];
    this.#context.log.error({ err }, 'realtime: event failed');
    return ['INTERNAL_ERROR', 'Internal server error'];
  }
}

/** The channel a (possibly malformed) request names, echoed back in errors as given when it is a string. */
function channelOf(payload: unknown): string | null {
  const channel = (payload as { channel?: unknown } | null)?.channel;
  return typeof channel === 'string' ? channel : null;
}
