import type { AddressInfo, Socket as NetSocket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { Kysely } from 'kysely';
import { io, Socket } from 'socket.io-client';
import type { Database } from '../../src/db/schema.ts';
import { type CheckedSocket, checkedClient } from './asyncapi-check.ts';

/** How long a realtime helper waits for an answer before failing. */
export const REALTIME_TIMEOUT_MS = 2_000;

interface Teardown {
  teardown(fn: () => unknown): void;
}

/** A refused handshake as socket.io-client reports it: `data` is the server's {code, message}. */
export type ConnectError = Error & { data?: { code?: string; message?: string } };

/** An acknowledgement of the protocol (SubscribeResponse, UnsubscribeResponse, PublishResponse). */
export interface Ack {
  ok: boolean;
  channel: string | null;
  error?: { code: string; message: string };
  messageId?: string;
  presence?: { members: { presenceId: string; userId: string | null }[] };
}

export interface PublishRequest {
  channel: string;
  event: string;
  payload: Record<string, unknown>;
  senderId?: string;
}

/** The base URL of an app that listens (`await app.listen({ port: 0, host: '127.0.0.1' })`). */
export function urlOf(app: FastifyInstance): string {
  const { port } = app.server.address() as AddressInfo;
  return `http://127.0.0.1:${port}`;
}

/**
 * The realtime clients of one test, all closed when it ends. Every socket is wrapped by
 * checkedClient: what it sends and receives is checked against asyncapi.yaml, and `violations()`
 * lists what did not match (tests assert it is empty at their end).
 */
export class RealtimeClients {
  readonly sockets: CheckedSocket[] = [];

  readonly url: string;

  constructor(t: Teardown, url: string) {
    this.url = url;
    t.teardown(() => this.closeAll());
  }

  /** A socket starting its handshake (token undefined: none in the handshake; not a string: a malformed one). */
  open(token: unknown): CheckedSocket {
    const socket = checkedClient(
      io(this.url, {
        transports: ['websocket'],
        auth: token === undefined ? {} : { token },
        reconnection: false,
        forceNew: true,
        timeout: REALTIME_TIMEOUT_MS,
      }),
    );
    this.sockets.push(socket);
    return socket;
  }

  /** A connected socket; rejects with the connect_error when the handshake is refused. */
  async connect(token: unknown): Promise<CheckedSocket> {
    const socket = this.open(token);
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', () => resolve());
      socket.once('connect_error', reject);
    });
    return socket;
  }

  /** The connect_error of a handshake that must be refused; rejects if it connects instead. */
  async refusal(token: unknown): Promise<ConnectError> {
    const socket = this.open(token);
    return new Promise<ConnectError>((resolve, reject) => {
      socket.once('connect', () => reject(new Error('the handshake was accepted')));
      socket.once('connect_error', resolve);
    });
  }

  /** What every socket of this test sent or received that asyncapi.yaml does not allow. */
  violations(): string[] {
    return this.sockets.flatMap((s) => s.violations);
  }

  closeAll(): void {
    for (const socket of this.sockets) socket.close();
  }
}

/** Subscribes and resolves with the acknowledgement (SubscribeResponse). */
export function subscribe(socket: Socket, channel: string, timeoutMs = REALTIME_TIMEOUT_MS): Promise<Ack> {
  return socket.timeout(timeoutMs).emitWithAck('realtime:subscribe', { channel });
}

/** Subscribes and fails unless the acknowledgement is ok:true. */
export async function subscribed(socket: Socket, channel: string): Promise<Ack> {
  const ack = await subscribe(socket, channel);
  if (!ack.ok) throw new Error(`subscribe to ${channel} refused: ${JSON.stringify(ack)}`);
  return ack;
}

export function unsubscribe(socket: Socket, channel: string, timeoutMs = REALTIME_TIMEOUT_MS): Promise<Ack> {
  return socket.timeout(timeoutMs).emitWithAck('realtime:unsubscribe', { channel });
}

/** Publishes and resolves with the acknowledgement (PublishResponse). */
export function publish(socket: Socket, request: PublishRequest, timeoutMs = REALTIME_TIMEOUT_MS): Promise<Ack> {
  return socket.timeout(timeoutMs).emitWithAck('realtime:publish', request);
}

/**
 * Emits around checkedClient's check of what is sent: for the malformed requests a test sends on
 * purpose. What the server answers is still checked. With `withAck`, resolves with the ack's value.
 */
export function emitUnchecked(socket: Socket, event: string, ...args: unknown[]): void {
  Socket.prototype.emit.call(socket, event, ...args);
}

export function emitUncheckedWithAck(
  socket: Socket,
  event: string,
  payload: unknown,
  timeoutMs = REALTIME_TIMEOUT_MS,
): Promise<Ack> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`no acknowledgement of ${event} within ${timeoutMs} ms`)),
      timeoutMs,
    );
    Socket.prototype.emit.call(socket, event, payload, (ack: Ack) => {
      clearTimeout(timer);
      resolve(ack);
    });
  });
}

/** The payload of the next `name` event; rejects after `timeoutMs`. */
export function nextEvent<T = Record<string, unknown>>(
  socket: Socket,
  name: string,
  timeoutMs = REALTIME_TIMEOUT_MS,
): Promise<T> {
  return new Promise((resolve, reject) => {
    const onEvent = (payload: T) => {
      clearTimeout(timer);
      resolve(payload);
    };
    const timer = setTimeout(() => {
      socket.off(name, onEvent);
      reject(new Error(`no ${name} event within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.once(name, onEvent);
  });
}

/** Every `name` event from now on, in order of arrival (a live array). */
export function collect<T = Record<string, unknown>>(socket: Socket, name: string): T[] {
  const received: T[] = [];
  socket.on(name, (payload: T) => received.push(payload));
  return received;
}

/** Rejects, naming what came, if a `name` event arrives within `ms`. */
export async function expectNothing(socket: Socket, name: string, ms: number): Promise<void> {
  const received = collect(socket, name);
  await new Promise((resolve) => setTimeout(resolve, ms));
  if (received.length > 0) throw new Error(`unexpected ${name}: ${JSON.stringify(received).slice(0, 500)}`);
}

/** Resolves once `condition()` holds; rejects after `timeoutMs` with `what` (polls every 10 ms). */
export async function waitUntil(condition: () => boolean, timeoutMs: number, what = 'the condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`${what} did not happen within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Resolves once `received` holds `count` items; rejects after `timeoutMs`, saying how many came. */
export async function waitForCount(received: unknown[], count: number, timeoutMs = REALTIME_TIMEOUT_MS): Promise<void> {
  await waitUntil(() => received.length >= count, timeoutMs).catch(() => {
    throw new Error(`${received.length} of ${count} events within ${timeoutMs} ms`);
  });
}

/** The reason of the socket's next disconnect; rejects after `timeoutMs`. */
export function disconnection(socket: Socket, timeoutMs = REALTIME_TIMEOUT_MS): Promise<string> {
  return nextEvent<string>(socket, 'disconnect', timeoutMs);
}

/**
 * The client's TCP connection under its WebSocket (engine.io-client 6: the transport's `ws` is a
 * `ws` WebSocket, whose `_socket` is the net.Socket), to simulate a client that stops reading.
 */
export function tcpSocketOf(socket: Socket): NetSocket {
  const transport = socket.io.engine.transport as unknown as { ws?: { _socket?: NetSocket } };
  const tcp = transport.ws?._socket;
  if (tcp === undefined) throw new Error('the socket has no WebSocket transport (yet)');
  return tcp;
}

/** The ids of a channel's stored messages in commit order (realtime.messages.seq). */
export async function commitOrder(db: Kysely<Database>, channel: string): Promise<string[]> {
  const rows = await db
    .selectFrom('realtime.messages')
    .select('id')
    .where('channel_name', '=', channel)
    .orderBy('seq')
    .execute();
  return rows.map((r) => r.id);
}
