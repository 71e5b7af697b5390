import { randomUUID } from 'node:crypto';
import { io, type Socket } from 'socket.io-client';
import t from 'tap';
import type { BroadcastMessage, RealtimeClientEvents, RealtimeServerEvents } from '../src/client/index.ts';
import { PublishBudget } from '../src/realtime/publish-budget.ts';
import { buildTestApp } from './helpers/app.ts';
import { accessTokenFor } from './helpers/tokens.ts';

t.test('the budget allows a second’s worth at once, then refills at its rate', async (t) => {
  const budget = new PublishBudget(10, 0);
  const burst = Array.from({ length: 12 }, () => budget.take(0));
  t.same(burst.filter(Boolean).length, 10, 'a burst of 10, then refused');
  t.equal(budget.take(50), false, 'half a publish after 50 ms: still refused');
  t.equal(budget.take(100), true, 'one more after 100 ms');
  t.equal(budget.take(100), false);
  t.equal(budget.take(10_000), true, 'a long pause refills it');
  t.equal([...Array(20)].filter(() => budget.take(10_000)).length, 9, 'but never beyond its size');
});

t.test(
  'a socket publishing faster than REALTIME_PUBLISH_RATE gets RATE_LIMITED, and nothing of it is delivered',
  async (t) => {
    const { app, database } = await buildTestApp(t, { env: { REALTIME_PUBLISH_RATE: '5' } });
    await database.handle.db.insertInto('realtime.channels').values({ pattern: 'room:%' }).execute();
    await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as { port: number };
    // Typed with the SDK's protocol types (generated from asyncapi.yaml).
    const socket: Socket<RealtimeServerEvents, RealtimeClientEvents> = io(`http://127.0.0.1:${port}`, {
      transports: ['websocket'],
      reconnection: false,
      auth: { token: accessTokenFor(app) },
    });
    t.teardown(() => socket.close());
    t.equal((await socket.timeout(5_000).emitWithAck('realtime:subscribe', { channel: 'room:1' })).ok, true);
    const delivered: unknown[] = [];
    const errors: Array<{ code: string }> = [];
    socket.on('tick', (m: BroadcastMessage) => delivered.push(m));
    socket.on('realtime:error', (e) => errors.push(e));
    const acks = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        socket
          .timeout(5_000)
          .emitWithAck('realtime:publish', { channel: 'room:1', event: 'tick', payload: { i, id: randomUUID() } }),
      ),
    );
    t.equal(acks.filter((a) => a.ok).length, 5, 'five accepted');
    t.same(
      acks.filter((a) => !a.ok).map((a) => a.error.code),
      ['RATE_LIMITED', 'RATE_LIMITED', 'RATE_LIMITED'],
      'three refused',
    );
    await new Promise((r) => setTimeout(r, 200));
    t.equal(delivered.length, 5, 'only the accepted ones were delivered');
    t.equal(errors.filter((e) => e.code === 'RATE_LIMITED').length, 3, 'each refusal also came as realtime:error');
    const stored = await database.handle.db.selectFrom('realtime.messages').select('id').execute();
    t.equal(stored.length, 5, 'and stored');
  },
);
