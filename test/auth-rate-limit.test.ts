// Rate limits of the auth operations: 429 RATE_LIMITED with Retry-After once a client spends its
// allowance, keyed on the client address (X-Forwarded-For only behind TRUST_PROXY), and shared
// between instances through Redis.
import { randomBytes } from 'node:crypto';
import type { LightMyRequestResponse } from 'fastify';
import t, { type Test } from 'tap';
import type { Env } from '../src/config.ts';
import { buildAuthTestApp, newEmail, newRedisKeyPrefix, PASSWORD, wrongCode } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { redisAvailable } from './helpers/redis.ts';

const REDIS_URL = 'redis://127.0.0.1:6379';
const WINDOW_SECONDS = 300;

const newPrefix = () => newRedisKeyPrefix('rate-limit');

async function setup(t: Test, env: Env) {
  const built = await buildAuthTestApp(t, { env, label: 'rate-limit', generousRateLimits: false });
  const { app } = built;
  const signIn = (email: string, password = PASSWORD, headers: Record<string, string> = {}) =>
    app.inject({ method: 'POST', url: '/api/auth/sessions?client_type=mobile', payload: { email, password }, headers });
  return { ...built, signIn };
}

function assertNotLimited(t: Test, res: LightMyRequestResponse, label: string) {
  t.not(res.statusCode, 429, `${label}: not limited (${res.statusCode})`);
}

function assertLimited(t: Test, res: LightMyRequestResponse, label: string) {
  t.test(label, async (t) => {
    assertErrorBody(t, res, 429, 'RATE_LIMITED');
    const retryAfter = res.headers['retry-after'];
    t.match(String(retryAfter), /^\d+$/, `Retry-After is a whole number of seconds (${retryAfter})`);
    const seconds = Number(retryAfter);
    t.ok(seconds >= 1 && seconds <= WINDOW_SECONDS, `Retry-After ${seconds} is within the ${WINDOW_SECONDS} s window`);
  });
}

t.test('verify: with RATE_LIMIT_VERIFY=3 the 4th attempt is 429, even with the right code', async (t) => {
  const { app, smtp, signUp, signIn } = await setup(t, { RATE_LIMIT_VERIFY: '3' });
  const email = newEmail('verify');
  t.equal((await signUp(email)).statusCode, 202);
  const [mail] = await smtp.waitFor(email, 1);
  const code = mail?.code ?? '';
  const verify = (otp: string) =>
    app.inject({ method: 'POST', url: '/api/auth/email/verify', payload: { otp, email } });
  for (const k of [1, 2, 3]) {
    const res = await verify(wrongCode(code, k));
    t.equal(res.statusCode, 400, `attempt ${k}: 400 (a wrong code, not yet limited)`);
  }
  assertLimited(t, await verify(code), 'attempt 4');
  assertErrorBody(t, await signIn(email), 401, 'INVALID_CREDENTIALS');
  t.pass('the limited attempt was not processed: the address is still unverified (no password yet)');
});

t.test('sign-in: with RATE_LIMIT_SIGN_IN=2 the 3rd attempt is 429, even with the right password', async (t) => {
  const admin = newEmail('admin');
  const { signIn } = await setup(t, { RATE_LIMIT_SIGN_IN: '2', ADMIN_EMAIL: admin, ADMIN_PASSWORD: PASSWORD });
  assertErrorBody(t, await signIn(admin, 'wrong password 1'), 401, 'INVALID_CREDENTIALS');
  assertErrorBody(t, await signIn(admin, 'wrong password 2'), 401, 'INVALID_CREDENTIALS');
  assertLimited(t, await signIn(admin), 'attempt 3');
  assertLimited(t, await signIn(newEmail('someone-else')), 'attempt 4, another address from the same client');
});

t.test('sign-up, send-verification and refresh have their own limits', async (t) => {
  t.test('RATE_LIMIT_SIGN_UP=2', async (t) => {
    const { signUp } = await setup(t, { RATE_LIMIT_SIGN_UP: '2' });
    t.equal((await signUp(newEmail('up'))).statusCode, 202);
    t.equal((await signUp(newEmail('up'))).statusCode, 202);
    assertLimited(t, await signUp(newEmail('up')), 'sign-up 3');
  });
  t.test('RATE_LIMIT_SEND_VERIFICATION=2', async (t) => {
    const { sendVerification } = await setup(t, { RATE_LIMIT_SEND_VERIFICATION: '2' });
    t.equal((await sendVerification(newEmail('send'))).statusCode, 202);
    t.equal((await sendVerification(newEmail('send'))).statusCode, 202);
    assertLimited(t, await sendVerification(newEmail('send')), 'send-verification 3');
  });
  t.test('RATE_LIMIT_REFRESH=2', async (t) => {
    const { app } = await setup(t, { RATE_LIMIT_REFRESH: '2' });
    const refresh = () =>
      app.inject({
        method: 'POST',
        url: '/api/auth/refresh?client_type=mobile',
        payload: { refreshToken: randomBytes(32).toString('base64url') },
      });
    assertErrorBody(t, await refresh(), 401, 'REFRESH_TOKEN_INVALID');
    assertErrorBody(t, await refresh(), 401, 'REFRESH_TOKEN_INVALID');
    assertLimited(t, await refresh(), 'refresh 3');
  });
  t.test('spending one limit leaves the others alone', async (t) => {
    const { signUp, signIn } = await setup(t, { RATE_LIMIT_SIGN_UP: '1' });
    t.equal((await signUp(newEmail('one'))).statusCode, 202);
    assertLimited(t, await signUp(newEmail('one')), 'sign-up 2');
    assertErrorBody(t, await signIn(newEmail('other')), 401, 'INVALID_CREDENTIALS');
  });
});

t.test('with TRUST_PROXY=true each X-Forwarded-For client has its own allowance', async (t) => {
  const { signIn } = await setup(t, { RATE_LIMIT_SIGN_IN: '2', TRUST_PROXY: 'true' });
  const a = { 'x-forwarded-for': '203.0.113.10' };
  const b = { 'x-forwarded-for': '203.0.113.20' };
  assertNotLimited(t, await signIn(newEmail('a1'), PASSWORD, a), 'client A, 1');
  assertNotLimited(t, await signIn(newEmail('a2'), PASSWORD, a), 'client A, 2');
  assertLimited(t, await signIn(newEmail('a3'), PASSWORD, a), 'client A, 3');
  const other = await signIn(newEmail('b1'), PASSWORD, b);
  assertErrorBody(t, other, 401, 'INVALID_CREDENTIALS');
});

t.test('without TRUST_PROXY a forged X-Forwarded-For does not buy a new allowance', async (t) => {
  const { signIn } = await setup(t, { RATE_LIMIT_SIGN_IN: '2' });
  const email = newEmail('spoof');
  assertNotLimited(t, await signIn(email, PASSWORD, { 'x-forwarded-for': '198.51.100.1' }), 'request 1');
  assertNotLimited(t, await signIn(email, PASSWORD, { 'x-forwarded-for': '198.51.100.2' }), 'request 2');
  assertLimited(t, await signIn(email, PASSWORD, { 'x-forwarded-for': '198.51.100.3' }), 'request 3');
});

async function sharedCount(t: Test) {
  const { Redis } = await import('ioredis');
  const redis = new Redis(REDIS_URL);
  const prefix = newPrefix();
  const otherPrefix = newPrefix();
  t.teardown(async () => {
    for (const p of [prefix, otherPrefix]) {
      const keys = await redis.keys(`${p}*`);
      if (keys.length > 0) await redis.del(...keys);
    }
    redis.disconnect();
  });
  const env = { REDIS_URL, REDIS_KEY_PREFIX: prefix, RATE_LIMIT_SIGN_IN: '3' };
  const a = await setup(t, env);
  const b = await setup(t, env);
  const elsewhere = await setup(t, { ...env, REDIS_KEY_PREFIX: otherPrefix });

  assertErrorBody(t, await a.signIn(newEmail('shared-1')), 401, 'INVALID_CREDENTIALS');
  assertErrorBody(t, await a.signIn(newEmail('shared-2')), 401, 'INVALID_CREDENTIALS');
  assertErrorBody(t, await b.signIn(newEmail('shared-3')), 401, 'INVALID_CREDENTIALS');
  assertLimited(t, await b.signIn(newEmail('shared-4')), 'the 4th request, on instance B');
  assertLimited(t, await a.signIn(newEmail('shared-5')), 'the 5th request, on instance A');
  const keys = await redis.keys(`${prefix}*`);
  t.ok(keys.length > 0, `the counters live in Redis under REDIS_KEY_PREFIX (${keys.join(', ')})`);

  const separate = await elsewhere.signIn(newEmail('shared-6'));
  t.test('an instance with another REDIS_KEY_PREFIX keeps its own count', async (t) => {
    assertErrorBody(t, separate, 401, 'INVALID_CREDENTIALS');
  });
}

const sharedCountName = 'two instances on one Redis with one REDIS_KEY_PREFIX share the sign-in count';
if (await redisAvailable()) t.test(sharedCountName, sharedCount);
else if (process.env.CI === 'true') t.fail(`${sharedCountName}: Redis not available on 127.0.0.1:6379`);
else t.skip(sharedCountName, { skip: 'Redis not available on 127.0.0.1:6379' }, sharedCount);
