// A refresh whose answer was lost, retried with the same token within the reuse interval
// (REFRESH_TOKEN_REUSE_INTERVAL_SECONDS), ends with a working session for every client type; after
// the interval, or once the session has ended, a rotated token is still refused.
import t from 'tap';
import { loadConfig } from '../src/config.ts';
import { PASSWORD } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { buildRefreshTestApp, CLIENTS, held, INTERVAL_SECONDS } from './helpers/refresh-clients.ts';

t.test('the reuse interval is 10 seconds by default', async (t) => {
  t.equal(loadConfig({ NODE_ENV: 'test' }).refreshTokenReuseIntervalSeconds, INTERVAL_SECONDS);
});

for (const client of CLIENTS) {
  t.test(client, async (t) => {
    const shared = await buildRefreshTestApp(t);

    t.test(
      `${client}: a refresh whose answer was lost, retried with the same token, gives a working session`,
      async (t) => {
        const { session, call, current, clock } = shared;
        const s = await session(`lost-${client}`, client);
        // The first refresh rotates the token; its answer never reaches the client.
        const lost = await call('refresh', s);
        t.equal(lost.statusCode, 200, 'the first refresh went through on the server');
        clock.advance(INTERVAL_SECONDS - 2);
        const retry = await call('refresh', s);
        t.equal(retry.statusCode, 200, 'the retry with the same token, within the interval: 200');
        const now = held(client, retry);
        t.equal((await current(now)).statusCode, 200, 'its access token works');
        // Well after the interval, the token the retry carried still refreshes: the session goes on.
        clock.advance(INTERVAL_SECONDS * 6);
        const next = await call('refresh', now);
        t.equal(next.statusCode, 200, 'the token the retry carried refreshes later');
        t.equal((await current(held(client, next))).statusCode, 200);
      },
    );

    t.test(`${client}: the rotated token after the interval is reuse and ends the session`, async (t) => {
      const { session, call, current, clock } = shared;
      const s = await session(`late-${client}`, client);
      const rotated = held(client, await call('refresh', s));
      clock.advance(INTERVAL_SECONDS + 1);
      assertErrorBody(t, await call('refresh', s), 401, 'REFRESH_TOKEN_REUSED');
      assertErrorBody(t, await call('refresh', rotated), 401, 'REFRESH_TOKEN_INVALID');
      t.equal((await current(rotated)).statusCode, 401, 'the session’s access tokens are refused');
    });

    t.test(`${client}: a rotated token within the interval after the session ended is refused`, async (t) => {
      const { session, account, signIn, call, current, clock, app } = shared;
      // Ended by logout.
      const s = await session(`ended-${client}`, client);
      const rotated = held(client, await call('refresh', s));
      t.equal((await call('logout', rotated)).statusCode, 204);
      clock.advance(1);
      const afterLogout = await call('refresh', s);
      t.equal(afterLogout.statusCode, 401, `after logout: 401 (${afterLogout.body.slice(0, 100)})`);
      t.equal((await current(rotated)).statusCode, 401);

      // Ended by a revocation: a password change from another session ends every other session.
      const email = await account(`revoked-${client}`);
      const victim = held(client, await signIn(email, client));
      const other = held('mobile', await signIn(email, 'mobile'));
      const victimRotated = held(client, await call('refresh', victim));
      const changed = await app.inject({
        method: 'POST',
        url: '/api/auth/password',
        headers: { authorization: `Bearer ${other.accessToken}` },
        payload: { currentPassword: PASSWORD, newPassword: 'a new and longer passphrase' },
      });
      t.equal(changed.statusCode, 204, `password changed (${changed.body})`);
      clock.advance(1);
      const afterRevocation = await call('refresh', victim);
      t.equal(afterRevocation.statusCode, 401, `after revocation: 401 (${afterRevocation.body.slice(0, 100)})`);
      t.equal((await call('refresh', victimRotated)).statusCode, 401, 'the current token is refused too');
    });

    t.test(
      `${client}: logout with the token rotated a moment ago ends the session, not counted as reuse`,
      async (t) => {
        const { session, call, current } = shared;
        const s = await session(`logout-${client}`, client);
        const rotated = held(client, await call('refresh', s));
        t.equal((await call('logout', s)).statusCode, 204);
        t.equal((await current(rotated)).statusCode, 401, 'the session is over');
        t.equal((await call('refresh', rotated)).statusCode, 401);
      },
    );
  });
}
