// Cookie tossing: a refresh_token cookie planted on a longer path (sent before the service's own)
// does not block refresh or logout, and sign-in and logout answers expire its variants; with a
// REFRESH_TOKEN_REUSE_INTERVAL_SECONDS of 0 a rotated token is reuse at once.
import t from 'tap';
import { buildAuthTestApp, newEmail, PASSWORD, setCookieHeaders } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { buildRefreshTestApp, held } from './helpers/refresh-clients.ts';

t.test('a REFRESH_TOKEN_REUSE_INTERVAL_SECONDS of 0: a rotated token is reuse at once', async (t) => {
  const built = await buildAuthTestApp(t, { label: 'reuse-0', env: { REFRESH_TOKEN_REUSE_INTERVAL_SECONDS: '0' } });
  const email = newEmail('zero');
  await built.signUp(email);
  const mail = await built.firstMail(email);
  await built.verify({ otp: mail.token });
  const s = held(
    'mobile',
    await built.app.inject({
      method: 'POST',
      url: '/api/auth/sessions?client_type=mobile',
      payload: { email, password: PASSWORD },
    }),
  );
  const refresh = (token: string) =>
    built.app.inject({ method: 'POST', url: '/api/auth/refresh?client_type=mobile', payload: { refreshToken: token } });
  t.equal((await refresh(s.refreshToken)).statusCode, 200);
  assertErrorBody(t, await refresh(s.refreshToken), 401, 'REFRESH_TOKEN_REUSED');
});

t.test('cookie tossing: a refresh_token cookie planted on a longer path does not block the session', async (t) => {
  const { session, signIn, account, call, current } = await buildRefreshTestApp(t);
  const attacker = held('web', await signIn(await account('attacker'), 'web'));

  for (const [name, planted] of [
    ['garbage', 'planted-by-a-sibling-host'],
    ["another account's live session", attacker.refreshToken],
  ] as const) {
    t.test(`planted: ${name}`, async (t) => {
      const s = await session(`tossed-${name.length}`, 'web');
      // A browser sends cookies on longer paths first: the planted one comes before the real one.
      const refreshed = await call('refresh', s, [planted, s.refreshToken]);
      t.equal(refreshed.statusCode, 200, `refresh goes through (${refreshed.body.slice(0, 100)})`);
      const now = held('web', refreshed);
      t.equal((await current(now)).statusCode, 200);
      const again = await call('refresh', now, [planted, now.refreshToken]);
      t.equal(again.statusCode, 200, 'and again');
      const last = held('web', again);
      const out = await call('logout', last, [planted, last.refreshToken]);
      t.equal(out.statusCode, 204, `logout goes through (${out.body.slice(0, 100)})`);
      t.equal((await current(last)).statusCode, 401, 'the real session is over');
    });
  }
  t.equal((await current(attacker)).statusCode, 200, "the planted session's owner was not logged out");

  t.test('six planted cookies (two longer paths and the same path, partitioned or not) come first', async (t) => {
    const s = await session('tossed-six', 'web');
    const planted = Array.from({ length: 6 }, (_, i) => `planted-by-a-sibling-host-${i}`);
    const refreshed = await call('refresh', s, [...planted, s.refreshToken]);
    t.equal(refreshed.statusCode, 200, `the seventh cookie, the real one, is tried (${refreshed.body.slice(0, 100)})`);
  });

  t.test('sign-in and logout answers expire the variants on the longer paths', async (t) => {
    const email = await account('expiry');
    const signedIn = await signIn(email, 'web');
    const logout = await call('logout', held('web', signedIn));
    for (const [what, res] of [
      ['sign-in', signedIn],
      ['logout', logout],
    ] as const) {
      const expired = setCookieHeaders(res).filter((line) => line.startsWith('refresh_token=;'));
      for (const path of ['/api/auth/', '/api/auth/refresh', '/api/auth/logout']) {
        t.ok(
          expired.some((line) => line.includes(`Path=${path};`) && /Max-Age=0/.test(line)),
          `${what} expires refresh_token on ${path}`,
        );
      }
    }
  });

  t.test('with only planted cookies, refresh is refused as before', async (t) => {
    const s = await session('only-planted', 'web');
    const res = await call('refresh', s, ['planted-one', 'planted-two']);
    assertErrorBody(t, res, 401, 'REFRESH_TOKEN_INVALID');
  });
});
