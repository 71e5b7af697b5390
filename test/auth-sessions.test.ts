// Sessions: sign-in answers, refresh-token rotation and reuse, CSRF for web clients, logout,
// the current session, and the claims of access tokens.
import { randomBytes } from 'node:crypto';
import t, { type Test } from 'tap';
import { TOKEN_AUDIENCE } from '../src/auth/access-token.ts';
import type { Env } from '../src/config.ts';
import {
  buildAuthTestApp,
  type ClientType,
  decodeClaims,
  newEmail,
  PASSWORD,
  refreshCookies,
  type SessionAnswer,
  toSession,
} from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { accessClaims, currentSigningKey, forgeJwt, TEST_ISSUER } from './helpers/tokens.ts';

async function setup(t: Test, env: Env = {}) {
  const built = await buildAuthTestApp(t, { env, label: 'sessions' });
  const { api } = built;

  const signIn = (email: string, password = PASSWORD, client: ClientType = 'web') =>
    api.post('/api/auth/sessions', { query: { client_type: client }, body: { email, password } });

  async function session(email: string, client: ClientType): Promise<SessionAnswer> {
    return toSession(await signIn(email, PASSWORD, client));
  }

  /** Refresh (or logout) the way a web client does: the cookie, plus the CSRF header when given. */
  const webCall = (path: 'refresh' | 'logout', cookie: string | undefined, csrf?: string) =>
    api.post(`/api/auth/${path}`, {
      query: { client_type: 'web' },
      cookies: cookie === undefined ? {} : { refresh_token: cookie },
      headers: csrf === undefined ? {} : { 'x-csrf-token': csrf },
    });

  /** Refresh (or logout) the way a mobile or desktop client does: the token in the body. */
  const bodyCall = (path: 'refresh' | 'logout', refreshToken: string | null, client: ClientType = 'mobile') =>
    api.post(`/api/auth/${path}`, {
      query: { client_type: client },
      body: refreshToken === null ? {} : { refreshToken },
    });

  // Unlike the shared current, this one takes the whole Authorization header, or none.
  const current = (authorization?: string) =>
    api.get('/api/auth/sessions/current', { headers: authorization === undefined ? {} : { authorization } });

  return { ...built, signIn, session, webCall, bodyCall, current };
}

t.test('sign-in refusals', async (t) => {
  const { signUp, signIn, verifiedAccount, smtp } = await setup(t);
  const known = await verifiedAccount('known');

  t.test('an unknown address and a wrong password get the same 401 INVALID_CREDENTIALS body', async (t) => {
    const unknown = await signIn(newEmail('nobody'));
    const wrong = await signIn(known, 'not the password at all');
    assertErrorBody(t, unknown, 401, 'INVALID_CREDENTIALS');
    assertErrorBody(t, wrong, 401, 'INVALID_CREDENTIALS');
    t.equal(wrong.body, unknown.body, 'byte-identical bodies');
    t.same(refreshCookies(wrong), [], 'no cookie on a refusal');
  });

  t.test('an address signed up for but not verified answers like an unknown one, whatever the password', async (t) => {
    // "Right password, not verified yet" would tell whoever signed up that the address was new.
    const email = newEmail('unverified');
    t.equal((await signUp(email)).statusCode, 202);
    await smtp.waitFor(email, 1);
    const unknown = await signIn(newEmail('nobody'));
    for (const res of [await signIn(email), await signIn(email.toUpperCase()), await signIn(email, 'not it at all')]) {
      assertErrorBody(t, res, 401, 'INVALID_CREDENTIALS');
      t.equal(res.body, unknown.body, 'the same body as for an unknown address');
    }
  });
});

t.test('web refresh: the X-CSRF-Token of the session is required, and the cookie rotates', async (t) => {
  const { verifiedAccount, session, webCall, current } = await setup(t);
  const email = await verifiedAccount('web');
  const s = await session(email, 'web');
  const other = await session(email, 'web');
  t.ok(s.cookie && s.csrfToken, 'a web session has a cookie and a csrfToken');

  assertErrorBody(t, await webCall('refresh', s.cookie), 403, 'CSRF_INVALID');
  assertErrorBody(t, await webCall('refresh', s.cookie, 'not-the-csrf-token'), 403, 'CSRF_INVALID');
  assertErrorBody(t, await webCall('refresh', s.cookie, ''), 403, 'CSRF_INVALID');
  t.not(other.csrfToken, s.csrfToken, 'two sessions have different CSRF tokens');
  assertErrorBody(t, await webCall('refresh', s.cookie, other.csrfToken ?? ''), 403, 'CSRF_INVALID');

  const res = await webCall('refresh', s.cookie, s.csrfToken ?? '');
  t.equal(res.statusCode, 200, 'with the right header: 200 (the refusals above did not revoke anything)');
  const body = res.json();
  t.same(Object.keys(body).sort(), ['accessToken', 'csrfToken', 'refreshToken', 'user']);
  t.equal(body.refreshToken, null, 'refreshToken is null');
  t.ok(typeof body.csrfToken === 'string' && body.csrfToken.length > 0, 'a csrfToken');
  t.equal(body.user.email, email);
  const [cookie] = refreshCookies(res);
  t.ok(cookie && cookie.value.length > 0, 'a new refresh_token cookie');
  t.not(cookie?.value, s.cookie, 'with a new value');
  // A refresh never extends the session: the cookie lives for the time the session has left.
  const maxAge = Number(cookie?.attributes.get('max-age'));
  t.ok(maxAge <= 2592000 && maxAge >= 2592000 - 30, `Max-Age is the session's remaining lifetime (${maxAge})`);
  t.equal(cookie?.attributes.get('path'), '/api/auth', 'Path=/api/auth');
  t.ok(cookie?.attributes.has('httponly'), 'HttpOnly');
  t.ok(cookie?.attributes.has('secure'), 'Secure');
  t.equal(cookie?.attributes.get('samesite'), 'Lax', 'SameSite=Lax');
  t.equal((await current(`Bearer ${body.accessToken}`)).statusCode, 200, 'the new access token works');

  const again = await webCall('refresh', cookie?.value, body.csrfToken ?? '');
  t.equal(again.statusCode, 200, 'the rotated cookie with the new csrfToken refreshes again');
});

t.test('mobile and desktop refresh rotate the refresh token in the body', async (t) => {
  const { verifiedAccount, session, bodyCall, current } = await setup(t);
  const email = await verifiedAccount('native');
  for (const client of ['mobile', 'desktop'] as const) {
    t.test(client, async (t) => {
      const s = await session(email, client);
      const res = await bodyCall('refresh', s.refreshToken, client);
      t.equal(res.statusCode, 200);
      const body = res.json();
      t.same(Object.keys(body).sort(), ['accessToken', 'csrfToken', 'refreshToken', 'user']);
      t.ok(typeof body.refreshToken === 'string' && body.refreshToken.length > 0, 'a refresh token');
      t.not(body.refreshToken, s.refreshToken, 'a new, different refresh token');
      t.equal(body.csrfToken, null, 'csrfToken is null');
      t.same(refreshCookies(res), [], 'no cookie');
      t.equal((await current(`Bearer ${body.accessToken}`)).statusCode, 200, 'the new access token works');
      t.equal((await bodyCall('refresh', body.refreshToken, client)).statusCode, 200, 'the new token refreshes');
    });
  }
});

t.test('missing, unknown or garbage refresh tokens get 401 REFRESH_TOKEN_INVALID', async (t) => {
  const { verifiedAccount, session, bodyCall } = await setup(t);
  const s = await session(await verifiedAccount('garbage'), 'mobile');
  const cases: Array<[string, string | null]> = [
    ['no refresh token', null],
    ['garbage', 'garbage'],
    ['a random token', randomBytes(32).toString('base64url')],
    [
      'the refresh token with a changed character',
      `${s.refreshToken?.slice(0, -1)}${s.refreshToken?.endsWith('A') ? 'B' : 'A'}`,
    ],
  ];
  for (const [label, token] of cases) {
    const res = await bodyCall('refresh', token);
    t.test(label, async (t) => {
      assertErrorBody(t, res, 401, 'REFRESH_TOKEN_INVALID');
    });
  }
  // An access token (an ES256 JWS, longer than any refresh token's 512-character limit) is refused
  // for its shape.
  t.ok(s.accessToken.length > 512, 'an access token is longer than a refresh token may be');
  assertErrorBody(t, await bodyCall('refresh', s.accessToken), 400, 'INVALID_INPUT');
  t.equal((await bodyCall('refresh', s.refreshToken)).statusCode, 200, 'control: the real token refreshes');
});

t.test('a rotated refresh token presented again is REUSED and revokes the whole session', async (t) => {
  const { verifiedAccount, session, bodyCall, clock } = await setup(t);
  const s = await session(await verifiedAccount('reuse'), 'mobile');
  const first = await bodyCall('refresh', s.refreshToken);
  t.equal(first.statusCode, 200);
  const second = await bodyCall('refresh', first.json().refreshToken);
  t.equal(second.statusCode, 200);
  const newest = second.json().refreshToken as string;

  clock.advance(11); // past the reuse interval (test/refresh-lost-answer.test.ts covers the inside)
  assertErrorBody(t, await bodyCall('refresh', s.refreshToken), 401, 'REFRESH_TOKEN_REUSED');
  assertErrorBody(t, await bodyCall('refresh', newest), 401, 'REFRESH_TOKEN_INVALID');
});

t.test('a web cookie that was already rotated is REUSED as well', async (t) => {
  const { verifiedAccount, session, webCall, clock } = await setup(t);
  const s = await session(await verifiedAccount('web-reuse'), 'web');
  const rotated = await webCall('refresh', s.cookie, s.csrfToken ?? '');
  t.equal(rotated.statusCode, 200);
  const newest = refreshCookies(rotated)[0]?.value;
  const csrf = rotated.json().csrfToken as string;
  clock.advance(11); // past the reuse interval
  assertErrorBody(t, await webCall('refresh', s.cookie, s.csrfToken ?? ''), 401, 'REFRESH_TOKEN_REUSED');
  assertErrorBody(t, await webCall('refresh', newest, csrf), 401, 'REFRESH_TOKEN_INVALID');
});

t.test('logout with a rotated refresh token: 204, and the session is over for every holder', async (t) => {
  const { verifiedAccount, session, bodyCall, webCall } = await setup(t);
  const s = await session(await verifiedAccount('logout-rotated'), 'mobile');
  const rotated = await bodyCall('refresh', s.refreshToken);
  t.equal(rotated.statusCode, 200);
  const res = await bodyCall('logout', s.refreshToken);
  t.equal(res.statusCode, 204, 'the session ended, as asked');
  assertErrorBody(t, await bodyCall('refresh', rotated.json().refreshToken), 401, 'REFRESH_TOKEN_INVALID');

  const w = await session(await verifiedAccount('logout-rotated-web'), 'web');
  const next = await webCall('refresh', w.cookie, w.csrfToken ?? '');
  t.equal(next.statusCode, 200);
  t.equal((await webCall('logout', w.cookie, w.csrfToken ?? '')).statusCode, 204, 'web: the same');
  const newest = refreshCookies(next)[0]?.value;
  assertErrorBody(t, await webCall('refresh', newest, next.json().csrfToken ?? ''), 401, 'REFRESH_TOKEN_INVALID');
});

t.test('refresh and logout take Content-Type: application/json with an empty body', async (t) => {
  const { api, verifiedAccount, session } = await setup(t);
  const s = await session(await verifiedAccount('empty-body'), 'mobile');
  const json = { 'content-type': 'application/json' };
  const empty = (path: 'refresh' | 'logout', headers: Record<string, string> = {}) =>
    api.post(`/api/auth/${path}`, { query: { client_type: 'mobile' }, headers: { ...json, ...headers }, rawBody: '' });
  assertErrorBody(t, await empty('refresh'), 401, 'REFRESH_TOKEN_INVALID');
  const out = await empty('logout', { authorization: `Bearer ${s.accessToken}` });
  t.equal(out.statusCode, 204, 'logout by access token, empty JSON body');
  const res = await api.post('/api/auth/users', { headers: json, rawBody: '' });
  assertErrorBody(t, res, 400, 'INVALID_INPUT');
  t.match(res.json<400>().message, /body is required/, 'an operation that needs a body says so');
});

t.test('refresh tokens expire after REFRESH_TOKEN_TTL_SECONDS', async (t) => {
  const ttl = 86400;
  const { verifiedAccount, session, signIn, bodyCall, clock } = await setup(t, {
    REFRESH_TOKEN_TTL_SECONDS: String(ttl),
  });
  const email = await verifiedAccount('ttl');
  const web = await signIn(email);
  t.equal(refreshCookies(web)[0]?.attributes.get('max-age'), String(ttl), 'the cookie Max-Age follows the TTL');
  const early = await session(email, 'mobile');
  const late = await session(email, 'mobile');
  clock.advance(ttl - 60);
  t.equal((await bodyCall('refresh', early.refreshToken)).statusCode, 200, 'a minute before expiry: 200');
  clock.advance(61);
  assertErrorBody(t, await bodyCall('refresh', late.refreshToken), 401, 'REFRESH_TOKEN_INVALID');
});

t.test('a refresh token is never accepted as a Bearer access token', async (t) => {
  const { verifiedAccount, session, current } = await setup(t);
  const s = await session(await verifiedAccount('bearer'), 'mobile');
  t.equal((await current(`Bearer ${s.accessToken}`)).statusCode, 200, 'control: the access token works');
  assertErrorBody(t, await current(`Bearer ${s.refreshToken}`), 401, 'AUTH_UNAUTHORIZED');
});

t.test('GET /api/auth/sessions/current', async (t) => {
  const { config, database, verifiedAccount, session, current } = await setup(t);
  const s = await session(await verifiedAccount('current'), 'mobile');

  t.test('a valid Bearer token: 200 {user} read from the database', async (t) => {
    const res = await current(`Bearer ${s.accessToken}`);
    t.equal(res.statusCode, 200);
    t.same(Object.keys(res.json()), ['user', 'aal', 'nextLevel']);
    t.same([res.json().aal, res.json().nextLevel], ['aal1', null], 'one factor, and no second one owed');
    t.same(res.json().user, s.user, 'the same user as in the session result');
  });

  t.test('no token: 401 UNAUTHORIZED', async (t) => {
    assertErrorBody(t, await current(), 401, 'UNAUTHORIZED');
  });

  t.test('an expired token of a real user: 401 AUTH_UNAUTHORIZED', async (t) => {
    const secret = await currentSigningKey(config, database.handle.db);
    const claims = decodeClaims(s.accessToken);
    const now = Math.floor(Date.now() / 1000);
    const live = forgeJwt(secret, accessClaims(now, { sub: s.user.id, email: s.user.email, sid: claims.sid }));
    t.equal((await current(`Bearer ${live}`)).statusCode, 200, 'control: the same claims, unexpired, pass');
    const expired = forgeJwt(
      secret,
      accessClaims(now - 3600, { sub: s.user.id, email: s.user.email, sid: claims.sid, exp: now - 2700 }),
    );
    assertErrorBody(t, await current(`Bearer ${expired}`), 401, 'AUTH_UNAUTHORIZED');
  });
});

t.test('web logout: 204, the cookie is cleared, and the session cannot refresh any more', async (t) => {
  const { verifiedAccount, session, webCall } = await setup(t);
  const s = await session(await verifiedAccount('logout-web'), 'web');

  assertErrorBody(t, await webCall('logout', s.cookie), 403, 'CSRF_INVALID');
  assertErrorBody(t, await webCall('logout', s.cookie, 'wrong'), 403, 'CSRF_INVALID');

  const res = await webCall('logout', s.cookie, s.csrfToken ?? '');
  t.equal(res.statusCode, 204, '204 with the CSRF header (the refusals above revoked nothing)');
  t.equal(res.body, '', 'no body');
  const cleared = refreshCookies(res);
  t.ok(cleared.length >= 1, 'refresh_token Set-Cookie lines');
  t.ok(
    cleared.every((c) => c.value === ''),
    'each of them empties the cookie',
  );
  const cookie = cleared.at(-1); // the current variant's line, after the others' expiries
  const expires = cookie?.attributes.get('expires');
  t.ok(
    cookie?.attributes.get('max-age') === '0' || (expires !== undefined && Date.parse(expires) < Date.now()),
    `it expires the cookie (${cookie?.line})`,
  );
  t.equal(cookie?.attributes.get('path'), '/api/auth', 'on the path it was set for');

  assertErrorBody(t, await webCall('refresh', s.cookie, s.csrfToken ?? ''), 401, 'REFRESH_TOKEN_INVALID');
});

t.test('mobile and desktop logout: 204, and the refresh token is dead', async (t) => {
  const { verifiedAccount, session, bodyCall } = await setup(t);
  const email = await verifiedAccount('logout-native');
  for (const client of ['mobile', 'desktop'] as const) {
    t.test(client, async (t) => {
      const s = await session(email, client);
      const keep = await session(email, client);
      const res = await bodyCall('logout', s.refreshToken, client);
      t.equal(res.statusCode, 204);
      t.equal(res.body, '', 'no body');
      assertErrorBody(t, await bodyCall('refresh', s.refreshToken, client), 401, 'REFRESH_TOKEN_INVALID');
      t.equal((await bodyCall('logout', s.refreshToken, client)).statusCode, 204, 'logging out again succeeds');
      t.equal((await bodyCall('refresh', keep.refreshToken, client)).statusCode, 200, 'another session lives on');
    });
  }
});

t.test('access-token claims', async (t) => {
  const { verifiedAccount, session, bodyCall } = await setup(t);
  const email = await verifiedAccount('claims');
  const s = await session(email, 'mobile');
  const claims = decodeClaims(s.accessToken);
  const now = Math.floor(Date.now() / 1000);
  t.equal(claims.sub, s.user.id, 'sub is the user id');
  t.equal(claims.email, email, 'email');
  t.equal(claims.role, 'user', "role 'user' for a normal account");
  t.ok(typeof claims.sid === 'string' && claims.sid.length > 0, 'sid names the session');
  t.equal(claims.token_use, 'access', "token_use 'access'");
  t.equal(claims.iss, TEST_ISSUER, 'iss: the public URL');
  t.equal(claims.aud, TOKEN_AUDIENCE, 'aud');
  t.type(claims.iat, 'number');
  t.type(claims.exp, 'number');
  t.equal((claims.exp as number) - (claims.iat as number), 900, 'exp - iat = 900');
  t.ok(Math.abs((claims.iat as number) - now) <= 60, 'iat is now');
  const header = JSON.parse(Buffer.from(s.accessToken.split('.')[0] as string, 'base64url').toString());
  t.equal(header.alg, 'ES256', 'signed with the ES256 key of a fresh deployment');
  t.match(header.kid, /^[A-Za-z0-9_-]{22}$/, 'the header names the key');
  t.match(claims.jti, /^[A-Za-z0-9_-]{22}$/, 'jti');

  const refreshed = await bodyCall('refresh', s.refreshToken);
  t.equal(refreshed.statusCode, 200);
  const after = decodeClaims(refreshed.json().accessToken);
  t.not(after.jti, claims.jti, 'every token has its own jti, even in the same second');
  t.equal(after.sid, claims.sid, 'a refresh keeps the session id');
  t.equal(after.sub, claims.sub, 'and the subject');
  const another = decodeClaims((await session(email, 'mobile')).accessToken);
  t.not(another.sid, claims.sid, 'another sign-in is another session');
});
