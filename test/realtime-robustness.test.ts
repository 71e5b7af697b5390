import { io, type Socket } from 'socket.io-client';
import t, { type Test } from 'tap';
import { buildTestApp } from './helpers/app.ts';
import { accessTokenFor } from './helpers/tokens.ts';

type Reply = { ok: boolean; error?: { code: string } };

/** An app on loopback with a `room:%` channel, and a connected, subscribed socket factory. */
async function setUp(t: Test, env: Record<string, string> = {}) {
  const { app, database } = await buildTestApp(t, { env: { REALTIME_PUBLISH_RATE: '1000000', ...env } });
  await database.handle.db.insertInto('realtime.channels').values({ pattern: 'room:%' }).execute();
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address() as { port: number };
  const connect = async (): Promise<Socket> => {
    const socket = io(`http://127.0.0.1:${port}`, {
      transports: ['websocket'],
      reconnection: false,
      forceNew: true,
      auth: { token: accessTokenFor(app) },
    });
    t.teardown(() => socket.close());
    const joined = (await socket.timeout(5_000).emitWithAck('realtime:subscribe', { channel: 'room:1' })) as Reply;
    t.equal(joined.ok, true, 'subscribed');
    return socket;
  };
  return { app, db: database.handle.db, connect };
}

const publishAck = (socket: Socket, payload: unknown): Promise<Reply> =>
  socket.timeout(5_000).emitWithAck('realtime:publish', { channel: 'room:1', event: 'note', payload });

t.test('a numeric event name is an unknown event, not a crash', async (t) => {
  const { connect } = await setUp(t);
  const socket = await connect();
  const error = new Promise<{ code: string }>((resolve) => socket.once('realtime:error', resolve));
  socket.emit(5 as unknown as string, {});
  t.equal((await error).code, 'UNKNOWN_EVENT');
  t.equal((await publishAck(socket, { still: 'alive' })).ok, true, 'the server and the connection still work');
});

t.test('unstorable strings and binary data in a payload are INVALID_PAYLOAD', async (t) => {
  const { connect, db } = await setUp(t);
  const socket = await connect();
  for (const [label, payload] of [
    ['a NUL character', { text: 'a\u0000b' }],
    ['an unpaired surrogate', { text: '\ud800' }],
    ['a NUL in a property name', { 'a\u0000': 1 }],
    ['binary data', { blob: Buffer.from('bytes') }],
  ] as const) {
    const reply = await publishAck(socket, payload);
    t.same([reply.ok, reply.error?.code], [false, 'INVALID_PAYLOAD'], label);
  }
  t.same(await db.selectFrom('realtime.messages').select('id').execute(), [], 'nothing stored');
  t.equal((await publishAck(socket, { text: 'fine' })).ok, true, 'a good one still goes through');
});

t.test('a connection’s waiting requests are bounded; the rest are RATE_LIMITED', async (t) => {
  const { connect } = await setUp(t);
  const socket = await connect();
  const replies = await Promise.all(Array.from({ length: 200 }, (_, n) => publishAck(socket, { n })));
  const accepted = replies.filter((r) => r.ok).length;
  const refused = replies.filter((r) => !r.ok);
  t.ok(accepted >= 64, `at least 64 carried out (${accepted})`);
  t.ok(refused.length > 0, `some refused (${refused.length})`);
  t.ok(
    refused.every((r) => r.error?.code === 'RATE_LIMITED'),
    'each refusal is RATE_LIMITED',
  );
  t.equal((await publishAck(socket, { after: true })).ok, true, 'and the connection goes on');
});

// An acknowledged message reaches every live subscriber, or is not acknowledged: with the fan-out
// unreachable a publish is refused and kept nowhere (test/realtime-fanout-outage.test.ts has the
// outage and the recovery).
t.test('with the Redis adapter and Redis unreachable, the service stays up and refuses publishes', async (t) => {
  const { app, connect, db } = await setUp(t, { REALTIME_ADAPTER: 'redis', REDIS_URL: 'redis://127.0.0.1:1' });
  await new Promise((resolve) => setTimeout(resolve, 500));
  const socket = await connect();
  const reply = await publishAck(socket, { text: 'not kept' });
  t.equal(reply.ok, false, 'refused: it could not reach every subscriber');
  t.equal(reply.error?.code, 'SERVICE_UNAVAILABLE', 'SERVICE_UNAVAILABLE');
  const stored = await db.selectFrom('realtime.messages').select('payload').execute();
  t.same(stored, [], 'and not in history');
  t.equal((await app.inject({ url: '/api/health' })).statusCode, 200, 'the process is alive');
});
