// The per-address back-off of failed sign-ins (src/auth/sign-in-throttle.ts): the schedule on a
// fake clock, in memory and in Redis; sharing between instances; falling back to memory while
// Redis is away; and over HTTP, many wrong passwords from several client addresses.
import { createHash } from 'node:crypto';
import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';
import t, { type Test } from 'tap';
import {
  createSignInThrottle,
  delayAfter,
  MAX_DELAY_MS,
  RECORD_LIFETIME_MS,
  type SignInThrottle,
  type SignInThrottleOptions,
  signInThrottledError,
} from '../src/auth/sign-in-throttle.ts';
import { closeRedis, connectRedis } from '../src/redis.ts';
import { buildAuthTestApp, newEmail, newRedisKeyPrefix, PASSWORD } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { deleteRedisKeys, redisAvailable, TEST_REDIS_URL } from './helpers/redis.ts';

/** A clock for the throttle that moves only when told to. */
class FakeTime {
  ms = Date.UTC(2026, 0, 1);
  readonly now = () => this.ms;
  advance(seconds: number): void {
    this.ms += Math.round(seconds * 1000);
  }
}

/** A logger that keeps its warn lines. */
function warnLog() {
  const warns: string[] = [];
  const log = { warn: (...args: unknown[]) => void warns.push(args.map((a) => JSON.stringify(a)).join(' ')) };
  return { warns, log: log as unknown as SignInThrottleOptions['log'] };
}

type Redis = NonNullable<SignInThrottleOptions['redis']>;

/** A Redis client from connectRedis, closed when `t` ends. */
async function redisClient(t: Test, url = TEST_REDIS_URL): Promise<Redis> {
  const redis = await connectRedis({ redisUrl: url }, warnLog().log as never);
  if (redis === undefined) throw new Error('connectRedis gave no client for a URL');
  t.teardown(() => closeRedis(redis));
  return redis;
}

/** A REDIS_KEY_PREFIX of the test's own, whose keys are deleted when `t` ends. */
function redisPrefix(t: Test): string {
  const prefix = newRedisKeyPrefix('sign-in-throttle');
  t.teardown(() => deleteRedisKeys(TEST_REDIS_URL, prefix));
  return prefix;
}

/** One failed sign-in: the seconds it was told to wait, or undefined when it went ahead (and failed). */
async function fail(throttle: SignInThrottle, email: string): Promise<number | undefined> {
  const wait = await throttle.beginAttempt(email);
  if (wait === undefined) await throttle.recordFailure(email);
  return wait;
}

/** `count` failed attempts one after the other; how many were let through. */
async function attempts(throttle: SignInThrottle, email: string, count: number): Promise<number> {
  let allowed = 0;
  for (let i = 0; i < count; i++) if ((await fail(throttle, email)) === undefined) allowed++;
  return allowed;
}

type Make = (t: Test, time: FakeTime) => Promise<SignInThrottle>;

/** What must hold wherever the records live. */
function scheduleTests(t: Test, make: Make) {
  t.test('5 free failures, then 1 s, 2 s, 4 s ... up to 15 minutes, refused attempts not counted', async (t) => {
    const time = new FakeTime();
    const throttle = await make(t, time);
    const email = newEmail('schedule');
    t.equal(await attempts(throttle, email, 5), 5, 'failures 1-5 go ahead at once');
    t.equal(await fail(throttle, email), undefined, 'attempt 6 too: no delay after 5 failures');
    const seen: number[] = [];
    for (let n = 6; n <= 20; n++) {
      const delay = Math.min(2 ** (n - 6), MAX_DELAY_MS / 1000);
      const retryAfter = await fail(throttle, email);
      seen.push(retryAfter ?? 0);
      t.equal(await fail(throttle, email), retryAfter, `after failure ${n}: a second refusal changes nothing`);
      if (delay > 1) {
        time.advance(delay - 1);
        t.equal(await fail(throttle, email), 1, `after failure ${n}: 1 s before the end, Retry-After 1`);
      }
      time.advance(1);
      t.equal(await fail(throttle, email), undefined, `after failure ${n}: allowed once ${delay} s have passed`);
    }
    t.same(seen, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 900, 900, 900, 900, 900], 'Retry-After after failures 6-20');
  });

  t.test('Retry-After is the remaining wait rounded up to whole seconds, at least 1', async (t) => {
    const time = new FakeTime();
    const throttle = await make(t, time);
    const email = newEmail('round');
    await attempts(throttle, email, 6);
    time.advance(1);
    t.equal(await fail(throttle, email), undefined, 'failure 7');
    time.advance(0.3);
    t.equal(await fail(throttle, email), 2, '1.7 s left: 2');
    time.advance(0.69);
    t.equal(await fail(throttle, email), 2, '1.01 s left: 2');
    time.advance(0.999);
    t.equal(await fail(throttle, email), 1, '11 ms left: 1');
    time.advance(0.011);
    t.equal(await fail(throttle, email), undefined, 'none left: allowed');
  });

  t.test('a success clears the record', async (t) => {
    const time = new FakeTime();
    const throttle = await make(t, time);
    const email = newEmail('success');
    await attempts(throttle, email, 6);
    t.equal(await fail(throttle, email), 1, 'after 6 failures: wait 1 s');
    time.advance(1);
    t.equal(await fail(throttle, email), undefined, 'the 7th attempt goes ahead');
    await throttle.recordSuccess(email);
    t.equal(await attempts(throttle, email, 6), 6, 'after the success: 6 attempts at once again');
    t.equal(await fail(throttle, email), 1, 'then the back-off starts from 1 s');
  });

  t.test('the address is compared lower-cased; other addresses have their own record', async (t) => {
    const time = new FakeTime();
    const throttle = await make(t, time);
    const email = newEmail('case');
    await attempts(throttle, email.toUpperCase(), 6);
    t.equal(await fail(throttle, email), 1, 'failures under the upper-cased address count for it');
    t.equal(await fail(throttle, newEmail('other')), undefined, 'another address is not held back');
    await throttle.recordSuccess(email.toUpperCase());
    t.equal(await fail(throttle, email), undefined, 'a success under either spelling clears it');
  });

  t.test('records lapse 24 h after the last failure', async (t) => {
    const time = new FakeTime();
    const throttle = await make(t, time);
    const email = newEmail('expiry');
    await attempts(throttle, email, 6);
    time.advance(RECORD_LIFETIME_MS / 1000 - 1);
    t.equal(await fail(throttle, email), undefined, 'a second before the record lapses: failure 7');
    t.equal(await fail(throttle, email), 2, 'which still counts: wait 2 s');
    time.advance(RECORD_LIFETIME_MS / 1000);
    t.equal(await attempts(throttle, email, 6), 6, '24 h after failure 7: 6 attempts at once again');
    t.equal(await fail(throttle, email), 1, 'then 1 s');
  });

  t.test('concurrent attempts: all go ahead until the back-off starts, then one per delay', async (t) => {
    const time = new FakeTime();
    const throttle = await make(t, time);
    const email = newEmail('concurrent');
    // Right passwords at once (several devices, a retrying client) are never held back by each other.
    const fresh = await Promise.all(Array.from({ length: 30 }, () => throttle.beginAttempt(email)));
    t.ok(
      fresh.every((r) => r === undefined),
      'no failures yet: 30 simultaneous attempts go ahead',
    );
    await attempts(throttle, email, 6);
    time.advance(1);
    const backingOff = await Promise.all(Array.from({ length: 30 }, () => throttle.beginAttempt(email)));
    t.equal(
      backingOff.filter((r) => r === undefined).length,
      1,
      'backing off: 1 of 30 simultaneous attempts goes ahead',
    );
    t.ok(
      backingOff.filter((r) => r !== undefined).every((r) => r === 1),
      'the others are told to wait a full delay from then',
    );
  });
}

t.test('delayAfter: nothing up to 5 failures, then doubling from 1 s, capped at 15 minutes', async (t) => {
  t.same(
    [0, 1, 5, 6, 7, 8, 15, 16, 17, 1000].map(delayAfter),
    [0, 0, 0, 1_000, 2_000, 4_000, 512_000, 900_000, 900_000, 900_000],
  );
});

t.test('signInThrottledError: 429 RATE_LIMITED with Retry-After', async (t) => {
  const err = signInThrottledError(8);
  t.equal(err.statusCode, 429);
  t.equal(err.code, 'RATE_LIMITED');
  t.same(err.headers, { 'retry-after': '8' });
  t.match(err.message, /8 s/);
});

t.test('in memory', async (t) => {
  scheduleTests(t, async (_t, time) =>
    createSignInThrottle({ redis: undefined, redisKeyPrefix: 'unused:', log: warnLog().log, now: time.now }),
  );

  t.test('at most maxMemoryRecords addresses are kept; the oldest go first', async (t) => {
    const time = new FakeTime();
    const throttle = createSignInThrottle({
      redis: undefined,
      redisKeyPrefix: '',
      log: warnLog().log,
      now: time.now,
      maxMemoryRecords: 3,
    });
    const [a, b, c, d] = ['a', 'b', 'c', 'd'].map((label) => newEmail(`bounded-${label}`)) as [
      string,
      string,
      string,
      string,
    ];
    for (const email of [a, b, c]) {
      await attempts(throttle, email, 6);
      time.advance(1);
    }
    t.equal(await fail(throttle, a), undefined, 'a: its 7th attempt after 1 s (a is now the newest)');
    await attempts(throttle, d, 1);
    t.equal(await fail(throttle, b), undefined, 'd pushed out b, the oldest: b starts again');
    t.equal(await fail(throttle, a), 2, 'a was kept');
  });
});

async function redisTests(t: Test) {
  const redis = await redisClient(t);

  scheduleTests(t, async (t, time) =>
    createSignInThrottle({ redis, redisKeyPrefix: redisPrefix(t), log: warnLog().log, now: time.now }),
  );

  t.test('one key per address, sha256 of it under REDIS_KEY_PREFIX sign-in-failures:, lapsing in 24 h', async (t) => {
    const prefix = redisPrefix(t);
    const time = new FakeTime();
    const throttle = createSignInThrottle({ redis, redisKeyPrefix: prefix, log: warnLog().log, now: time.now });
    const email = newEmail('key');
    await fail(throttle, email.toUpperCase());
    const expected = `${prefix}sign-in-failures:${createHash('sha256').update(email).digest('hex')}`;
    t.same(await redis.keys(`${prefix}*`), [expected]);
    const stored = JSON.stringify(await redis.hgetall(expected));
    t.notMatch(stored, email.split('@')[0] as string, `the address is not stored (${stored})`);
    const ttl = await redis.pttl(expected);
    t.ok(ttl > RECORD_LIFETIME_MS - 60_000 && ttl <= RECORD_LIFETIME_MS, `the key lapses in 24 h (${ttl} ms)`);
    await throttle.recordSuccess(email);
    t.same(await redis.keys(`${prefix}*`), [], 'a success deletes it');
  });

  t.test('two instances on one Redis share the count', async (t) => {
    const prefix = redisPrefix(t);
    const time = new FakeTime();
    const other = await redisClient(t);
    const a = createSignInThrottle({ redis, redisKeyPrefix: prefix, log: warnLog().log, now: time.now });
    const b = createSignInThrottle({ redis: other, redisKeyPrefix: prefix, log: warnLog().log, now: time.now });
    const email = newEmail('shared');
    t.equal(await attempts(a, email, 3), 3, '3 failures on instance A');
    t.equal(await attempts(b, email, 3), 3, '3 more on instance B');
    t.equal(await a.beginAttempt(email), 1, 'A: wait 1 s');
    t.equal(await b.beginAttempt(email), 1, 'B: wait 1 s');
    time.advance(1);
    t.equal(await fail(b, email), undefined, 'B: failure 7');
    t.equal(await a.beginAttempt(email), 2, 'A: wait 2 s');
    await a.recordSuccess(email);
    t.equal(await attempts(b, email, 6), 6, 'a success on A clears the record for B');
    const elsewhere = createSignInThrottle({
      redis,
      redisKeyPrefix: redisPrefix(t),
      log: warnLog().log,
      now: time.now,
    });
    t.equal(await elsewhere.beginAttempt(email), undefined, 'another REDIS_KEY_PREFIX keeps its own records');
  });

  t.test('Redis refusing connections: counted in memory, one warning per 10 s', async (t) => {
    const closedPort = await freePort();
    const down = await redisClient(t, `redis://127.0.0.1:${closedPort}`);
    const time = new FakeTime();
    const { warns, log } = warnLog();
    const throttle = createSignInThrottle({ redis: down, redisKeyPrefix: redisPrefix(t), log, now: time.now });
    const email = newEmail('down');
    t.equal(await attempts(throttle, email, 6), 6, '6 failures go ahead');
    t.equal(await throttle.beginAttempt(email), 1, 'the 7th waits 1 s: counted in this process');
    t.equal(warns.length, 1, 'one warning so far');
    t.match(warns[0], /redis unavailable: sign-in failures counted per instance/);
    time.advance(9);
    await throttle.beginAttempt(email);
    t.equal(warns.length, 1, '9 s later: still one');
    time.advance(1);
    await throttle.beginAttempt(email);
    t.equal(warns.length, 2, '10 s later: another');
    await throttle.recordSuccess(email);
    t.equal(await attempts(throttle, email, 6), 6, 'a success clears the record in memory');
  });

  t.test('Redis not answering: after redisTimeoutMs counted in memory; in Redis again once it answers', async (t) => {
    const proxy = await startPausableProxy(t);
    const slow = await redisClient(t, proxy.url);
    const prefix = redisPrefix(t);
    const time = new FakeTime();
    const { warns, log } = warnLog();
    const throttle = createSignInThrottle({
      redis: slow,
      redisKeyPrefix: prefix,
      log,
      now: time.now,
      redisTimeoutMs: 200,
    });
    const email = newEmail('hang');
    t.equal(await throttle.beginAttempt(email), undefined, 'failure 1, in Redis');
    proxy.pause();
    const started = Date.now();
    t.equal(await attempts(throttle, email, 6), 6, 'failures 2-7 while Redis does not answer: in memory');
    const took = Date.now() - started;
    t.ok(took >= 1_100 && took < 5_000, `each waited about 200 ms (${took} ms for 6)`);
    t.equal(await throttle.beginAttempt(email), 1, 'memory: after 6 failures, wait 1 s');
    t.equal(warns.length, 1, 'one warning');
    proxy.resume();
    // The commands held back reach Redis through the proxy a moment after it resumes.
    const key = `${prefix}sign-in-failures:${createHash('sha256').update(email).digest('hex')}`;
    let record: Record<string, string> = {};
    for (const deadline = Date.now() + 5_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 50))) {
      record = await redis.hgetall(key);
      if (Number(record.failures) >= 1) break;
    }
    t.ok(Number(record.failures) >= 1, `Redis answers again (its record: ${JSON.stringify(record)})`);
    // The commands held back reach Redis once it answers; the next attempt goes through Redis again.
    time.advance(MAX_DELAY_MS / 1000);
    const after = await throttle.beginAttempt(email);
    t.equal(after, undefined, 'after the longest delay an attempt goes ahead, through Redis');
    t.equal(warns.length, 1, 'no new warning');
  });
}

const redisName = 'in Redis (REDIS_URL)';
if (await redisAvailable()) t.test(redisName, redisTests);
else if (process.env.CI === 'true') t.fail(`${redisName}: Redis not available on 127.0.0.1:6379`);
else t.skip(redisName, { skip: 'Redis not available on 127.0.0.1:6379 (runs under CI=true)' }, redisTests);

t.test('connectRedis gives no client without REDIS_URL', async (t) => {
  t.equal(await connectRedis({ redisUrl: undefined }, warnLog().log as never), undefined);
});

// Over HTTP: the throttle wired into createSession (POST /api/auth/sessions).

const signInOver =
  (app: Awaited<ReturnType<typeof buildAuthTestApp>>['app']) => (email: string, password: string, ip: string) =>
    app.inject({
      method: 'POST',
      url: '/api/auth/sessions?client_type=mobile',
      payload: { email, password },
      remoteAddress: ip,
    });

const IPS = ['198.51.100.7', '203.0.113.40', '192.0.2.99'];

t.test('HTTP: 90 wrong passwords from 3 addresses, then the right one: 429 until the wait is over', async (t) => {
  const { app, clock, signUp } = await buildAuthTestApp(t, {
    env: { REQUIRE_EMAIL_VERIFICATION: 'false' },
    label: 'sign-in-throttle',
  });
  const signIn = signInOver(app);
  const email = newEmail('victim');
  t.equal((await signUp(email)).statusCode, 201, 'signed up (no verification needed)');
  const statuses: number[] = [];
  for (let i = 0; i < 90; i++)
    statuses.push((await signIn(email, `wrong password ${i}`, IPS[i % 3] as string)).statusCode);
  t.same(statuses, [...Array(6).fill(401), ...Array(84).fill(429)], 'six 401s, then 429s (the clock did not move)');

  const right = await signIn(email, PASSWORD, IPS[0] as string);
  assertErrorBody(t, right, 429, 'RATE_LIMITED');
  t.equal(right.headers['retry-after'], '1', 'Retry-After: 1 (6 failures; refused attempts are not counted)');

  clock.advance(Number(right.headers['retry-after']));
  t.equal((await signIn(email, PASSWORD, IPS[1] as string)).statusCode, 200, 'after the wait the right password works');
  t.equal(
    (await signIn(email, 'wrong again', IPS[2] as string)).statusCode,
    401,
    'and cleared the record: a failure is 401',
  );

  const unknown = newEmail('nobody');
  const unknownStatuses: number[] = [];
  for (let i = 0; i < 8; i++) unknownStatuses.push((await signIn(unknown, 'guess', IPS[i % 3] as string)).statusCode);
  t.same(unknownStatuses, [401, 401, 401, 401, 401, 401, 429, 429], 'an unknown address is held back the same way');
});

async function httpSharedTest(t: Test) {
  const prefix = redisPrefix(t);
  const env = { REQUIRE_EMAIL_VERIFICATION: 'false', REDIS_URL: TEST_REDIS_URL, REDIS_KEY_PREFIX: prefix };
  const a = await buildAuthTestApp(t, { env, label: 'sign-in-throttle' });
  const b = await buildAuthTestApp(t, { env, label: 'sign-in-throttle' });
  const email = newEmail('shared-http');
  for (let i = 0; i < 6; i++) {
    const app = i % 2 === 0 ? a.app : b.app;
    t.equal((await signInOver(app)(email, `wrong ${i}`, IPS[i % 3] as string)).statusCode, 401, `failure ${i + 1}`);
  }
  assertErrorBody(t, await signInOver(a.app)(email, 'wrong 7', IPS[0] as string), 429, 'RATE_LIMITED');
  assertErrorBody(t, await signInOver(b.app)(email, 'wrong 7', IPS[1] as string), 429, 'RATE_LIMITED');
  t.ok((await a.app.inject({ url: '/api/health' })).statusCode < 500, 'instance A still healthy');
}

const httpSharedName = 'HTTP: two instances on one Redis share the count of an address';
if (await redisAvailable()) t.test(httpSharedName, httpSharedTest);
else if (process.env.CI === 'true') t.fail(`${httpSharedName}: Redis not available on 127.0.0.1:6379`);
else t.skip(httpSharedName, { skip: 'Redis not available on 127.0.0.1:6379 (runs under CI=true)' }, httpSharedTest);

/** A port nothing listens on. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** A TCP proxy to the test Redis that can hold everything back (Redis "not answering") and let it go. */
async function startPausableProxy(t: Test) {
  let paused = false;
  const held: Array<() => void> = [];
  const sockets = new Set<Socket>();
  const forward = (from: Socket, to: Socket) =>
    from.on('data', (chunk) => {
      if (paused) held.push(() => to.write(chunk));
      else to.write(chunk);
    });
  const server: Server = createServer((client) => {
    const upstream = tcpConnect(6379, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => {
        client.destroy();
        upstream.destroy();
      });
    }
    forward(client, upstream);
    forward(upstream, client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
  const { port } = server.address() as { port: number };
  return {
    url: `redis://127.0.0.1:${port}`,
    pause: () => {
      paused = true;
    },
    resume: () => {
      paused = false;
      for (const send of held.splice(0)) send();
    },
  };
}
