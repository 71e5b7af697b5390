import { randomUUID } from 'node:crypto';
import type { FastifyInstance, InjectOptions } from 'fastify';
import { io } from 'socket.io-client';
import t from 'tap';
import { buildTestApp } from './helpers/app.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { accessTokenFor } from './helpers/tokens.ts';

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** A user's token with a known id (the default policies compare sender_id with it). */
function userToken(app: FastifyInstance, sub = randomUUID()): { sub: string; headers: Record<string, string> } {
  const token = app.accessTokens.sign({
    sub,
    email: 'someone@example.com',
    role: 'user',
    sid: randomUUID(),
    token_use: 'access',
  });
  return { sub, headers: bearer(token) };
}

t.test('channels: administrators list, create, update and delete them', async (t) => {
  const { app } = await buildTestApp(t);
  const admin = bearer(accessTokenFor(app, 'admin'));
  const user = bearer(accessTokenFor(app, 'user'));

  const created = await app.inject({
    method: 'POST',
    url: '/api/realtime/channels',
    headers: admin,
    payload: { pattern: 'order:%', description: 'Order events' },
  });
  t.equal(created.statusCode, 201);
  const channel = created.json();
  t.match(channel, { pattern: 'order:%', description: 'Order events', enabled: true });

  const listed = await app.inject({ url: '/api/realtime/channels', headers: admin });
  t.equal(listed.statusCode, 200);
  t.same(
    listed.json().channels.map((c: { pattern: string }) => c.pattern),
    ['order:%'],
  );

  assertErrorBody(
    t,
    await app.inject({
      method: 'POST',
      url: '/api/realtime/channels',
      headers: admin,
      payload: { pattern: 'order:%' },
    }),
    409,
    'CHANNEL_ALREADY_EXISTS',
  );
  assertErrorBody(
    t,
    await app.inject({
      method: 'POST',
      url: '/api/realtime/channels',
      headers: admin,
      payload: { pattern: 'has space' },
    }),
    400,
    'INVALID_INPUT',
  );

  const updated = await app.inject({
    method: 'PATCH',
    url: `/api/realtime/channels/${channel.id}`,
    headers: admin,
    payload: { enabled: false, description: null },
  });
  t.equal(updated.statusCode, 200);
  t.match(updated.json(), { id: channel.id, enabled: false, description: null });
  t.ok(updated.json().updatedAt >= channel.updatedAt, 'updatedAt moves');
  assertErrorBody(
    t,
    await app.inject({ method: 'PATCH', url: `/api/realtime/channels/${channel.id}`, headers: admin, payload: {} }),
    400,
    'INVALID_INPUT',
  );
  assertErrorBody(
    t,
    await app.inject({
      method: 'PATCH',
      url: `/api/realtime/channels/${randomUUID()}`,
      headers: admin,
      payload: { enabled: true },
    }),
    404,
    'NOT_FOUND',
  );

  const asUser: InjectOptions[] = [
    { method: 'GET', url: '/api/realtime/channels' },
    { method: 'POST', url: '/api/realtime/channels', payload: { pattern: 'x:%' } },
    { method: 'PATCH', url: `/api/realtime/channels/${channel.id}`, payload: { enabled: true } },
    { method: 'DELETE', url: `/api/realtime/channels/${channel.id}` },
  ];
  for (const request of asUser) {
    assertErrorBody(t, await app.inject({ ...request, headers: user }), 403, 'FORBIDDEN');
  }

  const deleted = await app.inject({ method: 'DELETE', url: `/api/realtime/channels/${channel.id}`, headers: admin });
  t.equal(deleted.statusCode, 204);
  assertErrorBody(
    t,
    await app.inject({ method: 'DELETE', url: `/api/realtime/channels/${channel.id}`, headers: admin }),
    404,
    'NOT_FOUND',
  );
  assertErrorBody(
    t,
    await app.inject({ method: 'DELETE', url: '/api/realtime/channels/%', headers: admin }),
    400,
    'INVALID_INPUT',
  );
});

t.test('publishing over HTTP: the policies decide, subscribers receive it, history returns it', async (t) => {
  const { app } = await buildTestApp(t, { env: { REALTIME_MAX_PAYLOAD_BYTES: '256' } });
  const admin = bearer(accessTokenFor(app, 'admin'));
  for (const pattern of ['room:%', 'closed:%']) {
    await app.inject({ method: 'POST', url: '/api/realtime/channels', headers: admin, payload: { pattern } });
  }
  const closed = (await app.inject({ url: '/api/realtime/channels', headers: admin }))
    .json()
    .channels.find((c: { pattern: string }) => c.pattern === 'closed:%');
  await app.inject({
    method: 'PATCH',
    url: `/api/realtime/channels/${closed.id}`,
    headers: admin,
    payload: { enabled: false },
  });

  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address() as { port: number };
  const alice = userToken(app);
  const bob = userToken(app);
  const listener = io(`http://127.0.0.1:${port}`, {
    transports: ['websocket'],
    reconnection: false,
    auth: { token: bob.headers.authorization?.slice('Bearer '.length) },
  });
  t.teardown(() => listener.close());
  const ack = await listener.timeout(5_000).emitWithAck('realtime:subscribe', { channel: 'room:1' });
  t.equal(ack.ok, true, 'the listener subscribed');
  const received = new Promise<Record<string, unknown>>((resolve) => listener.once('status_changed', resolve));

  const publish = (headers: Record<string, string>, payload: Record<string, unknown>) =>
    app.inject({ method: 'POST', url: '/api/realtime/messages', headers, payload });
  const res = await publish(alice.headers, { channel: 'room:1', event: 'status_changed', payload: { status: 'ok' } });
  t.equal(res.statusCode, 201);
  const message = res.json();
  t.match(message, { channel: 'room:1', event: 'status_changed', payload: { status: 'ok' }, senderId: alice.sub });
  t.same(
    await received,
    {
      status: 'ok',
      meta: {
        channel: 'room:1',
        messageId: message.messageId,
        senderType: 'user',
        senderId: alice.sub,
        timestamp: message.timestamp,
      },
    },
    'the subscriber got it with meta',
  );

  assertErrorBody(
    t,
    await publish(alice.headers, { channel: 'room:1', event: 'x', payload: {}, senderId: bob.sub }),
    403,
    'FORBIDDEN',
  );
  assertErrorBody(t, await publish(alice.headers, { channel: 'closed:1', event: 'x', payload: {} }), 403, 'FORBIDDEN');
  assertErrorBody(t, await publish(alice.headers, { channel: 'nowhere', event: 'x', payload: {} }), 403, 'FORBIDDEN');
  assertErrorBody(
    t,
    await publish(alice.headers, { channel: 'room:1', event: 'x', payload: { meta: 1 } }),
    400,
    'INVALID_INPUT',
  );
  assertErrorBody(
    t,
    await publish(alice.headers, { channel: 'room:1', event: 'realtime:x', payload: {} }),
    400,
    'INVALID_INPUT',
  );
  assertErrorBody(
    t,
    await publish(alice.headers, { channel: 'room:1', event: 'x', payload: { text: 'y'.repeat(300) } }),
    413,
    'PAYLOAD_TOO_LARGE',
  );
  assertErrorBody(
    t,
    await app.inject({
      method: 'POST',
      url: '/api/realtime/messages',
      payload: { channel: 'room:1', event: 'x', payload: {} },
    }),
    401,
    'UNAUTHORIZED',
  );

  // History: four more messages, read in pages of two after the first.
  const ids = [message.messageId as string];
  for (let i = 0; i < 4; i += 1) {
    ids.push((await publish(alice.headers, { channel: 'room:1', event: 'n', payload: { i } })).json().messageId);
  }
  const history = (query: string, headers = bob.headers) =>
    app.inject({ url: `/api/realtime/messages?${query}`, headers });
  const page1 = await history(`channel=room:1&after=${ids[0]}&limit=2`);
  t.equal(page1.statusCode, 200);
  t.same(
    page1.json().messages.map((m: { messageId: string }) => m.messageId),
    ids.slice(1, 3),
  );
  t.equal(page1.json().hasMore, true);
  const page2 = await history(`channel=room:1&after=${ids[2]}&limit=2`);
  t.same(
    page2.json().messages.map((m: { messageId: string }) => m.messageId),
    ids.slice(3, 5),
  );
  t.equal(page2.json().hasMore, false);
  const all = (await history('channel=room:1')).json();
  t.same(
    all.messages.map((m: { messageId: string }) => m.messageId),
    ids,
    'the whole history, in the order it was accepted',
  );
  t.same(all.messages[1], {
    messageId: ids[1],
    channel: 'room:1',
    event: 'n',
    payload: { i: 0 },
    senderType: 'user',
    senderId: alice.sub,
    timestamp: all.messages[1].timestamp,
  });
  assertErrorBody(t, await history(`channel=room:1&after=${randomUUID()}`), 404, 'NOT_FOUND');
  assertErrorBody(t, await history(`channel=room:2&after=${ids[0]}`), 404, 'NOT_FOUND');
  assertErrorBody(t, await history('channel=room:1&limit=0'), 400, 'INVALID_INPUT');
  assertErrorBody(t, await history('channel=room:1&limit=1001'), 400, 'INVALID_INPUT');
  assertErrorBody(t, await history('limit=1'), 400, 'INVALID_INPUT');

  // Disabling the channel hides its history under the default read policy.
  const room = (await app.inject({ url: '/api/realtime/channels', headers: admin }))
    .json()
    .channels.find((c: { pattern: string }) => c.pattern === 'room:%');
  await app.inject({
    method: 'PATCH',
    url: `/api/realtime/channels/${room.id}`,
    headers: admin,
    payload: { enabled: false },
  });
  t.same((await history('channel=room:1')).json(), { messages: [], hasMore: false }, 'nothing readable any more');
});

t.test('plain HTTP to the socket.io path gets a 400 in the Error shape (WebSocket transport only)', async (t) => {
  const { app } = await buildTestApp(t);
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address() as { port: number };
  for (const path of ['/socket.io/?EIO=4&transport=polling', '/socket.io/']) {
    const res = await fetch(`http://127.0.0.1:${port}${path}`);
    t.equal(res.status, 400, path);
    t.same(Object.keys((await res.json()) as object).sort(), ['error', 'message', 'statusCode']);
  }
  const other = await fetch(`http://127.0.0.1:${port}/api/health`);
  t.equal(other.status, 200, 'other paths still reach the service');
});
