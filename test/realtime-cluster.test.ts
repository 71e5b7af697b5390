// Two instances of the realtime server in this process, on one PostgreSQL database and two ports,
// must act as one: what is published on one reaches the subscribers of the other, presence spans
// both, and every subscriber sees a channel's messages in the same, commit, order: with the Postgres
// adapter because the notification is part of the publishing transaction, with Redis because the
// channel's lock is held until Redis has taken the message (README, "Several instances").
import { createAdapter as createPostgresAdapter } from '@socket.io/postgres-adapter';
import type { FastifyInstance } from 'fastify';
import { type Kysely, sql } from 'kysely';
import pg from 'pg';
import { Server } from 'socket.io';
import t, { type Test } from 'tap';
import { buildApp } from '../src/app.ts';
import { type Env, loadConfig } from '../src/config.ts';
import { openDatabase } from '../src/db/database.ts';
import type { Database } from '../src/db/schema.ts';
import { buildTestApp } from './helpers/app.ts';
import { decodeClaims, newRedisKeyPrefix } from './helpers/auth.ts';
import { usingPostgres } from './helpers/database.ts';
import {
  collect,
  commitOrder,
  nextEvent,
  publish,
  RealtimeClients,
  subscribe,
  subscribed,
  urlOf,
  waitForCount,
  waitUntil,
} from './helpers/realtime-client.ts';
import { deleteRedisKeys, redisAvailable, TEST_REDIS_URL } from './helpers/redis.ts';
import { accessTokenFor } from './helpers/tokens.ts';

/** Hundreds of publishes from one socket at once must not meet the per-connection publish rate. */
const UNLIMITED_PUBLISHING: Env = { REALTIME_PUBLISH_RATE: '1000000' };

interface Cluster {
  a: FastifyInstance;
  b: FastifyInstance;
  db: Kysely<Database>;
  /** The database's URL. */
  url: string;
}

/**
 * Instance A (a test app on a fresh database) and instance B (built on the same database through
 * its own connection pool), both listening, both with `env`. B is closed before A's database goes.
 */
async function twoInstances(t: Test, env: Env): Promise<Cluster> {
  const first = await buildTestApp(t, { env: { ...UNLIMITED_PUBLISHING, ...env } });
  const a = first.app;
  const database = await openDatabase(first.database.config);
  const config = loadConfig({
    NODE_ENV: 'test',
    LOG_LEVEL: 'silent',
    DATABASE_URL: first.database.url,
    ...UNLIMITED_PUBLISHING,
    ...env,
  });
  const b = await buildApp(config, { database, logger: false });
  // Teardowns run last-registered first: B and its pool close before A drops the database.
  t.teardown(async () => {
    await b.close();
    await database.close();
  });
  await b.ready();
  await a.listen({ port: 0, host: '127.0.0.1' });
  await b.listen({ port: 0, host: '127.0.0.1' });
  const db = first.database.handle.db;
  await db.insertInto('realtime.channels').values({ pattern: 'room:%' }).execute();
  return { a, b, db, url: first.database.url };
}

/** A connected socket of a made-up user on one instance (both verify A's tokens: one signing key in the database). */
async function signedInAt(clients: RealtimeClients[], index: 0 | 1, app: FastifyInstance) {
  const token = accessTokenFor(app);
  const clientsOf = clients[index] as RealtimeClients;
  return { socket: await clientsOf.connect(token), userId: String(decodeClaims(token).sub) };
}

/** The scenarios every adapter must pass. */
function acrossInstances(t: Test, env: Env) {
  t.test('a subscriber on B receives what is published on A, and back; presence spans both', async (t) => {
    const { a, b } = await twoInstances(t, env);
    const clients = [new RealtimeClients(t, urlOf(a)), new RealtimeClients(t, urlOf(b))];
    const channel = 'room:cluster';
    const atA = await signedInAt(clients, 0, a);
    const atB = await signedInAt(clients, 1, a);
    const alsoAtB = await signedInAt(clients, 1, a);

    await subscribed(atA.socket, channel);
    const joinSeenOnA = nextEvent(atA.socket, 'presence:join', 5_000);
    const ack = await subscribe(atB.socket, channel, 5_000);
    const members = ack.presence?.members ?? [];
    t.same(members.map((m) => m.userId).sort(), [atA.userId, atB.userId].sort(), 'members from both instances');
    const memberB = members.find((m) => m.userId === atB.userId);
    t.same(await joinSeenOnA, { meta: { channel }, member: memberB }, 'presence:join crosses to A');
    await subscribed(alsoAtB.socket, channel);

    const received = [atA, atB, alsoAtB].map((m) => collect<Record<string, unknown>>(m.socket, 'cross'));
    const fromA = await publish(atA.socket, { channel, event: 'cross', payload: { from: 'A' } });
    const fromB = await publish(atB.socket, { channel, event: 'cross', payload: { from: 'B' } });
    t.equal(fromA.ok && fromB.ok, true, 'both accepted');
    for (const list of received) await waitForCount(list, 2, 5_000);
    const [onA, onB, alsoOnB] = received;
    t.same(onB, onA, 'B receives what A does');
    t.same(alsoOnB, onA, 'and so does the second socket on B');
    t.match(
      onB?.find((m) => m.from === 'A'),
      { meta: { messageId: fromA.messageId, senderId: atA.userId } },
    );
    t.match(
      onA?.find((m) => m.from === 'B'),
      { meta: { messageId: fromB.messageId, senderId: atB.userId } },
    );

    const leaveSeenOnA = nextEvent(atA.socket, 'presence:leave', 5_000);
    atB.socket.close();
    t.same(await leaveSeenOnA, { meta: { channel }, member: memberB }, 'presence:leave crosses to A');
    const after = await subscribe(atA.socket, channel, 5_000);
    t.same(
      after.presence?.members.map((m) => m.userId).sort(),
      [atA.userId, alsoAtB.userId].sort(),
      'the one that left is gone from the members',
    );
    t.same(
      clients.flatMap((c) => c.violations()),
      [],
      'everything sent and received matched asyncapi.yaml',
    );
  });

  t.test(
    'a policy change, or a channel disabled through A, ends subscriptions on B within 2 s (asserted with 1 s of slack)',
    async (t) => {
      const { a, b, db } = await twoInstances(t, { ...env, REALTIME_RECHECK_SECONDS: '0' });
      const clients = [new RealtimeClients(t, urlOf(a)), new RealtimeClients(t, urlOf(b))];
      const channel = 'room:recheck';
      const kept = await signedInAt(clients, 0, a);
      const removed = await signedInAt(clients, 1, a);
      const alsoOnB = await signedInAt(clients, 1, a);
      for (const m of [kept, removed, alsoOnB]) await subscribed(m.socket, channel);
      const received = collect<{ n: number }>(removed.socket, 'note');
      const removedError = nextEvent(removed.socket, 'realtime:error', 3_000);
      const changedAt = Date.now();
      await sql`
      create policy not_this_one on realtime.channels as restrictive for select to authenticated
        using (auth.uid() is distinct from ${sql.lit(removed.userId)}::uuid)
    `.execute(db);
      t.match(await removedError, { code: 'UNAUTHORIZED', channel }, 'the removed user on B is told');
      t.ok(
        Date.now() - changedAt <= 3_000,
        `ended ${Date.now() - changedAt} ms after the policy change (2 s, plus 1 s for a busy machine)`,
      );
      const before = received.length;
      t.equal((await publish(kept.socket, { channel, event: 'note', payload: { n: 1 } })).ok, true, 'published on A');
      const otherGets = collect(alsoOnB.socket, 'note');
      t.equal((await publish(kept.socket, { channel, event: 'note', payload: { n: 2 } })).ok, true, 'again');
      await waitForCount(otherGets, 1, 5_000);
      t.equal(received.length, before, 'nothing reaches the removed user after the error');

      // A channel disabled through A's API ends the subscriptions on B as well.
      const [row] = await db.selectFrom('realtime.channels').select('id').where('pattern', '=', 'room:%').execute();
      const endedOnB = nextEvent(alsoOnB.socket, 'realtime:error', 3_000);
      const endedOnA = nextEvent(kept.socket, 'realtime:error', 3_000);
      const res = await a.inject({
        method: 'PATCH',
        url: `/api/realtime/channels/${row?.id}`,
        headers: { authorization: `Bearer ${accessTokenFor(a, 'admin')}` },
        payload: { enabled: false },
      });
      t.equal(res.statusCode, 200, 'disabled through A');
      t.match(await endedOnB, { code: 'UNAUTHORIZED', channel }, 'the subscriber on B is told');
      t.match(await endedOnA, { code: 'UNAUTHORIZED', channel }, 'and the one on A');
      t.same(
        clients.flatMap((c) => c.violations()),
        [],
        'everything sent and received matched asyncapi.yaml',
      );
    },
  );

  t.test('data behind a policy changed: a subscription on B ends at its next periodic re-check', async (t) => {
    const { a, b, db } = await twoInstances(t, { ...env, REALTIME_RECHECK_SECONDS: '1' });
    const clients = [new RealtimeClients(t, urlOf(a)), new RealtimeClients(t, urlOf(b))];
    const channel = 'room:members';
    const kept = await signedInAt(clients, 0, a);
    const removed = await signedInAt(clients, 1, a);
    await sql`create table public.room_members (user_id uuid not null)`.execute(db);
    await sql`grant select on public.room_members to authenticated`.execute(db);
    await sql`insert into public.room_members values (${kept.userId}), (${removed.userId})`.execute(db);
    await sql`
      create policy members_only on realtime.channels as restrictive for select to authenticated
        using (exists (select 1 from public.room_members m where m.user_id = auth.uid()))
    `.execute(db);
    for (const m of [kept, removed]) await subscribed(m.socket, channel);
    const received = collect(removed.socket, 'note');
    const ended = nextEvent(removed.socket, 'realtime:error', 3_000);
    const changedAt = Date.now();
    await sql`delete from public.room_members where user_id = ${removed.userId}`.execute(db);
    t.match(await ended, { code: 'UNAUTHORIZED', channel }, 'the removed member on B is told');
    t.ok(Date.now() - changedAt <= 3_000, `ended ${Date.now() - changedAt} ms after the change (period 1 s)`);
    const before = received.length;
    t.equal((await publish(kept.socket, { channel, event: 'note', payload: { n: 1 } })).ok, true, 'published on A');
    await new Promise((resolve) => setTimeout(resolve, 300));
    t.equal(received.length, before, 'nothing reaches the removed member after the error');
  });

  t.test(
    'a handshake with a deeply nested auth object does not reach the other instance (it would overflow its stack)',
    async (t) => {
      const { a, b, db } = await twoInstances(t, { ...env, REALTIME_ALLOW_ANON: 'true' });
      await sql`
      create policy anon_may_subscribe on realtime.channels for select to anon
        using (enabled and realtime.channel_name() like pattern)
    `.execute(db);
      const channel = 'room:anon';
      // A raw socket.io CONNECT whose auth nests 20,000 levels, then a subscribe, on A.
      const raw = new WebSocket(`${urlOf(a).replace('http', 'ws')}/socket.io/?EIO=4&transport=websocket`);
      t.teardown(() => raw.close());
      const frames: string[] = [];
      raw.addEventListener('message', (event) => {
        const text = String(event.data);
        frames.push(text);
        if (text === '2') raw.send('3'); // engine.io ping
      });
      await new Promise((resolve) => raw.addEventListener('open', resolve, { once: true }));
      await waitUntil(() => frames.some((f) => f.startsWith('0')), 5_000, 'the engine.io open');
      const deep = `${'['.repeat(20_000)}${']'.repeat(20_000)}`;
      raw.send(`40{"junk":${deep}}`);
      await waitUntil(() => frames.some((f) => f.startsWith('40')), 5_000, 'the socket.io connect');
      raw.send(`421["realtime:subscribe",{"channel":"${channel}"}]`);
      await waitUntil(() => frames.some((f) => f.startsWith('431')), 5_000, 'the subscribe acknowledgement');
      // An anonymous subscriber on B asks every instance for the channel's members.
      const onB = new RealtimeClients(t, urlOf(b));
      const socket = await onB.connect(undefined);
      const ack = await subscribe(socket, channel, 5_000);
      t.equal(ack.ok, true, 'B subscribed');
      t.equal(ack.presence?.members.length, 2, 'with the member on A listed');
      const health = await a.inject({ url: '/api/health' });
      t.equal(health.statusCode, 200, 'A is still up');
    },
  );

  if (env.REDIS_URL !== undefined) {
    t.test('REALTIME_MAX_SOCKETS_PER_USER counts a user’s sockets on both instances (Redis)', async (t) => {
      const { a, b } = await twoInstances(t, { ...env, REALTIME_MAX_SOCKETS_PER_USER: '2' });
      const clients = [new RealtimeClients(t, urlOf(a)), new RealtimeClients(t, urlOf(b))];
      const [atA, atB] = clients as [RealtimeClients, RealtimeClients];
      const token = accessTokenFor(a);
      await atA.connect(token);
      const onB = await atB.connect(token);
      t.equal((await atA.refusal(token)).data?.code, 'TOO_MANY_CONNECTIONS', 'a third on A is refused');
      t.equal((await atB.refusal(token)).data?.code, 'TOO_MANY_CONNECTIONS', 'and on B');
      t.ok(await atB.connect(accessTokenFor(a)), 'another user is not affected');
      onB.close();
      let accepted = false;
      for (let attempt = 0; attempt < 30 && !accepted; attempt++) {
        accepted = await atA.connect(token).then(
          () => true,
          async () => {
            await new Promise((resolve) => setTimeout(resolve, 100));
            return false;
          },
        );
      }
      t.ok(accepted, 'the place freed on B is taken on A');
    });
  }

  t.test('200 messages from a publisher on each instance arrive in one order on both', async (t) => {
    const { a, b, db } = await twoInstances(t, env);
    const clients = [new RealtimeClients(t, urlOf(a)), new RealtimeClients(t, urlOf(b))];
    const channel = 'room:order';
    const publisherA = await signedInAt(clients, 0, a);
    const publisherB = await signedInAt(clients, 1, a);
    const subscriberA = await signedInAt(clients, 0, a);
    const subscriberB = await signedInAt(clients, 1, a);
    const everyone = [publisherA, publisherB, subscriberA, subscriberB];
    for (const m of everyone) await subscribed(m.socket, channel);
    const received = everyone.map((m) => collect<{ meta: { messageId: string } }>(m.socket, 'seq'));

    // In bursts of 50 per publisher: a connection may have 64 requests waiting.
    let accepted = 0;
    for (let burst = 0; burst < 2; burst += 1) {
      const sends = Array.from({ length: 50 }, (_, i) => [
        publish(publisherA.socket, { channel, event: 'seq', payload: { from: 'A', n: burst * 50 + i } }, 15_000),
        publish(publisherB.socket, { channel, event: 'seq', payload: { from: 'B', n: burst * 50 + i } }, 15_000),
      ]).flat();
      accepted += (await Promise.all(sends)).filter((ack) => ack.ok).length;
    }
    t.equal(accepted, 200, 'all 200 accepted');
    for (const list of received) await waitForCount(list, 200, 15_000);
    const order = await commitOrder(db, channel);
    const [onPublisherA, onPublisherB, onA, onB] = received.map((list) => list.map((m) => m.meta.messageId));
    t.same(onA, order, 'the subscriber on A: commit (seq) order');
    t.same(onB, order, 'the subscriber on B: the same');
    t.same(onPublisherA, order, 'publisher A too');
    t.same(onPublisherB, order, 'publisher B too');
    t.same(
      clients.flatMap((c) => c.violations()),
      [],
      'everything sent and received matched asyncapi.yaml',
    );
  });
}

const PG_REASON = 'needs PostgreSQL (two instances on one database, LISTEN/NOTIFY): run it with TEST_DATABASE_URL set';
const REDIS_NAME = 'two instances with the Redis adapter';

if (!usingPostgres) {
  t.test('two instances of the realtime server', { skip: PG_REASON }, () => {});
} else {
  t.test('two instances with the Postgres adapter', async (t) => {
    acrossInstances(t, { REALTIME_ADAPTER: 'postgres' });
  });

  // During a rolling upgrade, a member of the cluster may not answer the presence request yet (a
  // listener that never replies stands in for one): the instance asking waits for the adapter's
  // timeout, then lists the members of the instances that did answer.
  t.test('presence keeps the answers that came when one member of the cluster never answers', async (t) => {
    const { a, b, url } = await twoInstances(t, { REALTIME_ADAPTER: 'postgres' });
    const clients = [new RealtimeClients(t, urlOf(a)), new RealtimeClients(t, urlOf(b))];
    const atB = await signedInAt(clients, 1, b);
    t.equal((await subscribe(atB.socket, 'room:silent')).ok, true);
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    const silent = new Server();
    silent.adapter(createPostgresAdapter(pool, { tableName: 'realtime.socket_io_attachments' }));
    // It never listens (no HTTP server): its adapter is all there is to close.
    t.teardown(async () => {
      await silent.of('/').adapter.close();
      await pool.end();
    });
    let asked = 0;
    silent.of('/').on('presence:members', () => {
      asked++;
    });
    // Heartbeats answer each other: once it has heard both instances, both have heard it.
    const known = silent.of('/').adapter as unknown as { nodesMap: Map<string, unknown> };
    await waitUntil(() => known.nodesMap.size >= 2, 10_000, 'the silent member hearing both instances');
    const atA = await signedInAt(clients, 0, a);
    const ack = await subscribe(atA.socket, 'room:silent', 10_000);
    t.equal(asked, 1, "A's request reached the silent member, which never answered");
    t.same(
      ack.presence?.members.map((m) => m.userId).sort(),
      [atA.userId, atB.userId].sort(),
      "B's member is listed with A's",
    );
  });

  const withRedis = async (t: Test) => {
    const prefix = newRedisKeyPrefix('realtime-cluster');
    t.teardown(() => deleteRedisKeys(TEST_REDIS_URL, prefix));
    acrossInstances(t, { REALTIME_ADAPTER: 'redis', REDIS_URL: TEST_REDIS_URL, REDIS_KEY_PREFIX: prefix });
  };
  if (await redisAvailable()) {
    t.test(REDIS_NAME, withRedis);
  } else if (process.env.CI === 'true') {
    t.fail(`${REDIS_NAME}: Redis is not available on ${TEST_REDIS_URL}, and CI requires it`);
  } else {
    t.test(REDIS_NAME, { skip: `Redis is not available on ${TEST_REDIS_URL}` }, withRedis);
  }
}
