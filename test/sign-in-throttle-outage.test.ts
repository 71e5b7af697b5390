// The per-address sign-in back-off across a Redis outage (src/auth/sign-in-throttle.ts), against a
// private redis-server that the test stops and starts again: an address already backing off stays
// backed off while Redis is down (no more password checks than the back-off allows), and the count,
// the failures made meanwhile included, is in Redis again once it is back (even though it came back
// empty).
import { createHash } from 'node:crypto';
import t from 'tap';
import { closeRedis, connectRedis } from '../src/redis.ts';
import { buildAuthTestApp, newEmail, PASSWORD, pause } from './helpers/auth.ts';
import { startPrivateRedis } from './helpers/redis.ts';

const WRONG = 'not the password at all';

t.test(
  'an address backing off stays backed off while Redis is down, and its count survives Redis returning',
  async (t) => {
    const redis = await startPrivateRedis(t);
    const s = await buildAuthTestApp(t, {
      label: 'throttle-outage',
      env: { REDIS_URL: redis.url, REQUIRE_EMAIL_VERIFICATION: 'false' },
    });
    const email = newEmail('outage');
    t.equal((await s.signUp(email)).statusCode, 201, 'an account');
    const signIn = (password: string) =>
      s.app.inject({
        method: 'POST',
        url: '/api/auth/sessions?client_type=mobile',
        payload: { email, password },
        remoteAddress: '198.51.100.20',
      });

    // 7 failures with Redis up: 5 free, then 1 s; the next attempt must wait 2 s.
    for (let i = 1; i <= 7; i++) {
      t.equal((await signIn(WRONG)).statusCode, 401, `failure ${i} (Redis up)`);
      if (i === 6) s.clock.advance(1);
    }
    const before = await signIn(PASSWORD);
    t.equal(before.statusCode, 429, 'backing off');
    t.equal(before.headers['retry-after'], '2');

    await redis.stop();
    // Every attempt while Redis is down and the wait runs: refused, the password not checked.
    for (let i = 1; i <= 8; i++) {
      const res = await signIn(i % 2 === 0 ? PASSWORD : WRONG);
      t.equal(res.statusCode, 429, `attempt ${i} while Redis is down: still backing off, no password check`);
    }
    s.clock.advance(2);
    t.equal(
      (await signIn(WRONG)).statusCode,
      401,
      'after the 2 s wait, one attempt is checked (failure 8, Redis down)',
    );
    const down = await signIn(PASSWORD);
    t.equal(down.statusCode, 429, 'then the next waits again');
    t.equal(down.headers['retry-after'], '4', 'for 4 s: the count went on in memory');

    // Redis comes back, empty (no persistence): the instance gives it the count again.
    await redis.start();
    // The client reconnects by itself (ioredis retries within 2 s); until then attempts are counted in memory.
    for (const deadline = Date.now() + 10_000; ; await pause(100)) {
      const health = (await s.app.inject({ url: '/api/health' })).json() as { redis: string };
      if (health.redis === 'up') break;
      if (Date.now() > deadline) throw new Error('the service did not reconnect to Redis in 10 s');
    }
    const back = await signIn(PASSWORD);
    t.equal(back.statusCode, 429, 'Redis back: still backing off');
    const client = await connectRedis({ redisUrl: redis.url }, { warn() {} } as never);
    if (client === undefined) throw new Error('no Redis client');
    t.teardown(() => closeRedis(client));
    const prefix = s.config.redisKeyPrefix;
    const key = `${prefix}sign-in-failures:${createHash('sha256').update(email).digest('hex')}`;
    const record = await client.hgetall(key);
    t.equal(Number(record.failures), 8, `Redis has the 8 failures again (${JSON.stringify(record)})`);

    // From here on, counted in Redis as before.
    s.clock.advance(4);
    t.equal((await signIn(WRONG)).statusCode, 401, 'after 4 s, failure 9 goes to Redis');
    const record9 = await client.hgetall(key);
    t.equal(Number(record9.failures), 9, 'counted in Redis');
    t.equal((await signIn(PASSWORD)).statusCode, 429, 'and the next waits 8 s');
    s.clock.advance(8);
    t.equal((await signIn(PASSWORD)).statusCode, 200, 'the right password after the wait signs in');
    t.same(await client.hgetall(key), {}, 'and clears the record in Redis');
  },
);
