import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Server, type Socket as ServerSocket } from 'socket.io';
import { io, type Socket } from 'socket.io-client';
import t from 'tap';
import { parse } from 'yaml';
import { projectFile } from '../src/project-file.ts';
import { buildTestApp } from './helpers/app.ts';
import {
  asyncapiDocument,
  type ClientEvent,
  checkedClient,
  validateAck,
  validateAt,
  validateClientEmit,
  validateServerEvent,
} from './helpers/asyncapi-check.ts';

type Ref = { $ref: string };
interface Example {
  name: string;
  payload: unknown;
}
interface Message {
  name: string;
  payload: Ref;
  examples?: Example[];
}
interface Operation {
  action: 'send' | 'receive';
  messages: Ref[];
  reply?: { messages: Ref[] };
}

/** The node a local `$ref` (`#/a/b`) points to in asyncapi.yaml, following refs to refs. */
function resolve<T>(node: T | Ref): T {
  if (typeof node !== 'object' || node === null || !('$ref' in node)) return node as T;
  let target: unknown = asyncapiDocument;
  for (const part of node.$ref.replace(/^#\//, '').split('/')) {
    target = (target as Record<string, unknown>)[part.replaceAll('~1', '/').replaceAll('~0', '~')];
  }
  if (target === undefined) throw new Error(`unresolved ${node.$ref}`);
  return resolve(target as T | Ref);
}

const components = asyncapiDocument.components as {
  messages: Record<string, Message>;
  schemas: Record<string, { examples?: unknown[] }>;
};
const channels = asyncapiDocument.channels as Record<string, { messages: Record<string, Message | Ref> }>;
const operations = asyncapiDocument.operations as Record<string, Operation>;

/** The event name the document's broadcast message stands for (its `name` is a placeholder). */
const broadcastEvent = 'chat.message';
const lobbyMember = { presenceId: randomUUID(), userId: randomUUID() };
const meta = (channel: string) => ({
  channel,
  messageId: randomUUID(),
  senderType: 'user',
  senderId: lobbyMember.userId,
  timestamp: new Date().toISOString(),
});

t.test('the checker refuses what the protocol does not allow', async (t) => {
  t.match(validateServerEvent('realtime:error', { code: 'NOPE', message: 'x', channel: null }), /code must be one of/);
  t.match(validateServerEvent('realtime:error', { code: 'UNAUTHORIZED', message: 'x' }), /'channel'/);
  t.match(validateServerEvent('realtime:error', { error: 'UNAUTHORIZED', message: 'x', channel: null }), /'code'/);
  t.match(validateServerEvent(broadcastEvent, { text: 'hello' }), /required property 'meta'/);
  t.match(validateServerEvent(broadcastEvent, { text: 'hello', meta: { channel: 'room:lobby' } }), /'messageId'/);
  t.match(validateServerEvent('connect', { meta: meta('room:lobby') }), /not a server event/);
  t.match(validateServerEvent('presence:join', { meta: { channel: 'room:lobby' } }), /'member'/);

  const publish = (event: string, payload: unknown = { text: 'hello' }) =>
    validateClientEmit('realtime:publish', { channel: 'room:lobby', event, payload });
  t.equal(publish(broadcastEvent), undefined);
  for (const reserved of ['realtime:subscribe', 'presence:join', 'disconnect', 'newListener']) {
    t.match(publish(reserved), /payload\/event must/, `${reserved} is reserved`);
  }
  t.match(publish('a'.repeat(65)), /payload\/event must/);
  t.match(publish(broadcastEvent, { text: 'hello', meta: {} }), /payload\/payload must not have property 'meta'/);
  t.match(publish(broadcastEvent, ['not', 'an', 'object']), /payload\/payload must be object/);
  t.match(validateClientEmit('realtime:subscribe', { channel: 'room:%' }), /payload\/channel must match pattern/);
  t.match(
    validateClientEmit('realtime:subscribe', { channel: 'room:lobby', extra: 1 }),
    /must not have property 'extra'/,
  );
  t.match(validateClientEmit('chat', {}), /not a client event/);

  t.match(validateAck('realtime:subscribe', { ok: true, channel: 'room:lobby' }), /ack must have required property/);
  t.match(
    validateAck('realtime:publish', { ok: false, channel: 'room:lobby', error: { code: 'NOPE', message: 'x' } }),
    /ack\/error\/code must be one of/,
  );
  t.match(validateAck('realtime:unsubscribe', { ok: 'yes', channel: 'room:lobby' }), /oneOf/);
});

t.test('every example of every message validates against its payload schema', async (t) => {
  for (const channel of Object.values(channels)) {
    for (const [key, message] of Object.entries(channel.messages)) {
      t.ok('$ref' in message && message.$ref.startsWith('#/components/messages/'), `${key} is a component`);
    }
  }
  for (const [key, message] of Object.entries(components.messages)) {
    t.ok(message.examples?.length, `${key} has examples`);
    const pointer = message.payload.$ref.replace(/^#/, '');
    for (const example of message.examples ?? []) {
      t.equal(validateAt(pointer, example.payload), undefined, `${key} example ${example.name}`);
    }
  }
  for (const [name, schema] of Object.entries(components.schemas)) {
    for (const example of schema.examples ?? []) {
      t.equal(validateAt(`/components/schemas/${name}`, example), undefined, `${name} example`);
    }
  }
});

t.test("the document's operations and event names are the checker's", async (t) => {
  const sent = new Set<string>();
  for (const [id, operation] of Object.entries(operations)) {
    for (const message of operation.messages.map((m) => resolve<Message>(m))) {
      const event = message.name === '<event>' ? broadcastEvent : message.name;
      for (const example of message.examples ?? []) {
        const problem =
          operation.action === 'send'
            ? validateClientEmit(event, example.payload)
            : validateServerEvent(event, example.payload);
        t.equal(problem, undefined, `${id}: ${message.name} example ${example.name}`);
      }
      if (operation.action === 'send') sent.add(event);
      for (const reply of operation.reply?.messages.map((m) => resolve<Message>(m)) ?? []) {
        for (const example of reply.examples ?? []) {
          t.equal(validateAck(event as ClientEvent, example.payload), undefined, `${id}: ack example ${example.name}`);
        }
      }
    }
  }
  t.same([...sent].sort(), ['realtime:publish', 'realtime:subscribe', 'realtime:unsubscribe']);
});

/** The next `event` the socket receives. */
const next = (socket: Socket, event: string) =>
  new Promise<unknown>((resolve) => socket.once(event, (payload: unknown) => resolve(payload)));

t.test('checkedClient checks what goes out, what comes back and what comes in', async (t) => {
  // A stand-in server: answers as told by the channel name, and broadcasts what is published.
  const http = createServer();
  const server = new Server(http, { transports: ['websocket'] });
  const connected = new Promise<ServerSocket>((resolve) => server.once('connection', resolve));
  server.on('connection', (socket) => {
    socket.on('realtime:subscribe', (request: { channel: string }, ack?: (response: unknown) => void) => {
      const presence = { members: [lobbyMember] };
      if (request.channel === 'room:bad-ack') ack?.({ ok: true, channel: request.channel });
      else if (request.channel === 'room:other-channel') ack?.({ ok: true, channel: 'room:lobby', presence });
      else ack?.({ ok: true, channel: request.channel, presence });
    });
    socket.on('realtime:unsubscribe', (request: { channel: string }, ack?: (response: unknown) => void) =>
      ack?.({ ok: true, channel: request.channel }),
    );
    socket.on(
      'realtime:publish',
      (request: { channel: string; event: string; payload: object }, ack?: (r: unknown) => void) => {
        ack?.({ ok: true, channel: request.channel, messageId: randomUUID() });
        socket.emit(request.event, { ...request.payload, meta: meta(request.channel) });
      },
    );
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const client = checkedClient(
    io(`http://127.0.0.1:${(http.address() as AddressInfo).port}`, { transports: ['websocket'], forceNew: true }),
  );
  t.teardown(async () => {
    client.disconnect();
    await server.close();
  });
  const serverSocket = await connected;

  t.test('a conversation that follows the protocol leaves no violation', async (t) => {
    const subscribed = await client.emitWithAck('realtime:subscribe', { channel: 'room:lobby' });
    t.equal(subscribed.ok, true, 'emitWithAck still resolves with the acknowledgement');
    const received = next(client, broadcastEvent);
    const acked = await new Promise((resolve) =>
      client.emit(
        'realtime:publish',
        { channel: 'room:lobby', event: broadcastEvent, payload: { text: 'hi' } },
        resolve,
      ),
    );
    t.match(acked, { ok: true, channel: 'room:lobby' }, 'a plain callback still gets the acknowledgement');
    t.match(await received, { text: 'hi', meta: { channel: 'room:lobby' } });
    const [error, timed] = await new Promise<unknown[]>((resolve) =>
      client
        .timeout(5_000)
        .emit('realtime:publish', { channel: 'room:lobby', event: 'notice', payload: {} }, (...args: unknown[]) =>
          resolve(args),
        ),
    );
    t.equal(error, null, 'a timeout() callback still gets (error, value)');
    t.match(timed, { ok: true });
    const unsubscribed = await client.timeout(5_000).emitWithAck('realtime:unsubscribe', { channel: 'room:lobby' });
    t.same(unsubscribed, { ok: true, channel: 'room:lobby' }, 'so does timeout().emitWithAck');
    t.same(client.violations, []);
  });

  t.test('what does not follow the protocol is collected', async (t) => {
    client.violations.length = 0;
    const [withoutMeta, fake] = [next(client, 'chat.raw'), next(client, 'presence:fake')];
    await client.emitWithAck('realtime:subscribe', { channel: 'room:bad-ack' });
    await client.emitWithAck('realtime:subscribe', { channel: 'room:other-channel' });
    client.emit('realtime:subscribe', { channel: 'room:lobby' });
    client.emit('realtime:publish', { channel: 'room:lobby', event: 'presence:fake', payload: { text: 'hi' } });
    serverSocket.emit('chat.raw', { text: 'no meta' });
    serverSocket.emit('realtime:error', { code: 'NOPE', message: 'x', channel: null });
    serverSocket.emit('presence:join', { meta: { channel: 'room:lobby' }, member: lobbyMember }, 'extra');
    await Promise.all([withoutMeta, fake]);
    await client.emitWithAck('realtime:subscribe', { channel: 'room:lobby' }); // the events above have arrived
    const expected = [
      /^realtime:subscribe acknowledgement: ack must have required property 'presence'/,
      /^realtime:subscribe acknowledgement: channel "room:lobby" is not the request's \(room:other-channel\)$/,
      /^realtime:subscribe sent without an acknowledgement callback$/,
      /^realtime:publish: payload\/event must match pattern/,
      /^presence:fake: not a server event of asyncapi\.yaml/, // the stand-in broadcasts what it is given
      /^chat\.raw: payload must have required property 'meta'$/,
      /^realtime:error: payload\/code must be one of/,
      /^received presence:join with 2 arguments/,
    ];
    for (const pattern of expected) {
      t.ok(
        client.violations.some((v) => pattern.test(v)),
        pattern.source,
      );
    }
    t.equal(client.violations.length, expected.length, client.violations.join('\n'));
  });
});

t.test('GET /asyncapi.yaml serves the document as written', async (t) => {
  const { app } = await buildTestApp(t);
  const res = await app.inject({ url: '/asyncapi.yaml' });
  t.equal(res.statusCode, 200);
  t.equal(res.headers['content-type'], 'application/yaml; charset=utf-8');
  t.equal(res.body, readFileSync(projectFile('asyncapi.yaml'), 'utf8'));
  t.match(parse(res.body), { asyncapi: '3.0.0', info: { version: '0.7.0' } });
});
