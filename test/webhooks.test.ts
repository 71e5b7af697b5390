// Webhooks from the durable outbox: Standard Webhooks signed with WEBHOOK_SECRET, delivered at least
// once to a real HTTP receiver on loopback that verifies every request with the standardwebhooks
// library; retries through failures, timeouts and outages of the receiver; dead letters after the
// retry horizon, listed for administrators; an attempt cut short by a crash made again when its
// lease runs out; a clean stop; no secret in a payload, a log line or the table.
import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import t, { type Test } from 'tap';
import { buildApp } from '../src/app.ts';
import { WEBHOOK_EVENT_TYPES } from '../src/audit/event-types.ts';
import { loadConfig } from '../src/config.ts';
import {
  claimDueWebhooks,
  deleteSettledWebhooksBefore,
  enqueueWebhookEvents,
} from '../src/db/repositories/webhook-outbox.ts';
import { specDocument } from '../src/spec.ts';
import type { WebhookTuning } from '../src/webhooks/delivery.ts';
import { accountCalls, bearer, type MobileSession } from './helpers/accounts.ts';
import { captureLogs } from './helpers/app.ts';
import { newEmail, PASSWORD } from './helpers/auth.ts';
import { checkResponsesAgainstContract } from './helpers/contract-check.ts';
import { createTestDatabase, type TestDatabase } from './helpers/database.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import {
  type Answer,
  newWebhookSecret,
  type Receipt,
  startWebhookReceiver,
  type WebhookReceiver,
} from './helpers/webhook-receiver.ts';

const ADMIN_PASSWORD = 'the administrator passphrase';
const ADMIN_EMAIL = newEmail('admin');
const JWT_SECRET = 'webhooks-test-secret-5d1f0c3b9a7e4f268b';
const METRICS_TOKEN = randomBytes(32).toString('hex');
/** Retries come quickly in these tests (the service's first retry waits about a second, then doubling). */
const QUICK_RETRIES: Partial<WebhookTuning> = { retryDelayMs: () => 100, pollIntervalMs: 50 };

// One database for the file (a fresh one costs seconds): each test starts from an empty outbox,
// with an app of its own.
const database = await createTestDatabase();
t.teardown(() => database.drop());
const emptyOutbox = () => database.handle.db.deleteFrom('webhook_outbox').execute();

interface Setup {
  app: FastifyInstance;
  db: TestDatabase['handle']['db'];
  receiver: WebhookReceiver;
  secret: string;
  admin: MobileSession;
  calls: ReturnType<typeof accountCalls>;
  lines: string[];
  /** The outbox rows, oldest first. */
  outbox(): Promise<OutboxRow[]>;
  metric(name: string, labels?: Record<string, string>): Promise<number | undefined>;
}

interface OutboxRow {
  id: string;
  event_type: string;
  status: string;
  attempts: number;
  last_status: number | null;
  last_error: string | null;
  next_attempt_at: Date;
  created_at: Date;
  delivered_at: Date | null;
  payload: { type: string; data: Record<string, unknown> };
}

async function setup(
  t: Test,
  options: {
    answer?: (receipt: Receipt, n: number) => Answer;
    down?: boolean;
    env?: Record<string, string>;
    tuning?: Partial<WebhookTuning>;
    url?: (receiverUrl: string) => string;
  } = {},
): Promise<Setup> {
  const secret = newWebhookSecret();
  const receiver = await startWebhookReceiver(secret, {
    ...(options.answer ? { answer: options.answer } : {}),
    ...(options.down ? { down: true } : {}),
  });
  t.teardown(() => receiver.close());
  await emptyOutbox();
  const config = loadConfig({
    NODE_ENV: 'test',
    DATABASE_URL: database.url,
    JWT_SECRET,
    REQUIRE_EMAIL_VERIFICATION: 'false',
    ADMIN_EMAIL,
    ADMIN_PASSWORD,
    RATE_LIMIT_SIGN_UP: '1000',
    RATE_LIMIT_SIGN_IN: '1000',
    METRICS_TOKEN,
    WEBHOOK_URL: options.url ? options.url(receiver.url) : receiver.url,
    WEBHOOK_SECRET: secret,
    ...options.env,
  });
  const { logger, lines } = captureLogs('trace');
  const app = await buildApp(config, {
    database: database.handle,
    logger,
    webhookTuning: { ...QUICK_RETRIES, ...options.tuning },
  });
  checkResponsesAgainstContract(app);
  await app.ready();
  t.teardown(() => app.close());
  const calls = accountCalls(app);
  const admin = await calls.signIn(ADMIN_EMAIL, ADMIN_PASSWORD);
  const db = database.handle.db;
  return {
    app,
    db,
    receiver,
    secret,
    admin,
    calls,
    lines,
    outbox: async () =>
      (await db
        .selectFrom('webhook_outbox')
        .selectAll()
        .orderBy('created_at')
        .orderBy('id')
        .execute()) as unknown as OutboxRow[],
    async metric(name, labels = {}) {
      const res = await app.inject({ url: '/metrics', headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
      for (const line of res.body.split('\n')) {
        const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
        if (!m || m[1] !== name) continue;
        const have = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
        if (Object.entries(labels).every(([k, v]) => have[k] === v)) return Number(m[3]);
      }
      return undefined;
    },
  };
}

async function waitUntil(condition: () => Promise<boolean> | boolean, what: string, timeoutMs = 15_000) {
  const start = Date.now();
  while (!(await condition())) {
    if (Date.now() - start > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** The receipts (verified or not) whose payload names the account `userId`. */
const aboutUser = (receipts: Receipt[], userId: string) =>
  receipts.filter((r) => (JSON.parse(r.body) as { data: { userId?: string } }).data.userId === userId);

t.test("the contract's WebhookEventType lists every webhook event type", async (t) => {
  const schemas = (specDocument.components as { schemas: Record<string, { enum?: string[] }> }).schemas;
  t.same(schemas.WebhookEventType?.enum, [...WEBHOOK_EVENT_TYPES]);
});

t.test('a sign-up is delivered as user.created and session.created: signed, verified, without a secret', async (t) => {
  // No polling after the first pass: the delivery wakes on the queuing itself (the commit's
  // notification on PostgreSQL, the process's own queuing on PGlite).
  const s = await setup(t, { tuning: { pollIntervalMs: 600_000 } });
  const email = newEmail('Webhook.Person');
  const session = await s.calls.signUp(email);
  await s.receiver.waitFor(
    (all) => aboutUser(all, session.userId).length >= 2,
    'user.created and session.created for the new account',
  );
  const receipts = aboutUser(s.receiver.receipts, session.userId);
  t.ok(
    s.receiver.receipts.every((r) => r.verified),
    'every request verifies with standardwebhooks Webhook.verify and the shared secret',
  );
  const created = receipts.find((r) => r.payload?.type === 'user.created') as Receipt;
  t.ok(created, 'user.created arrived');
  t.match(created.payload, {
    type: 'user.created',
    data: { userId: session.userId, email: email.toLowerCase(), actorId: session.userId, auditEvent: 'sign_up' },
  });
  t.match(created.headers['content-type'], /^application\/json/);
  t.match(created.id, /^[0-9a-f-]{36}$/, 'webhook-id is the outbox row id (a UUID)');
  t.match(created.signature, /^v1,[A-Za-z0-9+/]+=*$/, 'a v1 signature');
  t.ok(Math.abs(Number(created.timestamp) - Date.now() / 1000) < 30, 'webhook-timestamp is the time of the attempt');
  const opened = receipts.find((r) => r.payload?.type === 'session.created') as Receipt;
  t.match(opened?.payload, { type: 'session.created', data: { userId: session.userId, sessionId: session.sessionId } });
  t.notOk('email' in (opened?.payload?.data ?? {}), 'only user.* events carry the address');

  // A receiver with another secret refuses the same request.
  const { Webhook } = await import('standardwebhooks');
  t.throws(
    () =>
      new Webhook(newWebhookSecret()).verify(created.body, {
        'webhook-id': created.id,
        'webhook-timestamp': created.timestamp,
        'webhook-signature': created.signature,
      }),
    'a signature made with another secret does not verify',
  );

  const secrets = [
    s.secret,
    s.secret.slice('whsec_'.length),
    JWT_SECRET,
    PASSWORD,
    ADMIN_PASSWORD,
    session.accessToken,
    session.refreshToken,
    METRICS_TOKEN,
  ];
  for (const r of s.receiver.receipts) {
    for (const secret of secrets) t.notOk(r.body.includes(secret), `${r.payload?.type}: no secret in the body`);
    t.notOk(JSON.stringify(r.headers).includes(s.secret.slice('whsec_'.length)), 'nor in the headers');
  }

  await waitUntil(async () => (await s.outbox()).every((r) => r.status === 'delivered'), 'every event delivered');
  const rows = await s.outbox();
  const row = rows.find((r) => r.id === created.id);
  t.match(row, { status: 'delivered', attempts: 1, last_status: 200, last_error: null }, 'the row is delivered');
  t.equal(created.body, JSON.stringify(row?.payload), 'the body is the stored payload');
  t.equal(s.receiver.of(created.id).length, 1, 'delivered once');
  t.equal(await s.metric('webhook_delivery_attempts_total', { result: 'delivered' }), rows.length);
  t.equal(await s.metric('webhook_delivery_latency_seconds_count'), rows.length, 'one latency per delivery');
  t.equal(await s.metric('webhook_pending_events'), 0, 'nothing pending');
});

t.test('a receiver answering 500 then 200 gets the event twice, with the same webhook-id', async (t) => {
  const s = await setup(t, { answer: (_r, n) => ({ status: n === 1 ? 500 : 200 }) });
  const session = await s.calls.signUp(newEmail('retry'));
  await s.receiver.waitFor(
    (all) => aboutUser(all, session.userId).filter((r) => r.payload?.type === 'user.created').length >= 2,
    'the retry',
  );
  const [first, second] = aboutUser(s.receiver.receipts, session.userId).filter(
    (r) => r.payload?.type === 'user.created',
  ) as [Receipt, Receipt];
  t.equal(second.id, first.id, 'the same webhook-id');
  t.equal(second.body, first.body, 'the same body');
  t.ok(first.verified && second.verified, 'both signed');
  await waitUntil(async () => (await s.outbox()).find((r) => r.id === first.id)?.status === 'delivered', 'delivered');
  t.match(
    (await s.outbox()).find((r) => r.id === first.id),
    { status: 'delivered', attempts: 2, last_status: 200 },
  );
  t.equal(s.receiver.of(first.id).length, 2, 'exactly twice: no attempt after the 2xx');
  t.ok(((await s.metric('webhook_delivery_attempts_total', { result: 'failed_attempt' })) ?? 0) >= 1, 'counted');
});

t.test('an answer after the timeout is a failed attempt: the event comes again', async (t) => {
  const s = await setup(t, {
    env: { WEBHOOK_TIMEOUT_MS: '300' },
    // The first 200 would come after 30 s: only the timeout brings the second attempt within the wait.
    answer: (_r, n) => (n === 1 ? { status: 200, delayMs: 30_000 } : { status: 204 }),
  });
  const session = await s.calls.signUp(newEmail('slow'));
  await s.receiver.waitFor(
    (all) => aboutUser(all, session.userId).filter((r) => r.payload?.type === 'user.created').length >= 2,
    'the retry after the timeout',
  );
  const [first, second] = aboutUser(s.receiver.receipts, session.userId).filter(
    (r) => r.payload?.type === 'user.created',
  ) as [Receipt, Receipt];
  t.equal(second.id, first.id, 'the same webhook-id');
  await waitUntil(async () => (await s.outbox()).find((r) => r.id === first.id)?.status === 'delivered', 'delivered');
  t.match(
    (await s.outbox()).find((r) => r.id === first.id),
    { attempts: 2, last_status: 204, last_error: null },
  );
});

t.test('a receiver that is down for a while gets every event once it is up', async (t) => {
  const s = await setup(t, { down: true });
  const sessions: MobileSession[] = [];
  for (let i = 0; i < 5; i++) sessions.push(await s.calls.signUp(newEmail(`outage${i}`)));
  const expected = (await s.outbox()).filter((r) => sessions.some((x) => x.userId === r.payload.data.userId));
  t.equal(expected.length, 10, 'user.created and session.created for each of 5 sign-ups');
  const ids = new Set(expected.map((e) => e.id));
  await waitUntil(
    async () =>
      (await s.outbox()).filter((r) => ids.has(r.id) && r.attempts >= 3 && r.status === 'pending').length === 10,
    'three failed attempts each',
  );
  const failing = (await s.outbox()).find((r) => r.id === expected[0]?.id);
  t.match(failing, { status: 'pending', last_status: null, last_error: 'connection refused' });
  t.equal(s.receiver.receipts.length, 0, 'nothing arrived while it was down');

  await s.receiver.start();
  await s.receiver.waitFor((all) => expected.every((e) => all.some((r) => r.id === e.id)), 'every event');
  for (const e of expected) {
    const receipts = s.receiver.of(e.id);
    t.equal(receipts.length, 1, `${e.event_type} arrives once`);
    t.ok(receipts[0]?.verified, 'signed');
  }
  await waitUntil(async () => (await s.outbox()).every((r) => r.status === 'delivered'), 'all delivered');
  t.ok(
    (await s.outbox()).filter((r) => expected.some((e) => e.id === r.id)).every((r) => r.attempts >= 4),
    'each was retried under its one id (the webhook-id) until it went through',
  );
});

t.test('retries end at the horizon: the event is dead-lettered and listed for administrators', async (t) => {
  const s = await setup(t, {
    answer: () => ({ status: 503 }),
    tuning: { retryHorizonMs: 1_000, retryDelayMs: () => 150 },
  });
  const user = await s.calls.signUp(newEmail('dead'));
  const ofUser = async () => (await s.outbox()).filter((r) => r.payload.data.userId === user.userId);
  await waitUntil(
    async () => (await ofUser()).filter((r) => r.status === 'failed').length === 2,
    'both events of the sign-up dead-lettered',
  );
  await waitUntil(async () => (await s.outbox()).every((r) => r.status === 'failed'), 'every event dead-lettered');
  const dead = await ofUser();
  const allDead = await s.outbox();
  for (const row of dead) {
    t.match(row, { status: 'failed', last_status: 503, last_error: 'answered HTTP 503', delivered_at: null });
    t.ok(row.attempts >= 3, `${row.event_type}: retried before it was dead-lettered (${row.attempts} attempts)`);
    const receipts = s.receiver.of(row.id);
    t.equal(receipts.length, row.attempts, 'one request per attempt, all with its webhook-id');
    // Each retry is scheduled at least 150 ms after the last attempt ended, and only while it falls
    // within 1 s of the event's creation: 1 + floor(1000 / 150) = 7 attempts at most.
    t.ok(row.attempts <= 7, `no retry scheduled past the horizon (${row.attempts} attempts)`);
  }
  const attemptsBefore = s.receiver.receipts.length;

  const listed = await s.app.inject({
    url: '/api/auth/webhook-deliveries?status=failed',
    headers: bearer(s.admin.accessToken),
  });
  t.equal(listed.statusCode, 200);
  const body = listed.json() as { deliveries: Array<Record<string, unknown>>; nextCursor: string | null };
  const mine = body.deliveries.filter((d) => dead.some((r) => r.id === d.id));
  t.equal(mine.length, 2, 'both dead letters are listed');
  const createdRow = dead.find((r) => r.event_type === 'user.created') as OutboxRow;
  t.match(
    body.deliveries.find((d) => d.id === createdRow.id),
    {
      eventType: 'user.created',
      status: 'failed',
      attempts: createdRow.attempts,
      createdAt: createdRow.created_at.toISOString(),
      nextAttemptAt: null,
      lastStatus: 503,
      lastError: 'answered HTTP 503',
      deliveredAt: null,
      payload: { type: 'user.created', data: { userId: user.userId, auditEvent: 'sign_up' } },
    },
  );
  t.ok(
    body.deliveries.every((d) => d.status === 'failed'),
    'status=failed lists only dead letters',
  );
  const newestFirst = body.deliveries.map((d) => String(d.createdAt));
  t.same(newestFirst, [...newestFirst].sort().reverse(), 'newest first');

  // Pages of one: the cursor walks the same list without a repeat or a gap.
  const walked: string[] = [];
  let cursor: string | null = null;
  do {
    const res = await s.app.inject({
      url: `/api/auth/webhook-deliveries?status=failed&limit=1${cursor ? `&cursor=${cursor}` : ''}`,
      headers: bearer(s.admin.accessToken),
    });
    t.equal(res.statusCode, 200);
    const page = res.json() as { deliveries: Array<{ id: string }>; nextCursor: string | null };
    t.ok(page.deliveries.length <= 1);
    walked.push(...page.deliveries.map((d) => d.id));
    cursor = page.nextCursor;
  } while (cursor !== null);
  t.same(
    walked,
    body.deliveries.map((d) => d.id),
    'paging by one gives the same list',
  );

  const delivered = await s.app.inject({
    url: '/api/auth/webhook-deliveries?status=delivered',
    headers: bearer(s.admin.accessToken),
  });
  t.equal(delivered.statusCode, 200);
  t.same((delivered.json() as { deliveries: unknown[] }).deliveries, [], 'nothing was delivered');

  const forbidden = await s.app.inject({
    url: '/api/auth/webhook-deliveries?status=failed',
    headers: bearer(user.accessToken),
  });
  assertErrorBody(t, forbidden, 403, 'FORBIDDEN');
  assertErrorBody(t, await s.app.inject({ url: '/api/auth/webhook-deliveries' }), 401, 'UNAUTHORIZED');
  for (const query of ['status=dead', 'limit=101', 'limit=0', 'cursor=short']) {
    assertErrorBody(
      t,
      await s.app.inject({ url: `/api/auth/webhook-deliveries?${query}`, headers: bearer(s.admin.accessToken) }),
      400,
      'INVALID_INPUT',
    );
  }
  // A cursor of the right shape that this service did not give out (its time before 1970) is a
  // place in the list like any other, never an error the contract does not state.
  const foreign = await s.app.inject({
    url: `/api/auth/webhook-deliveries?cursor=${'_'.repeat(32)}`,
    headers: bearer(s.admin.accessToken),
  });
  t.equal(foreign.statusCode, 200, foreign.body);
  t.same((foreign.json() as { deliveries: unknown[] }).deliveries, [], 'nothing is older than 1970');

  t.equal(
    await s.metric('webhook_delivery_attempts_total', { result: 'dead' }),
    allDead.length,
    'each dead letter counted',
  );
  t.ok(
    ((await s.metric('webhook_delivery_attempts_total', { result: 'failed_attempt' })) ?? 0) >= 4,
    'the failed attempts before them too',
  );
  await new Promise((resolve) => setTimeout(resolve, 400));
  t.equal(s.receiver.receipts.length, attemptsBefore, 'a dead letter is not attempted again');
});

t.test('an attempt cut short by a crash is made again once its lease runs out', async (t) => {
  const s = await setup(t);
  // The administrator's sign-in in setup() queued a session.created event: delivered first, or the
  // claim below (limit 10) takes it too when this app has not picked it up yet.
  await waitUntil(async () => (await s.outbox()).every((r) => r.status === 'delivered'), 'the sign-in event delivered');
  // Another instance claims the event and dies before it writes a result: its lease stays.
  const leaseMs = 800;
  const claimed = await s.db.transaction().execute(async (trx) => {
    const createdAt = new Date();
    await enqueueWebhookEvents(trx, [
      {
        eventType: 'user.updated',
        createdAt,
        payload: { type: 'user.updated', timestamp: createdAt.toISOString(), data: { userId: null } },
      },
    ]);
    return claimDueWebhooks(trx, { now: createdAt, leaseUntil: new Date(Date.now() + leaseMs), limit: 10 });
  });
  const [event] = claimed;
  t.equal(claimed.length, 1);
  const claimedAt = performance.now();
  await s.receiver.waitFor((all) => all.some((r) => r.id === event?.id), 'the event, after the lease', 5_000);
  const receipt = s.receiver.of(event?.id ?? '')[0] as Receipt;
  t.ok(receipt.at - claimedAt >= leaseMs - 100, 'not before the lease ran out');
  await waitUntil(
    async () => (await s.outbox()).some((r) => r.id === event?.id && r.status === 'delivered'),
    'delivered',
  );
  t.match(
    (await s.outbox()).find((r) => r.id === event?.id),
    { attempts: 2, status: 'delivered' },
  );
});

t.test('closing the app waits for an attempt under way and writes its result', async (t) => {
  const secret = newWebhookSecret();
  const receiver = await startWebhookReceiver(secret, { answer: () => ({ status: 200, delayMs: 400 }) });
  t.teardown(() => receiver.close());
  await emptyOutbox();
  const config = loadConfig({
    NODE_ENV: 'test',
    LOG_LEVEL: 'silent',
    DATABASE_URL: database.url,
    JWT_SECRET,
    WEBHOOK_URL: receiver.url,
    WEBHOOK_SECRET: secret,
  });
  const app = await buildApp(config, { database: database.handle, logger: false, webhookTuning: QUICK_RETRIES });
  await app.ready();
  const createdAt = new Date();
  await enqueueWebhookEvents(database.handle.db, [
    {
      eventType: 'user.deleted',
      createdAt,
      payload: { type: 'user.deleted', timestamp: createdAt.toISOString(), data: {} },
    },
  ]);
  await receiver.waitFor((all) => all.length === 1, 'the request');
  await app.close();
  const rows = await database.handle.db.selectFrom('webhook_outbox').selectAll().execute();
  t.match(
    rows,
    [{ status: 'delivered', attempts: 1, last_status: 200 }],
    'the answer that came during the close is kept',
  );
});

t.test('closing the app interrupts an attempt that outlasts the grace, and makes its event due again', async (t) => {
  const secret = newWebhookSecret();
  const receiver = await startWebhookReceiver(secret, { answer: () => ({ status: 200, delayMs: 30_000 }) });
  t.teardown(() => receiver.close());
  await emptyOutbox();
  const config = loadConfig({
    NODE_ENV: 'test',
    LOG_LEVEL: 'silent',
    DATABASE_URL: database.url,
    JWT_SECRET,
    WEBHOOK_URL: receiver.url,
    WEBHOOK_SECRET: secret,
    WEBHOOK_TIMEOUT_MS: '20000',
  });
  const app = await buildApp(config, {
    database: database.handle,
    logger: false,
    webhookTuning: { ...QUICK_RETRIES, shutdownGraceMs: 200 },
  });
  await app.ready();
  const createdAt = new Date();
  await enqueueWebhookEvents(database.handle.db, [
    {
      eventType: 'user.deleted',
      createdAt,
      payload: { type: 'user.deleted', timestamp: createdAt.toISOString(), data: {} },
    },
  ]);
  await receiver.waitFor((all) => all.length === 1, 'the request');
  const closing = performance.now();
  await app.close();
  const tookMs = performance.now() - closing;
  t.ok(tookMs < 10_000, `the close did not wait for the 20 s timeout (${Math.round(tookMs)} ms)`);
  const [row] = await database.handle.db.selectFrom('webhook_outbox').selectAll().execute();
  t.match(row, { status: 'pending', attempts: 1, last_status: null, last_error: 'interrupted: the service stopped' });
  t.ok((row?.next_attempt_at.getTime() ?? Infinity) <= Date.now(), 'due again at once, not at the end of its lease');
});

t.test('credentials in WEBHOOK_URL are sent as Basic authorization, never logged or stored', async (t) => {
  const s = await setup(t, {
    url: (u) => u.replace('http://', 'http://hook-user:hook%20pass@').concat('?token=query-secret-123'),
    answer: (_r, n) => ({ status: n === 1 ? 502 : 200 }),
  });
  const session = await s.calls.signUp(newEmail('credentials'));
  await s.receiver.waitFor(
    (all) => aboutUser(all, session.userId).filter((r) => r.payload?.type === 'user.created').length >= 2,
    'the retry',
  );
  const receipt = aboutUser(s.receiver.receipts, session.userId)[0] as Receipt;
  t.equal(
    receipt.headers.authorization,
    `Basic ${Buffer.from('hook-user:hook pass').toString('base64')}`,
    'user and password as Basic authorization',
  );
  const rows = JSON.stringify(await s.outbox());
  const logs = s.lines.join('\n');
  t.ok(
    logs.includes('webhooks: attempt failed; will retry'),
    'the failed attempt was logged (so the check below means something)',
  );
  for (const secret of ['hook-user', 'hook%20pass', 'hook pass', 'query-secret-123', s.secret.slice(6)]) {
    t.notOk(rows.includes(secret), `${secret}: not in the outbox`);
    t.notOk(logs.includes(secret), `${secret}: not in the log`);
  }
});

t.test('settled events past the retention are deleted, pending ones never', async (t) => {
  await emptyOutbox();
  const db = database.handle.db;
  const old = new Date(Date.now() - 40 * 86_400_000);
  const event = (eventType: string, createdAt: Date) => ({
    eventType,
    createdAt,
    payload: { type: eventType, timestamp: createdAt.toISOString(), data: {} },
  });
  await enqueueWebhookEvents(db, [event('user.created', old), event('user.updated', old), event('user.deleted', old)]);
  await enqueueWebhookEvents(db, [event('user.verified', new Date())]);
  await db
    .updateTable('webhook_outbox')
    .set({ status: 'delivered' })
    .where('event_type', '=', 'user.created')
    .execute();
  await db.updateTable('webhook_outbox').set({ status: 'failed' }).where('event_type', '=', 'user.updated').execute();
  await db
    .updateTable('webhook_outbox')
    .set({ status: 'delivered' })
    .where('event_type', '=', 'user.verified')
    .execute();
  t.equal(await deleteSettledWebhooksBefore(db, new Date(Date.now() - 30 * 86_400_000), 1_000), 2);
  const left = await db.selectFrom('webhook_outbox').select(['event_type', 'status']).orderBy('event_type').execute();
  t.same(left, [
    { event_type: 'user.deleted', status: 'pending' },
    { event_type: 'user.verified', status: 'delivered' },
  ]);
});
