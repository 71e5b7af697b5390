// The forms InsForge's SDK sends for the existing operations, beside the service's own: the refresh
// token as refresh_token, logout with only a Bearer access token, sign-in with method "password",
// redirectTo on sign-up, send-verification and verify (allowed origins only), and the
// {success, message} answer of send-verification.
import type { LightMyRequestResponse } from 'fastify';
import t, { type Test } from 'tap';
import type { Env } from '../src/config.ts';
import { buildAuthTestApp, type ClientType, newEmail, PASSWORD, refreshCookies } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { accessClaims, currentSigningKey, forgeJwt } from './helpers/tokens.ts';

interface Session {
  accessToken: string;
  csrfToken: string | null;
  refreshToken: string | null;
  user: { id: string; email: string };
  redirectTo?: string;
  cookie: string | undefined;
}

function toSession(res: LightMyRequestResponse): Session {
  if (res.statusCode !== 200) throw new Error(`expected a session, got ${res.statusCode} ${res.body}`);
  return { ...(res.json() as Omit<Session, 'cookie'>), cookie: refreshCookies(res)[0]?.value };
}

const APP = 'https://app.example.com';

async function setup(t: Test, env: Env = {}) {
  const built = await buildAuthTestApp(t, { env, label: 'sdk-forms' });
  const { app, signUp, verify, firstMail } = built;

  const signIn = (email: string, client: ClientType = 'mobile', extra: Record<string, unknown> = {}) =>
    app.inject({
      method: 'POST',
      url: `/api/auth/sessions?client_type=${client}`,
      payload: { email, password: PASSWORD, ...extra },
    });

  async function verifiedAccount(label: string): Promise<string> {
    const email = newEmail(label);
    if ((await signUp(email)).statusCode !== 202) throw new Error('sign-up failed');
    const verified = await verify({ otp: (await firstMail(email)).token });
    if (verified.statusCode !== 200) throw new Error(`verify: ${verified.statusCode} ${verified.body}`);
    return email;
  }

  const session = async (email: string, client: ClientType = 'mobile') => toSession(await signIn(email, client));

  /** POST refresh or logout with exactly this body (none when undefined), headers and cookie. */
  const call = (
    path: 'refresh' | 'logout',
    options: { client?: ClientType; body?: object; headers?: Record<string, string>; cookie?: string } = {},
  ) =>
    app.inject({
      method: 'POST',
      url: `/api/auth/${path}?client_type=${options.client ?? 'mobile'}`,
      headers: options.headers ?? {},
      cookies: options.cookie === undefined ? {} : { refresh_token: options.cookie },
      ...(options.body === undefined ? {} : { payload: options.body }),
    });

  const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
  const current = (token: string) => built.current(token);

  return { ...built, signIn, verifiedAccount, session, call, bearer, current };
}

t.test('refresh takes the token as refresh_token too', async (t) => {
  const { verifiedAccount, session, call, clock } = await setup(t);
  const email = await verifiedAccount('snake');

  for (const client of ['mobile', 'desktop'] as const) {
    t.test(client, async (t) => {
      const s = await session(email, client);
      const res = await call('refresh', { client, body: { refresh_token: s.refreshToken } });
      t.equal(res.statusCode, 200, 'refresh_token refreshes');
      const next = res.json() as Session;
      t.not(next.refreshToken, s.refreshToken, 'and rotates the token');
      clock.advance(11); // past the reuse interval
      assertErrorBody(
        t,
        await call('refresh', { client, body: { refresh_token: s.refreshToken } }),
        401,
        'REFRESH_TOKEN_REUSED',
      );
    });
  }

  t.test('both names with the same token: accepted', async (t) => {
    const s = await session(email);
    const res = await call('refresh', { body: { refreshToken: s.refreshToken, refresh_token: s.refreshToken } });
    t.equal(res.statusCode, 200);
  });

  t.test('both names with different tokens: 400, and neither session is touched', async (t) => {
    const a = await session(email);
    const b = await session(email);
    const res = await call('refresh', { body: { refreshToken: a.refreshToken, refresh_token: b.refreshToken } });
    assertErrorBody(t, res, 400, 'INVALID_INPUT');
    t.match(res.json().message, /refresh_token/);
    assertErrorBody(
      t,
      await call('logout', { body: { refreshToken: a.refreshToken, refresh_token: b.refreshToken } }),
      400,
      'INVALID_INPUT',
    );
    t.equal((await call('refresh', { body: { refreshToken: a.refreshToken } })).statusCode, 200, 'a lives on');
    t.equal((await call('refresh', { body: { refresh_token: b.refreshToken } })).statusCode, 200, 'b lives on');
  });

  t.test('an empty refresh_token is refused by the contract', async (t) => {
    assertErrorBody(t, await call('refresh', { body: { refresh_token: '' } }), 400, 'INVALID_INPUT');
  });

  t.test('web ignores a body token: the cookie and the CSRF token are what count', async (t) => {
    const mobile = await session(email, 'mobile');
    const res = await call('refresh', { client: 'web', body: { refresh_token: mobile.refreshToken } });
    assertErrorBody(t, res, 401, 'REFRESH_TOKEN_INVALID');
    t.equal((await call('refresh', { body: { refresh_token: mobile.refreshToken } })).statusCode, 200);
  });
});

t.test('logout by refresh_token', async (t) => {
  const { verifiedAccount, session, call } = await setup(t);
  const s = await session(await verifiedAccount('logout-snake'));
  const res = await call('logout', { body: { refresh_token: s.refreshToken } });
  t.equal(res.statusCode, 204);
  assertErrorBody(t, await call('refresh', { body: { refreshToken: s.refreshToken } }), 401, 'REFRESH_TOKEN_INVALID');
});

t.test('logout with only a Bearer access token ends that session, everywhere', async (t) => {
  const { app, config, database, verifiedAccount, session, call, bearer, current } = await setup(t);
  const email = await verifiedAccount('logout-bearer');

  for (const client of ['mobile', 'desktop', 'web'] as const) {
    t.test(`a ${client} session, no body (as the SDK sends it in server mode)`, async (t) => {
      const s = await session(email, client);
      const other = await session(email, client);
      const res = await call('logout', { client, headers: bearer(s.accessToken) });
      t.equal(res.statusCode, 204, '204 without a refresh token, and (web) without a CSRF header');
      t.equal(res.body, '');
      t.ok(app.sessionRevocations.isRevoked(sidOf(s.accessToken)), 'recorded as revoked at once');
      assertErrorBody(t, await current(s.accessToken), 401, 'SESSION_REVOKED');
      const refresh =
        client === 'web'
          ? await call('refresh', {
              client,
              cookie: s.cookie as string,
              headers: { 'x-csrf-token': s.csrfToken ?? '' },
            })
          : await call('refresh', { client, body: { refreshToken: s.refreshToken } });
      assertErrorBody(t, refresh, 401, 'REFRESH_TOKEN_INVALID');
      t.equal((await current(other.accessToken)).statusCode, 200, 'the account’s other session lives on');
      assertErrorBody(t, await call('logout', { client, headers: bearer(s.accessToken) }), 401, 'SESSION_REVOKED');
    });
  }

  t.test('with an empty JSON body as well', async (t) => {
    const s = await session(email);
    t.equal((await call('logout', { body: {}, headers: bearer(s.accessToken) })).statusCode, 204);
    assertErrorBody(t, await current(s.accessToken), 401, 'SESSION_REVOKED');
  });

  t.test('a session ended elsewhere meanwhile: 401 SESSION_REVOKED', async (t) => {
    const s = await session(email);
    // Logged out by its refresh token; the access token's session is already gone.
    t.equal((await call('logout', { body: { refreshToken: s.refreshToken } })).statusCode, 204);
    assertErrorBody(t, await call('logout', { headers: bearer(s.accessToken) }), 401, 'SESSION_REVOKED');
  });

  t.test('a refresh token, when presented, decides; the Authorization header is not looked at', async (t) => {
    const a = await session(email);
    const b = await session(email);
    const res = await call('logout', { body: { refreshToken: a.refreshToken }, headers: bearer(b.accessToken) });
    t.equal(res.statusCode, 204);
    assertErrorBody(t, await current(a.accessToken), 401, 'SESSION_REVOKED');
    t.equal((await current(b.accessToken)).statusCode, 200, 'the Bearer token’s session lives on');

    const c = await session(email);
    const garbage = await call('logout', { body: { refreshToken: c.refreshToken }, headers: bearer('garbage') });
    t.equal(garbage.statusCode, 204, 'a bad Authorization header beside a refresh token changes nothing');
  });

  t.test('web: a cookie decides, and still needs its CSRF token', async (t) => {
    const w = await session(email, 'web');
    const res = await call('logout', { client: 'web', cookie: w.cookie as string, headers: bearer(w.accessToken) });
    assertErrorBody(t, res, 403, 'CSRF_INVALID');
    t.equal((await current(w.accessToken)).statusCode, 200, 'nothing was revoked');
  });

  t.test('bad access tokens: the Bearer checks, with the same 401 codes', async (t) => {
    // No Bearer token in the header: UNAUTHORIZED; a token that is not valid: AUTH_UNAUTHORIZED.
    assertErrorBody(t, await call('logout', { headers: bearer('not-a-jwt') }), 401, 'AUTH_UNAUTHORIZED');
    assertErrorBody(t, await call('logout', { headers: { authorization: 'Basic dXNlcjpwdw==' } }), 401, 'UNAUTHORIZED');
    assertErrorBody(t, await call('logout', { headers: bearer('x'.repeat(5000)) }), 401, 'UNAUTHORIZED');
    const foreign = forgeJwt('another-secret-another-secret-another!', accessClaims());
    assertErrorBody(t, await call('logout', { headers: bearer(foreign) }), 401, 'AUTH_UNAUTHORIZED');
    const now = Math.floor(Date.now() / 1000);
    const key = await currentSigningKey(config, database.handle.db);
    const expired = forgeJwt(key, { ...accessClaims(now - 3600), exp: now - 60 });
    assertErrorBody(t, await call('logout', { headers: bearer(expired) }), 401, 'AUTH_UNAUTHORIZED');
  });

  t.test('no refresh token and no Authorization header: 401 REFRESH_TOKEN_INVALID, as before', async (t) => {
    assertErrorBody(t, await call('logout', {}), 401, 'REFRESH_TOKEN_INVALID');
    assertErrorBody(t, await call('logout', { client: 'web' }), 401, 'REFRESH_TOKEN_INVALID');
  });
});

/** The session id in an access token's claims. */
function sidOf(accessToken: string): string {
  const payload = accessToken.split('.')[1] ?? '';
  return (JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as { sid: string }).sid;
}

t.test('sign-in accepts method "password", and nothing else under that name', async (t) => {
  const { verifiedAccount, signIn } = await setup(t);
  const email = await verifiedAccount('method');
  t.equal((await signIn(email, 'mobile', { method: 'password' })).statusCode, 200, 'method: password');
  assertErrorBody(t, await signIn(email, 'mobile', { method: 'magic' }), 400, 'INVALID_INPUT');
  assertErrorBody(t, await signIn(email, 'mobile', { method: 'password', password: 'wrong password' }), 401);
});

t.test('send-verification answers {success: true, message}', async (t) => {
  const { sendVerification } = await setup(t);
  const res = await sendVerification(newEmail('success'));
  t.equal(res.statusCode, 202);
  t.equal(res.json().success, true);
  t.type(res.json().message, 'string');
});

t.test('redirectTo without AUTH_REDIRECT_URL: refused everywhere, before anything is looked up', async (t) => {
  const { app, signUp, verify, firstMail, smtp } = await setup(t);
  const email = newEmail('no-redirect');
  const res = await signUp(email, { redirectTo: `${APP}/welcome` });
  const body = assertErrorBody(t, res, 400, 'INVALID_INPUT');
  t.match(body.message, /AUTH_REDIRECT_URL/, 'the message says why');
  t.equal(smtp.to(email).length, 0, 'no account, no email');
  assertErrorBody(
    t,
    await app.inject({
      method: 'POST',
      url: '/api/auth/email/send-verification',
      payload: { email, redirectTo: `${APP}/welcome` },
    }),
    400,
    'INVALID_INPUT',
  );
  t.equal((await signUp(email)).statusCode, 202);
  const mail = await firstMail(email);
  t.notMatch(mail.text, /redirect_to/, 'a link without redirect_to');
  assertErrorBody(t, await verify({ otp: mail.token, redirectTo: `${APP}/x` }), 400, 'INVALID_INPUT');
  const ok = await verify({ otp: mail.token });
  t.equal(ok.statusCode, 200, 'the refused redirect did not consume the link');
  t.notOk('redirectTo' in ok.json(), 'no redirectTo without a configured URL');
});

t.test('redirectTo on the origin of AUTH_REDIRECT_URL', async (t) => {
  const { app, signUp, verify, firstMail, nthMail, smtp, clock } = await setup(t, {
    AUTH_REDIRECT_URL: `${APP}/done`,
  });

  t.test('sign-up: the link carries it, and verifying by the link returns it', async (t) => {
    const email = newEmail('redirect');
    const res = await signUp(email, { redirectTo: `${APP}/welcome?step=2` });
    t.equal(res.statusCode, 202);
    const mail = await firstMail(email);
    t.ok(
      mail.text.includes(`?token=${mail.token}&redirect_to=${encodeURIComponent(`${APP}/welcome?step=2`)}`),
      'the emailed link carries redirect_to, encoded',
    );
    const verified = toSession(await verify({ otp: mail.token, redirectTo: `${APP}/welcome?step=2` }));
    t.equal(verified.redirectTo, `${APP}/welcome?step=2`, 'the session names it');
  });

  t.test('without one, the configured URL as before; a code may name one too', async (t) => {
    const email = newEmail('redirect-default');
    await signUp(email);
    const mail = await firstMail(email);
    t.notMatch(mail.text, /redirect_to/);
    const verified = toSession(await verify({ otp: mail.code, email, redirectTo: `${APP}/from-code` }));
    t.equal(verified.redirectTo, `${APP}/from-code`);
    const signIn = await app.inject({
      method: 'POST',
      url: '/api/auth/sessions?client_type=mobile',
      payload: { email, password: PASSWORD },
    });
    t.equal(signIn.json().redirectTo, `${APP}/done`, 'sign-in: the configured URL');
  });

  t.test('send-verification puts it in the new link', async (t) => {
    const email = newEmail('redirect-resend');
    await signUp(email);
    await firstMail(email);
    clock.advance(61);
    const res = await app.inject({
      method: 'POST',
      url: '/api/auth/email/send-verification',
      payload: { email, redirectTo: `${APP}/again` },
    });
    t.equal(res.statusCode, 202);
    const second = await nthMail(email, 2);
    t.ok(second.text.includes(`&redirect_to=${encodeURIComponent(`${APP}/again`)}`));
  });

  t.test('the URL is returned as a browser reads it', async (t) => {
    const email = newEmail('redirect-normal');
    await signUp(email);
    const mail = await firstMail(email);
    const verified = toSession(await verify({ otp: mail.token, redirectTo: 'HTTPS://APP.example.com' }));
    t.equal(verified.redirectTo, `${APP}/`);
  });

  t.test('anything off the origin is a 400, and spends nothing', async (t) => {
    const hostile = [
      'https://evil.example.com/',
      'https://app.example.com.evil.com/',
      'http://app.example.com/',
      'https://app.example.com:8443/',
      'https://user:pw@app.example.com/',
      'https://app.example.com@evil.com/',
      'javascript:alert(1)',
      'data:text/html,hi',
      '//evil.com/',
      '/relative',
      'not a url',
    ];
    const email = newEmail('redirect-hostile');
    await signUp(email);
    const mail = await firstMail(email);
    for (const redirectTo of hostile) {
      assertErrorBody(t, await signUp(newEmail('hostile'), { redirectTo }), 400, 'INVALID_INPUT');
      assertErrorBody(t, await verify({ otp: mail.code, email, redirectTo }), 400, 'INVALID_INPUT');
    }
    // Eleven refusals of the code's shape above took none of its five attempts.
    t.equal((await verify({ otp: mail.code, email })).statusCode, 200, 'the code still works');
    t.equal(smtp.to(email).length, 1);
  });
});

t.test('without verification, sign-up returns the allowed redirectTo with the session', async (t) => {
  const { signUp } = await setup(t, { REQUIRE_EMAIL_VERIFICATION: 'false', AUTH_REDIRECT_URL: `${APP}/done` });
  const res = await signUp(newEmail('no-verify'), { redirectTo: `${APP}/first-run` }, '?client_type=mobile');
  t.equal(res.statusCode, 201);
  t.equal(res.json().redirectTo, `${APP}/first-run`);
  assertErrorBody(t, await signUp(newEmail('no-verify'), { redirectTo: 'https://evil.example.com/' }), 400);
});
