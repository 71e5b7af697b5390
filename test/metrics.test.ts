// GET /metrics (Prometheus): off by default (404 like any unknown route), behind METRICS_TOKEN on
// the service's port (401 without it), or on METRICS_PORT without a token. Traffic of every kind
// the metrics count is sent through the app, and the scrape must show each series with its labels
// and values that follow from that traffic.
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import net from 'node:net';
import type { FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import t, { type Test } from 'tap';
import { freePort } from '../scripts/lib/service-process.ts';
import { BREAKER_MIN_CALLS } from '../src/embeddings/upstream-breaker.ts';
import { listenForMetrics } from '../src/metrics/listener.ts';
import { buildTestApp } from './helpers/app.ts';
import { buildAuthTestApp, newEmail, PASSWORD, wrongCode } from './helpers/auth.ts';
import { contractProblem } from './helpers/contract-check.ts';
import { usingPostgres } from './helpers/database.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { startFakeUpstream } from './helpers/fake-embeddings-upstream.ts';
import {
  type Ack,
  nextEvent,
  publish,
  RealtimeClients,
  subscribed,
  tcpSocketOf,
  urlOf,
  waitUntil,
} from './helpers/realtime-client.ts';
import { accessTokenFor } from './helpers/tokens.ts';

const TOKEN = randomBytes(32).toString('hex');
const BEARER = { authorization: `Bearer ${TOKEN}` };
const EXPOSITION = /^text\/plain; version=0\.0\.4; charset=utf-8$/;

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** A scrape, parsed: its samples and the declared type of each metric. */
class Exposition {
  readonly samples: Sample[] = [];
  readonly types = new Map<string, string>();

  constructor(text: string) {
    for (const line of text.split('\n')) {
      const type = /^# TYPE (\S+) (\S+)$/.exec(line);
      if (type) this.types.set(type[1] as string, type[2] as string);
      const sample = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
      if (line.startsWith('#') || !sample) continue;
      const labels: Record<string, string> = {};
      for (const [, key, value] of (sample[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
        labels[key as string] = value as string;
      }
      this.samples.push({ name: sample[1] as string, labels, value: Number(sample[3]) });
    }
  }

  /** The samples of `name` whose labels include `labels`. */
  find(name: string, labels: Record<string, string> = {}): Sample[] {
    return this.samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  }

  /** The value of the one sample of `name` with `labels`; undefined when there is none. */
  value(name: string, labels: Record<string, string> = {}): number | undefined {
    const found = this.find(name, labels);
    if (found.length > 1) throw new Error(`${found.length} samples of ${name} ${JSON.stringify(labels)}`);
    return found[0]?.value;
  }
}

/** GET /metrics with the token: a 200 in the exposition format, parsed. */
async function scrape(t: Test, app: FastifyInstance): Promise<Exposition> {
  const res = await app.inject({ url: '/metrics', headers: BEARER });
  t.equal(res.statusCode, 200, 'the scrape answers 200');
  t.match(String(res.headers['content-type']), EXPOSITION, 'in the text exposition format 0.0.4');
  return new Exposition(res.body);
}

t.test('off by default: GET /metrics is a 404 like any unknown route, and nothing is collected', async (t) => {
  const { app, config } = await buildTestApp(t);
  t.equal(app.metrics, null, 'no registry');
  const unknown = assertErrorBody(t, await app.inject({ url: '/nothing-here' }), 404, 'NOT_FOUND');
  const off = assertErrorBody(t, await app.inject({ url: '/metrics' }), 404, 'NOT_FOUND');
  t.equal(off.message, unknown.message.replace('/nothing-here', '/metrics'), 'the same answer as an unknown route');
  assertErrorBody(t, await app.inject({ url: '/metrics', headers: BEARER }), 404, 'NOT_FOUND');
  t.equal(await listenForMetrics(app, config), undefined, 'no metrics port either');
});

t.test('METRICS_TOKEN: the token is required, compared whole; others get 401 in the Error schema', async (t) => {
  const { app } = await buildTestApp(t, { env: { METRICS_TOKEN: TOKEN } });
  const refused: Array<[string, Record<string, string>]> = [
    ['no Authorization header', {}],
    ['a wrong token of the same length', { authorization: `Bearer ${randomBytes(32).toString('hex')}` }],
    ['the token with a character missing', { authorization: `Bearer ${TOKEN.slice(0, -1)}` }],
    ['the token with a character more', { authorization: `Bearer ${TOKEN}0` }],
    ['the token as Basic credentials', { authorization: `Basic ${Buffer.from(`x:${TOKEN}`).toString('base64')}` }],
    ['the token without a scheme', { authorization: TOKEN }],
    ['an access token', { authorization: `Bearer ${accessTokenFor(app, 'admin')}` }],
  ];
  for (const [label, headers] of refused) {
    await t.test(label, async (t) => {
      const body = assertErrorBody(t, await app.inject({ url: '/metrics', headers }), 401, 'UNAUTHORIZED');
      t.notMatch(body.message, TOKEN, 'the token is not echoed');
    });
  }
  const ok = await app.inject({ url: '/metrics', headers: BEARER });
  t.equal(ok.statusCode, 200);
  t.match(String(ok.headers['content-type']), EXPOSITION);
  t.equal(ok.headers['x-content-type-options'], 'nosniff');
  const lower = await app.inject({ url: '/metrics', headers: { authorization: `bearer ${TOKEN}` } });
  t.equal(lower.statusCode, 200, 'the scheme name is case-insensitive');
});

t.test('every series, after traffic of each kind', async (t) => {
  const fake = await startFakeUpstream();
  t.teardown(() => fake.close());
  const built = await buildAuthTestApp(t, {
    label: 'metrics',
    env: {
      METRICS_TOKEN: TOKEN,
      RATE_LIMIT_SEND_VERIFICATION: '1',
      EMBEDDINGS_BASE_URL: fake.baseUrl,
      EMBEDDINGS_RETRY_BASE_MS: '1',
      EMBEDDINGS_BREAKER_RESET_MS: '60000',
    },
  });
  const { app, signUp, verify, smtp } = built;
  const before = await scrape(t, app);
  t.equal(before.value('auth_sign_ins_total', { result: 'ok' }), 0, 'counters start at 0');
  t.equal(before.value('auth_refresh_token_reuse_total'), 0);

  // Sign-up and verification: one wrong code, then the right one.
  const email = newEmail('metrics');
  t.equal((await signUp(email)).statusCode, 202);
  const code = (await smtp.waitFor(email, 1))[0]?.code ?? '';
  assertErrorBody(t, await verify({ email, otp: wrongCode(code) }), 400, 'INVALID_OTP');
  const verified = await verify({ email, otp: code });
  t.equal(verified.statusCode, 200, 'verified');

  // Sign-ins: one right, then six wrong ones, after which the address backs off (429).
  const signIn = (password: string) =>
    app.inject({ method: 'POST', url: '/api/auth/sessions?client_type=mobile', payload: { email, password } });
  const session = await signIn(PASSWORD);
  t.equal(session.statusCode, 200, 'signed in');
  for (let i = 0; i < 6; i++) assertErrorBody(t, await signIn(`wrong ${i}`), 401, 'INVALID_CREDENTIALS');
  assertErrorBody(t, await signIn(PASSWORD), 429, 'RATE_LIMITED');

  // A refresh, then the spent refresh token again: reuse.
  const refresh = (refreshToken: string) =>
    app.inject({ method: 'POST', url: '/api/auth/refresh?client_type=mobile', payload: { refreshToken } });
  const spent = session.json().refreshToken as string;
  t.equal((await refresh(spent)).statusCode, 200, 'refreshed');
  built.clock.advance(11); // past the reuse interval
  assertErrorBody(t, await refresh(spent), 401, 'REFRESH_TOKEN_REUSED');
  // The session is over: the same token again, refreshing or logging out, is not another reuse.
  assertErrorBody(t, await refresh(spent), 401, 'REFRESH_TOKEN_REUSED');
  const logout = () =>
    app.inject({ method: 'POST', url: '/api/auth/logout?client_type=mobile', payload: { refreshToken: spent } });
  t.equal((await logout()).statusCode, 204, 'logging out with it: 204');
  t.equal((await logout()).statusCode, 204, 'again');

  // The per-IP limit of send-verification (1 per window).
  t.equal((await built.sendVerification(email)).statusCode, 202);
  assertErrorBody(t, await built.sendVerification(email), 429, 'RATE_LIMITED');

  // Embeddings through the provider: one answered, one failing three times (two retries).
  const embed = () =>
    app.inject({
      method: 'POST',
      url: '/api/ai/embeddings',
      headers: { authorization: `Bearer ${accessTokenFor(app)}` },
      payload: { model: 'text-embedding-3-small', input: 'hello' },
    });
  t.equal((await embed()).statusCode, 200, 'embedded');
  fake.enqueue({ status: 503 }, { status: 503 }, { status: 503 });
  assertErrorBody(t, await embed(), 502, 'PROVIDER_UNAVAILABLE');

  // Other routes: unknown, and outside the contract.
  t.equal((await app.inject({ url: '/no/such/route' })).statusCode, 404);
  t.equal((await app.inject({ url: '/openapi.json' })).statusCode, 200);

  const m = await scrape(t, app);
  t.test('request durations per operationId and status code', async (t) => {
    t.equal(m.types.get('http_request_duration_seconds'), 'histogram');
    const count = (operation: string, status_code: string) =>
      m.value('http_request_duration_seconds_count', { operation, status_code });
    t.equal(count('createUser', '202'), 1);
    t.equal(count('verifyEmail', '400'), 1);
    t.equal(count('verifyEmail', '200'), 1);
    t.equal(count('createSession', '200'), 1);
    t.equal(count('createSession', '401'), 6);
    t.equal(count('createSession', '429'), 1);
    t.equal(count('refreshSession', '401'), 2);
    t.equal(count('logout', '204'), 2);
    t.equal(count('createEmbeddings', '502'), 1);
    t.equal(count('getMetrics', '200'), 1, 'the earlier scrape');
    t.equal(count('unmatched', '404'), 1, 'an unknown path has one fixed label');
    t.equal(count('other', '200'), 1, 'routes outside the contract share one label');
    const operations = new Set(m.find('http_request_duration_seconds_count').map((s) => s.labels.operation));
    t.notOk(operations.has('/no/such/route'), 'no path ever becomes a label');
    const sum = m.value('http_request_duration_seconds_sum', { operation: 'createSession', status_code: '401' }) ?? 0;
    t.ok(sum > 0 && sum < 60, `plausible durations (${sum} s for six wrong passwords)`);
    const buckets = m.find('http_request_duration_seconds_bucket', { operation: 'createSession', status_code: '401' });
    t.equal(buckets.find((b) => b.labels.le === '+Inf')?.value, 6, 'the +Inf bucket holds every request');
  });
  t.test('auth events', async (t) => {
    t.equal(m.types.get('auth_sign_ins_total'), 'counter');
    t.equal(m.value('auth_sign_ins_total', { result: 'ok' }), 1);
    t.equal(m.value('auth_sign_ins_total', { result: 'failed' }), 6, 'the throttled attempt is not a failed sign-in');
    t.equal(m.value('auth_email_verifications_total', { result: 'ok' }), 1);
    t.equal(m.value('auth_email_verifications_total', { result: 'failed' }), 1);
    t.equal(m.value('auth_refresh_token_reuse_total'), 1);
  });
  t.test('rate-limited requests, by operation and limit', async (t) => {
    const limited = (operation: string, limit: string) =>
      m.value('http_rate_limited_requests_total', { operation, limit });
    t.equal(limited('sendVerificationEmail', 'ip'), 1, 'the per-IP limit');
    t.equal(limited('createSession', 'address'), 1, 'the per-address back-off of sign-ins');
    t.equal(m.find('http_rate_limited_requests_total').length, 2, 'nothing else');
  });
  t.test('embeddings: upstream latency and the breaker', async (t) => {
    t.equal(m.types.get('embeddings_upstream_request_duration_seconds'), 'histogram');
    const attempts = (outcome: string) => m.value('embeddings_upstream_request_duration_seconds_count', { outcome });
    t.equal(attempts('ok'), 1, 'one answered exchange');
    t.equal(attempts('PROVIDER_UNAVAILABLE'), 3, 'three failed exchanges (a call and its two retries)');
    const seconds = m.value('embeddings_upstream_request_duration_seconds_sum', { outcome: 'ok' }) ?? -1;
    t.ok(seconds > 0 && seconds < 5, `a plausible latency (${seconds} s on loopback)`);
    t.equal(m.types.get('embeddings_breaker_state'), 'gauge');
    t.same(
      Object.fromEntries(m.find('embeddings_breaker_state').map((s) => [s.labels.state, s.value])),
      { closed: 1, open: 0, 'half-open': 0 },
      'closed',
    );
  });
  t.test('database pool', async (t) => {
    const total = m.value('db_pool_connections') ?? -1;
    const idle = m.value('db_pool_idle_connections') ?? -1;
    t.ok(usingPostgres ? total >= 1 && total <= 10 : total === 1, `connections: ${total}`);
    t.ok(idle >= 0 && idle <= total, `idle: ${idle}`);
    t.equal(m.value('db_pool_waiting_requests'), 0, 'nothing waits between requests');
  });
  t.test('Node.js process metrics on the same registry', async (t) => {
    t.ok((m.value('process_cpu_user_seconds_total') ?? 0) > 0);
    t.ok(m.find('nodejs_eventloop_lag_seconds').length === 1);
    t.ok((m.value('nodejs_heap_size_used_bytes') ?? 0) > 0);
  });

  // The breaker opens after enough failing calls, and the gauge follows at the next scrape.
  fake.enqueue(...Array.from({ length: BREAKER_MIN_CALLS * 3 }, () => ({ status: 503 })));
  for (let i = 0; i < BREAKER_MIN_CALLS; i++) await embed();
  const opened = await scrape(t, app);
  t.equal(opened.value('embeddings_breaker_state', { state: 'open' }), 1, 'open once the provider keeps failing');
  t.equal(opened.value('embeddings_breaker_state', { state: 'closed' }), 0);
});

t.test('realtime: sockets, subscriptions, deliveries, slow-consumer disconnects', async (t) => {
  const { app, database } = await buildTestApp(t, {
    env: { METRICS_TOKEN: TOKEN, REALTIME_MAX_BUFFERED_BYTES: '65536', REALTIME_PUBLISH_RATE: '1000000' },
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  await database.handle.db
    .insertInto('realtime.channels')
    .values({ pattern: 'room:%', description: 'rooms' })
    .execute();
  const clients = new RealtimeClients(t, urlOf(app));
  const channel = 'room:metrics';
  const [publisher, reader, slow] = await Promise.all([1, 2, 3].map(() => clients.connect(accessTokenFor(app))));
  if (!publisher || !reader || !slow) throw new Error('three sockets');
  for (const socket of [publisher, reader, slow]) await subscribed(socket, channel);
  await clients.connect(accessTokenFor(app)); // connected, subscribed to nothing

  const received = nextEvent(reader, 'note');
  const ack: Ack = await publish(publisher, { channel, event: 'note', payload: { text: 'hello' } });
  t.ok(ack.ok, 'published');
  await received; // handed to every subscriber of this instance at once
  const m = await scrape(t, app);
  t.equal(m.value('realtime_connected_sockets'), 4);
  t.equal(m.value('realtime_subscriptions'), 3, 'three sockets subscribed to one channel');
  t.equal(m.value('realtime_deliveries_total'), 3, 'one message, handed to each of its three subscribers');
  t.equal(m.value('realtime_slow_consumer_disconnects_total'), 0);

  // A subscriber that stops reading is disconnected once its output passes the limit.
  const slowLeft = nextEvent(publisher, 'presence:leave', 30_000);
  let gone = false;
  slowLeft.then(
    () => {
      gone = true;
    },
    () => {},
  );
  let readerGot = 0;
  reader.on('blob', () => readerGot++);
  tcpSocketOf(slow).pause();
  const blob = 'x'.repeat(3_500);
  let sent = 0;
  const worker = async () => {
    while (!gone && sent < 4_000) {
      sent++;
      const answer = await publish(publisher, { channel, event: 'blob', payload: { blob } }, 10_000);
      if (!answer.ok) throw new Error(`publish refused: ${JSON.stringify(answer)}`);
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
  await slowLeft;
  await waitUntil(() => readerGot >= sent, 10_000, 'the reader receives every message');
  const after = await scrape(t, app);
  t.equal(after.value('realtime_slow_consumer_disconnects_total'), 1, `after ${sent} messages`);
  t.equal(after.value('realtime_connected_sockets'), 3);
  t.equal(after.value('realtime_subscriptions'), 2);
  const deliveries = after.value('realtime_deliveries_total') ?? 0;
  t.ok(deliveries >= 3 + 2 * sent && deliveries <= 3 + 3 * sent, `deliveries: ${deliveries} for ${sent} messages`);
  t.same(clients.violations(), [], 'everything sent and received matched asyncapi.yaml');
});

t.test('database pool gauges follow the pool while a connection is held', async (t) => {
  const { app, database } = await buildTestApp(t, { env: { METRICS_TOKEN: TOKEN } });
  const db = database.handle.db;
  /**
   * A scrape taken while the pool stood still, with the pool's own counts: other work (on PGlite the
   * realtime policies' poll, every second) may borrow or queue for a connection at any time, so a
   * scrape is compared with the counts read just before and after it, and retried when they differ.
   */
  const steadyScrape = async () => {
    for (let attempt = 1; ; attempt++) {
      const before = database.handle.poolStats();
      const m = await scrape(t, app);
      const after = database.handle.poolStats();
      if (JSON.stringify(before) === JSON.stringify(after) || attempt === 20) return { m, pool: after };
    }
  };
  const gauges = (m: Exposition) => ({
    total: m.value('db_pool_connections'),
    idle: m.value('db_pool_idle_connections'),
    waiting: m.value('db_pool_waiting_requests'),
  });
  let queued: Promise<unknown> | undefined;
  await db.connection().execute(async (held) => {
    await sql`select 1`.execute(held);
    queued = sql`select 1`.execute(db); // waits for the held connection on PGlite
    await new Promise((resolve) => setTimeout(resolve, 50));
    const { m, pool } = await steadyScrape();
    t.same(gauges(m), pool, `the gauges are the pool's counts (${JSON.stringify(pool)})`);
    if (usingPostgres) {
      t.ok(pool.total >= 2, `pg: a second connection was opened (${pool.total})`);
      t.ok(pool.idle < pool.total, `pg: not all idle (${pool.idle} of ${pool.total})`);
      t.equal(pool.waiting, 0, 'pg: nothing waits with free slots');
    } else {
      t.same([pool.total, pool.idle], [1, 0], 'PGlite: its one session lent');
      t.ok(pool.waiting >= 1, `PGlite: the queued query waits (${pool.waiting} waiting)`);
    }
  });
  await queued;
  let after = await steadyScrape();
  for (let i = 0; i < 50 && (after.pool.waiting > 0 || after.pool.idle !== after.pool.total); i++) {
    await new Promise((resolve) => setTimeout(resolve, 20)); // a poll that took the session meanwhile
    after = await steadyScrape();
  }
  t.same(gauges(after.m), after.pool, "afterwards too, the gauges are the pool's counts");
  t.equal(after.pool.waiting, 0, 'nothing waits afterwards');
  t.equal(after.pool.idle, after.pool.total, 'every connection idle again');
});

t.test('METRICS_PORT: served on its own port without a token; the service port answers 404', async (t) => {
  const port = await freePort();
  const { app, config } = await buildTestApp(t, { env: { METRICS_PORT: String(port) } });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const listener = await listenForMetrics(app, config);
  t.equal(listener?.port, port, 'listening on METRICS_PORT');
  t.equal((await app.inject({ url: '/api/health' })).statusCode, 200);

  const res = await fetch(`http://127.0.0.1:${port}/metrics`);
  t.equal(res.status, 200, 'no token needed');
  t.match(res.headers.get('content-type'), EXPOSITION);
  const m = new Exposition(await res.text());
  t.equal(m.value('http_request_duration_seconds_count', { operation: 'getHealth', status_code: '200' }), 1);
  t.ok(m.find('db_pool_connections').length === 1);

  const elsewhere = await fetch(`http://127.0.0.1:${port}/api/health`);
  t.equal(elsewhere.status, 404, 'only /metrics there');
  t.match(await elsewhere.json(), { error: 'NOT_FOUND', statusCode: 404 });
  t.equal((await fetch(`http://127.0.0.1:${port}/metrics`, { method: 'POST' })).status, 404);

  assertErrorBody(t, await app.inject({ url: '/metrics' }), 404, 'NOT_FOUND');
  assertErrorBody(t, await app.inject({ url: '/metrics', headers: BEARER }), 404, 'NOT_FOUND');

  await app.close();
  await t.rejects(fetch(`http://127.0.0.1:${port}/metrics`), 'the port closes with the app');
});

t.test('METRICS_PORT and METRICS_TOKEN: both ways', async (t) => {
  const port = await freePort();
  const { app, config } = await buildTestApp(t, { env: { METRICS_PORT: String(port), METRICS_TOKEN: TOKEN } });
  const listener = await listenForMetrics(app, config);
  t.teardown(() => listener?.close());
  t.equal((await fetch(`http://127.0.0.1:${port}/metrics`)).status, 200, 'the port without a token');
  assertErrorBody(t, await app.inject({ url: '/metrics' }), 401, 'UNAUTHORIZED');
  t.equal((await app.inject({ url: '/metrics', headers: BEARER })).statusCode, 200, 'the service port with it');
});

t.test('METRICS_PORT taken: the listener refuses to start with a clear error', async (t) => {
  const blocker = net.createServer();
  blocker.listen(0, '127.0.0.1');
  await once(blocker, 'listening');
  t.teardown(() => blocker.close());
  const port = (blocker.address() as net.AddressInfo).port;
  const { app, config } = await buildTestApp(t, { env: { METRICS_PORT: String(port) } });
  await t.rejects(listenForMetrics(app, config), {
    name: 'ConfigError',
    message: `METRICS_PORT ${port} on 127.0.0.1 cannot be opened (address already in use): set METRICS_PORT to a free port`,
  });
});

t.test("the contract check holds getMetrics to its media type and the format's version", async (t) => {
  const sent = (contentType: string) =>
    contractProblem({ method: 'GET', routePath: '/metrics', status: 200, contentType, body: '# nothing yet\n' });
  t.equal(sent('text/plain; version=0.0.4; charset=utf-8'), undefined, 'as prom-client sends it');
  t.equal(sent('text/plain;version=0.0.4'), undefined, 'spacing aside');
  t.match(sent('text/plain; charset=utf-8'), /^getMetrics 200: content type "text\/plain" not declared/);
  t.match(sent('text/plain; version=1.0.0'), /not declared/);
  t.match(sent('application/json'), /not declared/);
});
