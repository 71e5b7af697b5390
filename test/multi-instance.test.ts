// Two real service processes on different ports, on one PostgreSQL database and one Redis (one
// REDIS_KEY_PREFIX), must behave as one service: sessions, refresh-token rotation and reuse
// detection, logout, the email cooldown, code-failure counts, rate limits and the realtime policy
// cache are all shared state. Every request goes over real HTTP to one instance or the other.
import { randomBytes } from 'node:crypto';
import { type RawBuilder, sql } from 'kysely';
import t, { type Test } from 'tap';
import { decodeClaims, newEmail, newRedisKeyPrefix, PASSWORD, QUIET_MS, wrongCode } from './helpers/auth.ts';
import { contractProblem } from './helpers/contract-check.ts';
import { createTestDatabase, type TestDatabase, usingPostgres } from './helpers/database.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { type ServiceInstance, startInstances, stopService } from './helpers/instances.ts';
import { deleteRedisKeys, redisAvailable } from './helpers/redis.ts';
import { type SmtpCapture, startSmtpCapture } from './helpers/smtp.ts';

/** The Redis the instances share (TEST_REDIS_URL overrides the machine's default). */
const REUSE_INTERVAL_SECONDS = 3;
const REDIS_URL = process.env.TEST_REDIS_URL || 'redis://127.0.0.1:6379';
const WINDOW_SECONDS = 300;
const SIGN_IN_LIMIT = 6;
const EMBEDDINGS_LIMIT = 4;
/**
 * A policy change must reach both instances before the cache's 1 s time-to-live could have shown
 * it (the caches are warmed just before the change), so by notification; 750 ms leaves room for a
 * loaded machine (about 200 ms was the worst seen at a load average of 10 on 2 cores).
 */
const POLICY_BOUND_MS = 750;
const LOCAL_MODEL = 'local/lexical-v1';

type ClientType = 'web' | 'mobile';

interface Policy {
  policyName: string;
  roles: string[];
  using: string | null;
}
interface Permissions {
  subscribe: { policies: Policy[] };
  publish: { policies: Policy[] };
}

interface HttpReply {
  statusCode: number;
  headers: Record<string, string>;
  body: string;
  setCookies: string[];
  // biome-ignore lint/suspicious/noExplicitAny: test code reads what it asserts on
  json(): any;
}

let clientCounter = 0;

/**
 * A client of the service at one address (its own X-Forwarded-For, read because the instances run
 * with TRUST_PROXY=true as they would behind a load balancer), so that each scenario has its own
 * rate-limit allowance. Every answer is checked against openapi.yaml.
 */
function client(t: Test) {
  clientCounter++;
  const ip = `198.18.${Math.floor(clientCounter / 250)}.${(clientCounter % 250) + 1}`;
  async function request(
    instance: ServiceInstance,
    method: 'GET' | 'POST',
    path: string,
    options: { body?: unknown; headers?: Record<string, string> } = {},
  ): Promise<HttpReply> {
    const headers: Record<string, string> = { 'x-forwarded-for': ip, ...options.headers };
    if (options.body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(`${instance.url}${path}`, {
      method,
      headers,
      ...(options.body !== undefined ? { body: JSON.stringify(options.body) } : {}),
    });
    const body = await res.text();
    const reply: HttpReply = {
      statusCode: res.status,
      headers: Object.fromEntries(res.headers),
      body,
      setCookies: res.headers.getSetCookie(),
      json: () => JSON.parse(body),
    };
    const problem = contractProblem({
      method,
      routePath: path.split('?')[0],
      status: reply.statusCode,
      contentType: reply.headers['content-type'] ?? '',
      body: body === '' ? undefined : body,
    });
    if (problem !== undefined) t.fail(`${method} ${path} on ${instance.name}: contract violation: ${problem}`);
    return reply;
  }
  const bearer = (accessToken: string) => ({ authorization: `Bearer ${accessToken}` });
  return {
    ip,
    request,
    signUp: (on: ServiceInstance, email: string) =>
      request(on, 'POST', '/api/auth/users', { body: { email, password: PASSWORD } }),
    sendVerification: (on: ServiceInstance, email: string) =>
      request(on, 'POST', '/api/auth/email/send-verification', { body: { email } }),
    verify: (on: ServiceInstance, body: { otp: string; email?: string }, clientType: ClientType = 'mobile') =>
      request(on, 'POST', `/api/auth/email/verify?client_type=${clientType}`, { body }),
    signIn: (on: ServiceInstance, email: string, password = PASSWORD) =>
      request(on, 'POST', '/api/auth/sessions?client_type=mobile', { body: { email, password } }),
    refresh: (on: ServiceInstance, refreshToken: string) =>
      request(on, 'POST', '/api/auth/refresh?client_type=mobile', { body: { refreshToken } }),
    refreshWeb: (on: ServiceInstance, cookie: string, csrfToken: string) =>
      request(on, 'POST', '/api/auth/refresh?client_type=web', {
        headers: { cookie: `refresh_token=${cookie}`, 'x-csrf-token': csrfToken },
      }),
    logout: (on: ServiceInstance, refreshToken: string) =>
      request(on, 'POST', '/api/auth/logout?client_type=mobile', { body: { refreshToken } }),
    current: (on: ServiceInstance, accessToken: string) =>
      request(on, 'GET', '/api/auth/sessions/current', { headers: bearer(accessToken) }),
    embed: (on: ServiceInstance, accessToken: string, input: string) =>
      request(on, 'POST', '/api/ai/embeddings', { headers: bearer(accessToken), body: { model: LOCAL_MODEL, input } }),
    permissions: (on: ServiceInstance, accessToken: string) =>
      request(on, 'GET', '/api/realtime/permissions', { headers: bearer(accessToken) }),
  };
}
type Client = ReturnType<typeof client>;

/** The value of the refresh_token cookie a web answer sets. */
function refreshCookie(reply: HttpReply): string | undefined {
  // The line that sets the cookie (the others expire its variants under other settings).
  const line = reply.setCookies.find((c) => c.startsWith('refresh_token=') && !c.startsWith('refresh_token=;'));
  return line?.split(';')[0]?.slice('refresh_token='.length);
}

function assertLimited(t: Test, reply: HttpReply, label: string) {
  t.test(label, async (t) => {
    assertErrorBody(t, reply, 429, 'RATE_LIMITED');
    const seconds = Number(reply.headers['retry-after']);
    t.ok(
      Number.isInteger(seconds) && seconds >= 1 && seconds <= WINDOW_SECONDS,
      `Retry-After ${reply.headers['retry-after']} is whole seconds within the window`,
    );
  });
}

interface Fixture {
  a: ServiceInstance;
  b: ServiceInstance;
  database: TestDatabase;
  smtp: SmtpCapture;
  redisPrefix: string;
  /** The client whose sign-ins were the first requests A and B answered, and their statuses. */
  first: { ip: string; answers: number[] };
}

async function twoInstances(t: Test) {
  const setupStarted = Date.now();
  const database = await createTestDatabase();
  const redisPrefix = newRedisKeyPrefix('multi-instance');
  let smtp: SmtpCapture | undefined;
  let instances: ServiceInstance[] = [];
  // One teardown, in order: the processes first (SIGTERM, SIGKILL after 5 s; they hold
  // connections), then the database, the SMTP capture and the Redis keys the instances wrote.
  t.teardown(async () => {
    await Promise.all(instances.map((i) => stopService(i.service, 5_000)));
    await database.drop();
    await smtp?.close();
    await deleteRedisKeys(REDIS_URL, redisPrefix).catch(() => 0);
  });
  smtp = await startSmtpCapture();
  const generous = '1000';
  // The first request each instance answers is a sign-in from this client: it must be counted in
  // Redis like any other (an instance must not serve before it can share the counts).
  const firstClient = client(t);
  const firstAnswers: number[] = [];
  const onReady = async (instance: ServiceInstance) => {
    firstAnswers.push((await firstClient.signIn(instance, newEmail('first'), 'wrong password')).statusCode);
  };
  instances = await startInstances(
    ['A', 'B'],
    {
      NODE_ENV: 'test',
      LOG_LEVEL: 'warn',
      DATABASE_URL: database.url,
      JWT_SECRET: randomBytes(32).toString('base64url'),
      REDIS_URL,
      REDIS_KEY_PREFIX: redisPrefix,
      SMTP_URL: smtp.url,
      COOKIE_SECURE: 'false',
      // Behind a load balancer: each scenario's client gets its own address, and so its own allowance.
      TRUST_PROXY: 'true',
      RATE_LIMIT_WINDOW_SECONDS: String(WINDOW_SECONDS),
      RATE_LIMIT_SIGN_IN: String(SIGN_IN_LIMIT),
      RATE_LIMIT_VERIFY: generous,
      RATE_LIMIT_SIGN_UP: generous,
      RATE_LIMIT_SEND_VERIFICATION: generous,
      RATE_LIMIT_REFRESH: generous,
      // Short, so that the reuse test below waits it out on real clocks.
      REFRESH_TOKEN_REUSE_INTERVAL_SECONDS: String(REUSE_INTERVAL_SECONDS),
      EMBEDDINGS_RATE_LIMIT: String(EMBEDDINGS_LIMIT),
    },
    { onReady },
  );
  const [a, b] = instances as [ServiceInstance, ServiceInstance];
  t.comment(`database and both instances ready after ${Date.now() - setupStarted} ms (A :${a.port}, B :${b.port})`);
  return { a, b, database, smtp, redisPrefix, first: { ip: firstClient.ip, answers: firstAnswers } } satisfies Fixture;
}

async function scenarios(t: Test) {
  const { a, b, database, smtp, redisPrefix, first } = await twoInstances(t);
  const db = database.handle.db;

  async function nthMail(email: string, n: number) {
    const mail = (await smtp.waitFor(email, n))[n - 1];
    if (mail?.code === undefined || mail.token === undefined) throw new Error(`mail ${n} to ${email} has no code`);
    return { code: mail.code, token: mail.token };
  }

  /** Signs an address up on `signUpOn` and verifies its code on `verifyOn`; returns the Session answer. */
  async function newSession(
    t: Test,
    c: Client,
    signUpOn: ServiceInstance,
    verifyOn: ServiceInstance,
    type: ClientType,
  ) {
    const email = newEmail(`mi-${type}`);
    t.equal((await c.signUp(signUpOn, email)).statusCode, 202, `sign-up on ${signUpOn.name}: 202`);
    const { code } = await nthMail(email, 1);
    const res = await c.verify(verifyOn, { otp: code, email }, type);
    t.equal(res.statusCode, 200, `verify on ${verifyOn.name}: 200`);
    return { email, res, body: res.json() };
  }

  t.test('1. a session made on A refreshes on B, and tokens minted by either work on the other', async (t) => {
    const c = client(t);
    t.test('mobile: tokens in the body', async (t) => {
      const { body: made } = await newSession(t, c, a, a, 'mobile');
      const fromA = await c.current(b, made.accessToken);
      t.equal(fromA.statusCode, 200, 'an access token minted by A is accepted by B');
      t.equal(fromA.json().user.id, made.user.id);

      const refreshed = await c.refresh(b, made.refreshToken);
      t.equal(refreshed.statusCode, 200, 'refresh on B: 200');
      const next = refreshed.json();
      t.type(next.refreshToken, 'string');
      t.not(next.refreshToken, made.refreshToken, 'a new refresh token');
      // (Within the same second the access token may be byte-identical: same claims, same iat.)
      t.type(next.accessToken, 'string', 'an access token');
      t.equal(decodeClaims(next.accessToken).sid, decodeClaims(made.accessToken).sid, 'the same session');
      const onA = await c.current(a, next.accessToken);
      t.equal(onA.statusCode, 200, "B's new access token works on A");
      t.equal(onA.json().user.id, made.user.id);

      const again = await c.refresh(a, next.refreshToken);
      t.equal(again.statusCode, 200, "and B's new refresh token refreshes on A");
    });

    t.test('web: the cookie and X-CSRF-Token from A refresh on B', async (t) => {
      const { res, body: made } = await newSession(t, c, b, a, 'web');
      const cookie = refreshCookie(res);
      t.ok(cookie, 'A set the refresh_token cookie');
      t.equal(made.refreshToken, null, 'no refresh token in the body');
      t.type(made.csrfToken, 'string');

      const refreshed = await c.refreshWeb(b, cookie ?? '', made.csrfToken);
      t.equal(refreshed.statusCode, 200, 'refresh on B: 200');
      const next = refreshed.json();
      const nextCookie = refreshCookie(refreshed);
      t.ok(nextCookie && nextCookie !== cookie, 'B set a new refresh_token cookie');
      t.equal(next.csrfToken, made.csrfToken, 'the same CSRF token: B derives it from the session as A does');
      t.equal((await c.current(a, next.accessToken)).statusCode, 200, "B's access token works on A");
      t.equal((await c.refreshWeb(a, nextCookie ?? '', next.csrfToken)).statusCode, 200, "B's cookie refreshes on A");
    });
  });

  t.test('2. a rotated refresh token presented to the other instance is caught', async (t) => {
    const c = client(t);
    t.test('R1 -> R2 on A, then R1 on B: reuse, and the session is over everywhere', async (t) => {
      const { body: made } = await newSession(t, c, a, a, 'mobile');
      const r1 = made.refreshToken as string;
      const rotated = await c.refresh(a, r1);
      t.equal(rotated.statusCode, 200, 'refresh on A: 200');
      const r2 = rotated.json().refreshToken as string;
      await new Promise((resolve) => setTimeout(resolve, REUSE_INTERVAL_SECONDS * 1000 + 200));
      assertErrorBody(t, await c.refresh(b, r1), 401, 'REFRESH_TOKEN_REUSED');
      assertErrorBody(t, await c.refresh(a, r2), 401, 'REFRESH_TOKEN_INVALID');
      assertErrorBody(t, await c.refresh(b, r2), 401, 'REFRESH_TOKEN_INVALID');
    });

    t.test(
      'the same token on A and B at the same instant: both get the session, and its token refreshes',
      async (t) => {
        const { email } = await newSession(t, c, b, b, 'mobile');
        for (let round = 1; round <= 3; round++) {
          const signedIn = await c.signIn(round % 2 === 0 ? a : b, email);
          t.equal(signedIn.statusCode, 200, `round ${round}: signed in`);
          const token = signedIn.json().refreshToken as string;
          const answers = await Promise.all([c.refresh(a, token), c.refresh(b, token)]);
          const statuses = answers.map((r) => r.statusCode);
          t.same(statuses, [200, 200], `round ${round}: both 200 (A ${statuses[0]}, B ${statuses[1]})`);
          if (statuses.some((status) => status !== 200)) continue;
          const [onA, onB] = answers.map((r) => r.json().refreshToken as string);
          t.equal(onA, onB, `round ${round}: both carry the session's one current refresh token`);
          t.equal((await c.refresh(round % 2 === 0 ? b : a, onA ?? '')).statusCode, 200, 'which refreshes');
        }
      },
    );

    t.test('logout on A: the refresh token is dead on B', async (t) => {
      const { body: made } = await newSession(t, c, a, b, 'mobile');
      const out = await c.logout(a, made.refreshToken);
      t.equal(out.statusCode, 204, 'logout on A: 204');
      assertErrorBody(t, await c.refresh(b, made.refreshToken), 401, 'REFRESH_TOKEN_INVALID');
      // Revocation reaches B by notification: within 2 s its access token is refused there too.
      const deadline = Date.now() + 2_000;
      let current = await c.current(b, made.accessToken);
      while (current.statusCode === 200 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 20));
        current = await c.current(b, made.accessToken);
      }
      assertErrorBody(t, current, 401, 'SESSION_REVOKED');
    });
  });

  t.test('3. the email cooldown and the code-failure count are shared', async (t) => {
    const c = client(t);
    t.test('sign-up on A, then send-verification on B and A within the cooldown: one email', async (t) => {
      const email = newEmail('cooldown');
      t.equal((await c.signUp(a, email)).statusCode, 202, 'sign-up on A: 202');
      const { code } = await nthMail(email, 1);
      t.equal((await c.sendVerification(b, email)).statusCode, 202, 'send-verification on B: the same 202');
      t.equal((await c.sendVerification(a, email)).statusCode, 202, 'send-verification on A: the same 202');
      await new Promise((r) => setTimeout(r, QUIET_MS));
      t.equal(smtp.to(email).length, 1, 'no second email arrived');
      const verified = await c.verify(b, { otp: code, email });
      t.equal(verified.statusCode, 200, "the first email's code is still the live one (verified on B)");
    });

    t.test('cooldown over, 4 requests at once on A and B: exactly one email', async (t) => {
      const email = newEmail('claim');
      t.equal((await c.signUp(b, email)).statusCode, 202);
      await nthMail(email, 1);
      for (let round = 2; round <= 3; round++) {
        // As if the cooldown had run out: the last send a minute ago.
        await sql`update email_send_log set last_sent_at = now() - interval '61 seconds' where email = ${email}`.execute(
          db,
        );
        const answers = await Promise.all([a, b, a, b].map((on) => c.sendVerification(on, email)));
        t.same(
          answers.map((r) => r.statusCode),
          [202, 202, 202, 202],
        );
        await smtp.waitFor(email, round);
        await new Promise((r) => setTimeout(r, QUIET_MS));
        t.equal(smtp.to(email).length, round, `round ${round}: exactly one more email`);
      }
      const { code } = await nthMail(email, 3);
      t.equal((await c.verify(a, { otp: code, email })).statusCode, 200, 'the latest code verifies');
    });

    t.test(
      'one address signed up on A and B at once: one account, one email; its code on both: one session',
      async (t) => {
        const email = newEmail('twice');
        const ups = await Promise.all([c.signUp(a, email), c.signUp(b, email)]);
        t.same(
          ups.map((r) => r.statusCode),
          [202, 202],
          'both sign-ups: 202',
        );
        const { code } = await nthMail(email, 1);
        await new Promise((r) => setTimeout(r, QUIET_MS));
        t.equal(smtp.to(email).length, 1, 'exactly one email');
        const verifies = await Promise.all([c.verify(a, { otp: code, email }), c.verify(b, { otp: code, email })]);
        const statuses = verifies.map((r) => r.statusCode);
        t.same([...statuses].sort(), [200, 400], `one 200 and one 400 (A ${statuses[0]}, B ${statuses[1]})`);
        const loser = verifies.find((r) => r.statusCode === 400);
        if (loser) assertErrorBody(t, loser, 400, 'INVALID_OTP');
        const rows = await sql<{ accounts: number; sessions: number }>`
        select count(distinct u.id)::int as accounts, count(s.id)::int as sessions
        from users u left join sessions s on s.user_id = u.id where u.email = ${email}
      `.execute(db);
        t.same(rows.rows[0], { accounts: 1, sessions: 1 }, 'one account, one session');
      },
    );

    t.test('5 wrong codes spread over A and B void the code; the link still works', async (t) => {
      const email = newEmail('guess');
      t.equal((await c.signUp(b, email)).statusCode, 202);
      const { code, token } = await nthMail(email, 1);
      for (let k = 1; k <= 5; k++) {
        const on = k % 2 === 1 ? a : b;
        assertErrorBody(t, await c.verify(on, { otp: wrongCode(code, k), email }), 400, 'INVALID_OTP');
      }
      assertErrorBody(t, await c.verify(a, { otp: code, email }), 400, 'INVALID_OTP');
      t.pass('after 5 failures (3 on A, 2 on B) the right code is refused on A');
      t.equal((await c.verify(b, { otp: token })).statusCode, 200, 'the link token verifies on B');
    });
  });

  t.test('4. rate limits are shared through Redis', async (t) => {
    t.test(`sign-in: RATE_LIMIT_SIGN_IN=${SIGN_IN_LIMIT} across A and B from one address`, async (t) => {
      const c = client(t);
      const answers: Array<{ on: string; reply: HttpReply }> = [];
      for (let i = 0; i < SIGN_IN_LIMIT + 4; i++) {
        const on = i % 2 === 0 ? a : b;
        answers.push({ on: on.name, reply: await c.signIn(on, newEmail('limited'), 'wrong password') });
      }
      const allowed = answers.filter((x) => x.reply.statusCode !== 429);
      t.equal(allowed.length, SIGN_IN_LIMIT, `exactly ${SIGN_IN_LIMIT} answers were not 429`);
      for (const [i, { on, reply }] of answers.entries()) {
        if (i < SIGN_IN_LIMIT) t.equal(reply.statusCode, 401, `attempt ${i + 1} on ${on}: 401 (not limited)`);
        else assertLimited(t, reply, `attempt ${i + 1} on ${on}: 429`);
      }
      t.same([...new Set(answers.slice(SIGN_IN_LIMIT).map((x) => x.on))].sort(), ['A', 'B'], 'both instances refuse');
      const other = client(t);
      assertErrorBody(t, await other.signIn(b, newEmail('other')), 401, 'INVALID_CREDENTIALS');
      t.pass('another client address still has its allowance');
    });

    t.test(`embeddings: EMBEDDINGS_RATE_LIMIT=${EMBEDDINGS_LIMIT} per user across A and B`, async (t) => {
      const c = client(t);
      const { body: ann } = await newSession(t, c, a, a, 'mobile');
      const { body: bob } = await newSession(t, c, b, b, 'mobile');
      const statuses: number[] = [];
      const limited: HttpReply[] = [];
      for (let i = 0; i < EMBEDDINGS_LIMIT + 2; i++) {
        const reply = await c.embed(i % 2 === 0 ? a : b, ann.accessToken, `text ${i}`);
        statuses.push(reply.statusCode);
        if (reply.statusCode === 429) limited.push(reply);
      }
      t.same(statuses, [...Array(EMBEDDINGS_LIMIT).fill(200), 429, 429], 'A, B, A, B: 200 x4, then 429 on A and on B');
      for (const [i, reply] of limited.entries()) {
        t.test(`limited answer ${i + 1}`, async (t) => {
          assertErrorBody(t, reply, 429, 'RATE_LIMITED');
          const seconds = Number(reply.headers['retry-after']);
          t.ok(Number.isInteger(seconds) && seconds >= 1 && seconds <= 60, `Retry-After ${seconds} within the minute`);
        });
      }
      t.equal((await c.embed(b, bob.accessToken, 'another user')).statusCode, 200, 'another user is not limited');
    });

    t.test('the counters live in Redis under REDIS_KEY_PREFIX, from the first request on', async (t) => {
      const { Redis } = await import('ioredis');
      const redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
      t.teardown(() => redis.disconnect());
      await redis.connect();
      const keys = await redis.keys(`${redisPrefix}*`);
      t.same(first.answers, [401, 401], 'the first request each instance answered was a sign-in (401)');
      const firstKey = keys.find((k) => k.includes('/api/auth/sessions') && k.endsWith(`-${first.ip}`));
      t.equal(
        firstKey === undefined ? null : await redis.get(firstKey),
        '2',
        `both were counted in Redis (${firstKey ?? 'no key'}): neither instance served before it could count`,
      );
      t.ok(
        keys.some((k) => k.includes('/api/auth/sessions')),
        'a sign-in counter',
      );
      t.ok(
        keys.some((k) => k.includes('/api/ai/embeddings')),
        'an embeddings counter',
      );
    });
  });

  t.test('5. a realtime policy change is seen by both instances', async (t) => {
    const c = client(t);
    const { body: user } = await newSession(t, c, a, b, 'mobile');
    const permissions = async (on: ServiceInstance): Promise<Permissions> => {
      const res = await c.permissions(on, user.accessToken);
      if (res.statusCode !== 200) throw new Error(`permissions on ${on.name}: ${res.statusCode} ${res.body}`);
      return res.json();
    };
    /** Polls one instance until `check` holds; the milliseconds it took, or Infinity after 3 s. */
    const seenAfter = async (on: ServiceInstance, check: (p: Permissions) => boolean) => {
      const started = performance.now();
      for (;;) {
        if (check(await permissions(on))) return Math.round(performance.now() - started);
        if (performance.now() - started > 3_000) return Number.POSITIVE_INFINITY;
        await new Promise((r) => setTimeout(r, 5));
      }
    };
    const figures: string[] = [];
    const change = async (label: string, ddl: RawBuilder<unknown>, check: (p: Permissions) => boolean) => {
      // Warm both caches just before the change: from here on only a notification refreshes them
      // within POLICY_BOUND_MS (the time-to-live without one is 1 s, and 60 s while listening).
      await Promise.all([permissions(a), permissions(b)]);
      t.notOk(check(await permissions(a)), `${label}: not yet visible`);
      await ddl.execute(db);
      const [onA, onB] = await Promise.all([seenAfter(a, check), seenAfter(b, check)]);
      figures.push(`${label}: A ${onA} ms, B ${onB} ms`);
      t.ok(onA < POLICY_BOUND_MS, `${label}: seen on A after ${onA} ms (< ${POLICY_BOUND_MS})`);
      t.ok(onB < POLICY_BOUND_MS, `${label}: seen on B after ${onB} ms (< ${POLICY_BOUND_MS})`);
    };
    const subscribeNames = (p: Permissions) => p.subscribe.policies.map((x) => x.policyName);
    const publishNames = (p: Permissions) => p.publish.policies.map((x) => x.policyName);

    const before = await permissions(a);
    t.same(await permissions(b), before, 'A and B start with the same policies');
    const channelPolicy = `mi_subscribe_${randomBytes(3).toString('hex')}`;
    const messagePolicy = `mi_publish_${randomBytes(3).toString('hex')}`;
    t.teardown(async () => {
      await sql`drop policy if exists ${sql.id(channelPolicy)} on realtime.channels`.execute(db).catch(() => {});
      await sql`drop policy if exists ${sql.id(messagePolicy)} on realtime.messages`.execute(db).catch(() => {});
    });

    await change(
      'create on realtime.channels',
      sql`create policy ${sql.id(channelPolicy)} on realtime.channels for select to anon, authenticated using (pattern like 'public:%')`,
      (p) => subscribeNames(p).includes(channelPolicy),
    );
    const added = (await permissions(b)).subscribe.policies.find((x) => x.policyName === channelPolicy);
    t.same([...(added?.roles ?? [])].sort(), ['anon', 'authenticated'], 'B shows the new policy in full');
    t.same(await permissions(a), await permissions(b), 'A and B agree');
    await change(
      'alter on realtime.channels',
      sql`alter policy ${sql.id(channelPolicy)} on realtime.channels using (pattern like 'open:%')`,
      (p) =>
        p.subscribe.policies.some((x) => x.policyName === channelPolicy && x.using === "(pattern ~~ 'open:%'::text)"),
    );
    await change(
      'create on realtime.messages',
      sql`create policy ${sql.id(messagePolicy)} on realtime.messages for insert to authenticated with check (false)`,
      (p) => publishNames(p).includes(messagePolicy),
    );
    await change(
      'drop on realtime.channels',
      sql`drop policy ${sql.id(channelPolicy)} on realtime.channels`,
      (p) => !subscribeNames(p).includes(channelPolicy),
    );
    await change(
      'drop on realtime.messages',
      sql`drop policy ${sql.id(messagePolicy)} on realtime.messages`,
      (p) => !publishNames(p).includes(messagePolicy),
    );
    t.same(await permissions(a), before, 'A is back to the policies it started with');
    t.same(await permissions(b), before, 'so is B');
    t.comment(`policy propagation: ${figures.join('; ')}`);
  });

  t.test('both instances stop cleanly on SIGTERM', async (t) => {
    const codes = await Promise.all([stopService(a.service), stopService(b.service)]);
    t.same(codes, [0, 0], 'exit code 0 from A and B');
    for (const instance of [a, b]) {
      const errors = instance.service
        .output()
        .split('\n')
        .filter((line) => /"level":(50|60)/.test(line));
      t.same(errors, [], `${instance.name} logged no errors`);
    }
  });
}

const NAME = 'two instances on one PostgreSQL and one Redis behave as one service';
const PG_REASON = 'needs PostgreSQL (two processes on one database, LISTEN/NOTIFY): run it with `npm run test:pg`';
if (!usingPostgres) {
  t.test(NAME, { skip: PG_REASON }, scenarios);
} else if (await redisAvailable(REDIS_URL)) {
  t.test(NAME, scenarios);
} else if (process.env.CI === 'true') {
  t.fail(`${NAME}: Redis is not available on ${REDIS_URL}, and CI requires it`);
} else {
  t.test(NAME, { skip: `Redis is not available on ${REDIS_URL}` }, scenarios);
}
