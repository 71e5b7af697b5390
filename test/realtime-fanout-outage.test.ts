// A realtime message is acknowledged only when it can reach every live subscriber (asyncapi.yaml,
// "Delivery"; docs/reliability.md, "The realtime fan-out fails closed"). While the fan-out between
// instances cannot deliver (Redis stopped; PostgreSQL's LISTEN connection lost), publishes over the
// socket and over HTTP are refused with SERVICE_UNAVAILABLE and are not kept in history; when it
// returns, delivery resumes; publishes waiting meanwhile hold at most a bounded share of the
// database pool. And keys named __proto__, constructor or prototype are refused in a payload, on the
// socket as over HTTP. With Redis, on PostgreSQL two instances share the database (one on PGlite).
import type { FastifyInstance } from 'fastify';
import { type Kysely, sql } from 'kysely';
import pg from 'pg';
import t, { type Test } from 'tap';
import { buildApp } from '../src/app.ts';
import { type Env, loadConfig } from '../src/config.ts';
import { type DatabaseHandle, openDatabase } from '../src/db/database.ts';
import type { Database } from '../src/db/schema.ts';
import { buildTestApp } from './helpers/app.ts';
import { newRedisKeyPrefix } from './helpers/auth.ts';
import { usingPostgres } from './helpers/database.ts';
import { type PrivateRedis, redisServerInstalled, startPrivateRedis } from './helpers/private-redis.ts';
import {
  type Ack,
  collect,
  emitUncheckedWithAck,
  nextEvent,
  publish,
  RealtimeClients,
  subscribed,
  urlOf,
  waitUntil,
} from './helpers/realtime-client.ts';
import { accessTokenFor } from './helpers/tokens.ts';

const CHANNEL = 'room:outage';
/** Generous bounds for what must happen (the machine is shared); none of them is asserted as a time. */
const NOTICE_MS = 10_000;
const RESUME_MS = 20_000;

interface Instances {
  apps: FastifyInstance[];
  db: Kysely<Database>;
  handle: DatabaseHandle;
}

/**
 * A listening instance on a fresh database; on PostgreSQL a second one on the same database
 * through its own pool (closed before the first one's database goes).
 */
async function instances(t: Test, env: Env): Promise<Instances> {
  const env2: Env = { REALTIME_PUBLISH_RATE: '1000000', REALTIME_MAX_SOCKETS_PER_USER: '100', ...env };
  const first = await buildTestApp(t, { env: env2 });
  const apps = [first.app];
  if (usingPostgres) {
    const database = await openDatabase(first.database.config);
    const config = loadConfig({ NODE_ENV: 'test', LOG_LEVEL: 'silent', DATABASE_URL: first.database.url, ...env2 });
    const b = await buildApp(config, { database, logger: false });
    t.teardown(async () => {
      await b.close();
      await database.close();
    });
    await b.ready();
    apps.push(b);
  }
  for (const app of apps) await app.listen({ port: 0, host: '127.0.0.1' });
  const handle = first.database.handle;
  await handle.db.insertInto('realtime.channels').values({ pattern: 'room:%' }).execute();
  return { apps, db: handle.db, handle };
}

const storedIds = async (db: Kysely<Database>): Promise<string[]> =>
  (await db.selectFrom('realtime.messages').select('id').where('channel_name', '=', CHANNEL).execute())
    .map((r) => r.id)
    .sort();

function httpPublish(app: FastifyInstance, token: string, payload: Record<string, unknown>) {
  return app.inject({
    method: 'POST',
    url: '/api/realtime/messages',
    headers: { authorization: `Bearer ${token}` },
    payload: { channel: CHANNEL, event: 'note', payload },
  });
}

/** Resolves once a publish over HTTP is accepted again (the fan-out is back and settled). */
async function untilAccepted(app: FastifyInstance): Promise<void> {
  const token = accessTokenFor(app);
  const deadline = Date.now() + RESUME_MS;
  while ((await httpPublish(app, token, { probe: true })).statusCode !== 201) {
    if (Date.now() > deadline) throw new Error(`publishes still refused ${RESUME_MS} ms after the fan-out returned`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * The scenario every fan-out must pass, around `outage` (which starts it) and `recovery` (which ends
 * it): a publisher and a subscriber on the first instance, and one on the second when there is one.
 * Every acknowledged message must reach every subscriber; during the outage, publishes over the
 * socket and over HTTP are refused with SERVICE_UNAVAILABLE and nothing refused is stored.
 */
async function refusedWhileDown(
  t: Test,
  cluster: Instances,
  outage: () => Promise<void>,
  recovery: () => Promise<void>,
): Promise<void> {
  const { apps, db } = cluster;
  const first = apps[0] as FastifyInstance;
  const clients = apps.map((app) => new RealtimeClients(t, urlOf(app)));
  const token = accessTokenFor(first);
  const publisher = await (clients[0] as RealtimeClients).connect(token);
  const subscribers = await Promise.all(clients.map((c) => c.connect(accessTokenFor(first))));
  for (const socket of [publisher, ...subscribers]) await subscribed(socket, CHANNEL);
  const received = subscribers.map((s) => collect<{ n: number; meta: { messageId: string } }>(s, 'note'));
  const acked: string[] = [];
  let n = 0;
  const send = async (): Promise<Ack> => {
    const ack = await publish(publisher, { channel: CHANNEL, event: 'note', payload: { n: n++ } }, 5_000);
    if (ack.ok && ack.messageId !== undefined) acked.push(ack.messageId);
    return ack;
  };
  const everyAckedDelivered = () =>
    received.every((list) => acked.every((id) => list.some((m) => m.meta.messageId === id)));

  t.equal((await send()).ok, true, 'before the outage a publish is acknowledged');
  await waitUntil(everyAckedDelivered, NOTICE_MS, 'delivery before the outage');

  await outage();
  try {
    await whileDown();
  } finally {
    await recovery();
  }
  async function whileDown() {
    // The service notices the outage at once (a closed connection); until then a publish may still be
    // acknowledged, and must then be delivered.
    let refusal: Ack | undefined;
    const refusalEvent = nextEvent<{ code: string }>(publisher, 'realtime:error', NOTICE_MS).catch(() => undefined);
    const deadline = Date.now() + NOTICE_MS;
    while (refusal === undefined && Date.now() < deadline) {
      const ack = await send();
      if (!ack.ok) refusal = ack;
      else await new Promise((resolve) => setTimeout(resolve, 50));
    }
    t.match(
      refusal,
      { ok: false, channel: CHANNEL, error: { code: 'SERVICE_UNAVAILABLE' } },
      'a socket publish is refused',
    );
    t.match(await refusalEvent, { code: 'SERVICE_UNAVAILABLE' }, 'and told as realtime:error');
    const more = [await send(), await send()];
    t.same(
      more.map((a) => a.error?.code),
      ['SERVICE_UNAVAILABLE', 'SERVICE_UNAVAILABLE'],
      'so are the next ones while it lasts',
    );
    const res = await httpPublish(first, token, { over: 'http' });
    if (res.statusCode === 201) acked.push(res.json().messageId);
    t.equal(res.statusCode, 503, `over HTTP: 503 (${res.body})`);
    t.equal(res.json().error, 'SERVICE_UNAVAILABLE');
    t.ok(res.headers['retry-after'], 'with Retry-After');
    t.same(await storedIds(db), [...acked].sort(), 'history holds exactly the acknowledged messages');
  }
  let resumed: Ack | undefined;
  const resumeDeadline = Date.now() + RESUME_MS;
  while (resumed === undefined && Date.now() < resumeDeadline) {
    const ack = await send();
    if (ack.ok) resumed = ack;
    else await new Promise((resolve) => setTimeout(resolve, 100));
  }
  t.ok(resumed, 'publishes are acknowledged again once the fan-out is back');
  const overHttp = await httpPublish(first, token, { over: 'http', after: true });
  t.equal(overHttp.statusCode, 201, 'over HTTP too');
  acked.push(overHttp.json().messageId);
  await waitUntil(everyAckedDelivered, RESUME_MS, 'every acknowledged message reaching every subscriber').catch(
    (err: Error) => {
      t.fail(err.message);
      t.comment(
        `acknowledged ${JSON.stringify(acked)} received ${JSON.stringify(received.map((l) => l.map((m) => m.meta.messageId)))}`,
      );
    },
  );
  t.ok(everyAckedDelivered(), `all ${acked.length} acknowledged messages reached all ${received.length} subscribers`);
  t.same(await storedIds(db), [...acked].sort(), 'history holds exactly the acknowledged messages');
  t.same(
    clients.flatMap((c) => c.violations()),
    [],
    'everything sent and received matched asyncapi.yaml',
  );
}

/**
 * Twenty sockets of one user, connected and subscribed, publish once `outage` has begun (their
 * requests wait behind each other on each connection); meanwhile the health check and a directory
 * read must keep answering, and the database connections in use are sampled.
 */
async function poolStaysAvailable(
  t: Test,
  cluster: Instances,
  bound: number,
  outage: () => Promise<void> | void,
): Promise<void> {
  const { apps, handle } = cluster;
  const first = apps[0] as FastifyInstance;
  const clients = new RealtimeClients(t, urlOf(first));
  const token = accessTokenFor(first);
  const sockets = await Promise.all(Array.from({ length: 20 }, () => clients.connect(token)));
  for (const socket of sockets) await subscribed(socket, CHANNEL);
  await outage();
  let busiest = 0;
  const sampler = setInterval(() => {
    const stats = handle.poolStats();
    busiest = Math.max(busiest, stats.total - stats.idle);
  }, 5);
  t.teardown(() => clearInterval(sampler));
  const publishes = sockets.flatMap((socket, i) =>
    Array.from({ length: 2 }, (_, k) =>
      publish(socket, { channel: CHANNEL, event: 'flood', payload: { i, k } }, 30_000).catch((err: Error) => ({
        ok: false,
        channel: CHANNEL,
        error: { code: 'NO_ACK', message: err.message },
      })),
    ),
  );
  const admin = accessTokenFor(first, 'admin');
  const answers: number[] = [];
  for (let i = 0; i < 5; i++) {
    const [health, channels] = await Promise.all([
      first.inject({ url: '/api/health' }),
      first.inject({ url: '/api/realtime/channels', headers: { authorization: `Bearer ${admin}` } }),
    ]);
    answers.push(health.statusCode, channels.statusCode);
  }
  const acks = await Promise.all(publishes);
  clearInterval(sampler);
  t.same(
    answers,
    answers.map(() => 200),
    'the health check and a directory read answered 200 while 40 publishes waited',
  );
  t.ok(busiest <= bound, `at most ${bound} database connections in use at once (saw ${busiest})`);
  t.same(
    [...new Set(acks.filter((a) => !a.ok).map((a) => a.error?.code))],
    acks.some((a) => !a.ok) ? ['SERVICE_UNAVAILABLE'] : [],
    'refused publishes say SERVICE_UNAVAILABLE',
  );
}

const redisEnv = (redis: PrivateRedis): Env => ({
  REALTIME_ADAPTER: 'redis',
  REDIS_URL: redis.url,
  REDIS_KEY_PREFIX: newRedisKeyPrefix('fanout-outage'),
});

const redisInstalled = await redisServerInstalled();
const NO_REDIS = 'needs redis-server on this machine (a private one is started and stopped)';

// One Redis and one set of instances for the three scenarios, in turn (building an app is the slow part).
t.test('Redis adapter', { skip: redisInstalled ? false : NO_REDIS }, async (t) => {
  const redis = await startPrivateRedis(t);
  const cluster = await instances(t, redisEnv(redis));

  await t.test('Redis stopped: publishes are refused, not stored; delivery resumes when it returns', (t) =>
    refusedWhileDown(
      t,
      cluster,
      () => redis.stop(),
      () => redis.start(),
    ),
  );

  await t.test('Redis stopped: 20 sockets publishing meanwhile hold no database connection', async (t) => {
    // The health check and the directory read: two connections at most.
    await poolStaysAvailable(t, cluster, 2, () => redis.stop());
    await redis.start();
    await untilAccepted(cluster.apps[0] as FastifyInstance);
  });

  await t.test('Redis frozen (connections open, no answer): publishes hold a bounded share of the pool', async (t) => {
    t.teardown(() => (redis.running ? redis.thaw() : undefined));
    // Five publishes at once on PostgreSQL (one on PGlite's one session), plus the two requests.
    await poolStaysAvailable(t, cluster, usingPostgres ? 7 : 1, () => redis.freeze());
    redis.thaw();
  });
});

const PG_REASON = 'needs PostgreSQL (the Postgres adapter): run it with TEST_DATABASE_URL set';
t.test('Postgres adapter: its LISTEN connection lost', { skip: usingPostgres ? false : PG_REASON }, async (t) => {
  const cluster = await instances(t, { REALTIME_ADAPTER: 'postgres' });
  const { db } = cluster;
  const [{ name } = { name: '' }] = (await sql<{ name: string }>`select current_database() as name`.execute(db)).rows;
  // Connections already in the pools stay; new ones (the adapter's next LISTEN) are refused. Said
  // from another database of the server (a database cannot refuse connections from inside).
  const admin = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL });
  await admin.connect();
  t.teardown(() => admin.end());
  const refuseNewConnections = async (refuse: boolean) => {
    const quoted = `"${name.replaceAll('"', '""')}"`;
    await admin.query(`alter database ${quoted} with allow_connections ${refuse ? 'false' : 'true'}`);
  };
  t.teardown(() => refuseNewConnections(false));
  const endListeners = async () =>
    (
      await admin.query(
        `select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and query like 'LISTEN %'`,
        [name],
      )
    ).rowCount ?? 0;
  let ending: NodeJS.Timeout | undefined;
  t.teardown(() => clearInterval(ending));
  // Enough idle connections in the service's pools for the test's own statements and the publishes.
  await Promise.all(Array.from({ length: 6 }, () => sql`select pg_sleep(0.05)`.execute(db)));
  await refusedWhileDown(
    t,
    cluster,
    async () => {
      await refuseNewConnections(true);
      t.ok((await endListeners()) >= 1, 'the LISTEN connections ended');
      // The adapters LISTEN again on connections their pools already hold: those end too, until
      // their pools have none left (new ones are refused).
      ending = setInterval(() => void endListeners().catch(() => {}), 20);
    },
    async () => {
      clearInterval(ending);
      await refuseNewConnections(false);
    },
  );
});

t.test(
  'keys named __proto__, constructor or prototype are refused in a payload, on the socket as over HTTP',
  async (t) => {
    const cluster = await instances(t, {});
    const first = cluster.apps[0] as FastifyInstance;
    const clients = new RealtimeClients(t, urlOf(first));
    const token = accessTokenFor(first);
    const socket = await clients.connect(token);
    await subscribed(socket, CHANNEL);
    const delivered = collect(socket, 'note');
    const payloads: Array<[string, string]> = [
      ['__proto__ at the top', '{"__proto__":{"admin":true}}'],
      ['constructor at the top', '{"constructor":{"prototype":{"admin":true}}}'],
      ['prototype at the top', '{"prototype":1}'],
      ['__proto__ nested', '{"a":{"b":{"__proto__":{"admin":true}}}}'],
      ['constructor nested', '{"a":{"constructor":1}}'],
      ['prototype in an array', '{"a":[1,{"prototype":{"x":1}}]}'],
    ];
    for (const [what, json] of payloads) {
      const payload = JSON.parse(json) as Record<string, unknown>;
      const errorEvent = nextEvent<{ code: string }>(socket, 'realtime:error', 5_000).catch(() => undefined);
      const ack = await emitUncheckedWithAck(
        socket,
        'realtime:publish',
        { channel: CHANNEL, event: 'note', payload },
        5_000,
      );
      t.match(ack, { ok: false, channel: CHANNEL, error: { code: 'INVALID_PAYLOAD' } }, `socket, ${what}`);
      t.match(await errorEvent, { code: 'INVALID_PAYLOAD' }, `socket, ${what}: realtime:error too`);
      const res = await first.inject({
        method: 'POST',
        url: '/api/realtime/messages',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        payload: `{"channel":"${CHANNEL}","event":"note","payload":${json}}`,
      });
      t.equal(res.statusCode, 400, `HTTP, ${what}: 400`);
      t.equal(res.json().error, 'INVALID_INPUT', `HTTP, ${what}: INVALID_INPUT`);
    }
    const ok = await publish(socket, { channel: CHANNEL, event: 'note', payload: { constructed: 1, proto: 'x' } });
    t.equal(ok.ok, true, 'keys that merely resemble them are accepted');
    await waitUntil(() => delivered.length >= 1, 5_000, 'the accepted message');
    t.equal(delivered.length, 1, 'only the accepted message was delivered');
    const history = await first.inject({
      url: `/api/realtime/messages?channel=${encodeURIComponent(CHANNEL)}`,
      headers: { authorization: `Bearer ${token}` },
    });
    t.same(
      history.json().messages.map((m: { payload: unknown }) => m.payload),
      [{ constructed: 1, proto: 'x' }],
      'and history holds only it',
    );
  },
);
