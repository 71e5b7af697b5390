import t from 'tap';
import { VerifiedTokenCache } from '../src/auth/verified-token-cache.ts';
import { buildTestApp } from './helpers/app.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { accessTokenFor } from './helpers/tokens.ts';

t.test('VerifiedTokenCache keeps successes until their exp, bounded in size', async (t) => {
  const now = 1_000_000_000_000;
  const exp = now / 1000 + 60;
  const cache = new VerifiedTokenCache<{ sub: string; exp?: number }>(2, 600_000);
  t.equal(cache.get('a', now), undefined, 'unknown token: miss');
  cache.set('a', { sub: 'A', exp }, now);
  t.same(cache.get('a', now + 59_000), { sub: 'A', exp }, 'hit before exp');
  t.equal(cache.get('a', now + 60_000), undefined, 'gone at exp');
  cache.set('b', { sub: 'B' }, now);
  t.equal(cache.get('b', now), undefined, 'no exp: not kept');
  cache.set('c', { sub: 'C', exp: now / 1000 - 1 }, now);
  t.equal(cache.get('c', now), undefined, 'already expired: not kept');
  cache.set('d', { sub: 'D', exp }, now);
  cache.set('e', { sub: 'E', exp }, now);
  cache.set('f', { sub: 'F', exp }, now);
  t.equal(cache.get('d', now), undefined, 'the oldest entry made room');
  t.same(cache.get('f', now), { sub: 'F', exp });
  const short = new VerifiedTokenCache<{ exp?: number }>(10, 1_000);
  short.set('g', { exp }, now);
  t.equal(short.get('g', now + 1_000), undefined, 'at most maxAgeMs even with a later exp');
  t.ok(Object.isFrozen(cache.get('f', now)), 'cached claims cannot be changed by one request for the next');
});

t.test('a cached token does not vouch for a tampered or foreign copy', async (t) => {
  const { app } = await buildTestApp(t);
  const other = await buildTestApp(t, { env: { JWT_SECRET: 'another-secret-of-at-least-32-characters!' } });
  const token = accessTokenFor(app);
  const call = (a: typeof app, bearer: string) =>
    a.inject({ url: '/api/realtime/permissions', headers: { authorization: `Bearer ${bearer}` } });
  t.equal((await call(app, token)).statusCode, 200, 'accepted by the app that signed it');
  t.equal((await call(app, token)).statusCode, 200, 'and again, from the cache');
  const [head, body, signature] = token.split('.');
  const flipped = `${signature?.[0] === 'A' ? 'B' : 'A'}${signature?.slice(1)}`;
  assertErrorBody(t, await call(app, `${head}.${body}.${flipped}`), 401, 'AUTH_UNAUTHORIZED');
  assertErrorBody(t, await call(other.app, token), 401, 'AUTH_UNAUTHORIZED');
});
