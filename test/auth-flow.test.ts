// End-to-end journeys of the accounts feature: sign up, read the email, verify, hold a session, sign in.
// Edge cases of each step live in auth-verification, auth-sessions, auth-accounts and auth-rate-limit.
import type { LightMyRequestResponse } from 'fastify';
import t, { type Test } from 'tap';
import type { Env } from '../src/config.ts';
import {
  buildAuthTestApp,
  type ClientType,
  newEmail,
  PASSWORD,
  pause,
  refreshCookies,
  withoutBinding,
} from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import type { ReceivedMail } from './helpers/smtp.ts';

const DEFAULT_VERIFY_URL = 'http://127.0.0.1:7130/auth/verify-email';
const REFRESH_TTL = 2592000;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

async function setup(t: Test, env: Env = {}) {
  const built = await buildAuthTestApp(t, { env, label: 'flow' });
  const { app, signUp, firstMail } = built;

  /** Signs up with verification required and returns the one verification email. */
  async function signUpAndReadMail(email: string, extra: Record<string, unknown> = {}): Promise<ReceivedMail> {
    const res = await signUp(email, extra);
    t.equal(res.statusCode, 202, `sign-up of ${email} is accepted`);
    return firstMail(email);
  }

  // Unlike the shared verify, the client type is only sent when named, so that the default is exercised.
  const verify = (payload: Record<string, unknown>, client?: ClientType) =>
    app.inject({
      method: 'POST',
      url: `/api/auth/email/verify${client ? `?client_type=${client}` : ''}`,
      payload,
    });

  const signIn = (email: string, password: string, client?: ClientType) =>
    app.inject({
      method: 'POST',
      url: `/api/auth/sessions${client ? `?client_type=${client}` : ''}`,
      payload: { email, password },
    });

  return { ...built, signUpAndReadMail, verify, signIn };
}

interface SessionExpectation {
  status: number;
  client: ClientType;
  email: string;
  emailVerified: boolean;
  name?: string | null;
  redirectTo?: string;
}

interface SessionBody {
  user: Record<string, unknown> & { id: string; email: string };
  accessToken: string;
  csrfToken: string | null;
  refreshToken: string | null;
  redirectTo?: string;
}

function assertUser(t: Test, user: Record<string, unknown>, expected: SessionExpectation) {
  t.same(
    Object.keys(user).sort(),
    ['createdAt', 'email', 'emailVerified', 'id', 'metadata', 'profile', 'providers', 'updatedAt'],
    'user has exactly the User properties',
  );
  t.match(user.id, UUID, 'user.id is a UUID');
  t.equal(user.email, expected.email.toLowerCase(), 'user.email is the address in lower case');
  t.same(user.profile, { name: expected.name ?? null, avatar_url: null }, 'user.profile');
  t.ok(
    typeof user.metadata === 'object' && user.metadata !== null && !Array.isArray(user.metadata),
    'metadata is an object',
  );
  t.equal(user.emailVerified, expected.emailVerified, `emailVerified is ${expected.emailVerified}`);
  t.ok(Array.isArray(user.providers) && (user.providers as unknown[]).includes('email'), "providers contains 'email'");
  for (const key of ['createdAt', 'updatedAt'] as const) {
    const value = user[key];
    t.ok(
      typeof value === 'string' && /^\d{4}-\d\d-\d\dT\d\d:\d\d/.test(value) && !Number.isNaN(Date.parse(value)),
      `${key} is an RFC 3339 date-time`,
    );
  }
}

/** Checks a SessionResult answer for the given client type and returns its body and (web) cookie value. */
function assertSession(t: Test, res: LightMyRequestResponse, expected: SessionExpectation) {
  t.equal(res.statusCode, expected.status, `status ${expected.status}`);
  t.match(String(res.headers['content-type']), /^application\/json/, 'JSON answer');
  const body = JSON.parse(res.body) as SessionBody;
  const keys = ['accessToken', 'csrfToken', 'refreshToken', 'user'];
  // Mobile and desktop clients get their device token in the body (web clients, a cookie).
  if (expected.client !== 'web') keys.push('deviceToken');
  if (expected.redirectTo !== undefined) keys.push('redirectTo');
  t.same(Object.keys(body).sort(), keys.sort(), 'exactly the SessionResult properties for this configuration');
  if (expected.redirectTo !== undefined) t.equal(body.redirectTo, expected.redirectTo, 'redirectTo');
  assertUser(t, body.user, expected);
  t.match(body.accessToken, /^[\w-]+\.[\w-]+\.[\w-]+$/, 'accessToken is a JWT');
  const cookies = refreshCookies(res);
  if (expected.client === 'web') {
    t.ok(typeof body.csrfToken === 'string' && body.csrfToken.length > 0, 'web: csrfToken is a non-empty string');
    t.equal(body.refreshToken, null, 'web: refreshToken is null');
    // One line sets the cookie; the others expire the variants other settings would have made.
    t.equal(cookies.filter((c) => c.value !== '').length, 1, 'web: one refresh_token cookie is set');
    t.ok(
      cookies.slice(1).every((c) => c.value === '' && c.attributes.get('max-age') === '0'),
      'the other lines only expire variants',
    );
    const cookie = cookies[0];
    if (cookie === undefined) return { body, cookie: undefined };
    t.ok(cookie.value.length > 0, 'the cookie carries a value');
    t.equal(cookie.attributes.get('max-age'), String(REFRESH_TTL), 'Max-Age is REFRESH_TOKEN_TTL_SECONDS');
    t.equal(cookie.attributes.get('path'), '/api/auth', 'Path=/api/auth');
    t.equal(cookie.attributes.get('httponly'), '', 'HttpOnly');
    t.equal(cookie.attributes.get('secure'), '', 'Secure');
    t.equal(cookie.attributes.get('samesite'), 'Lax', 'SameSite=Lax');
    const extra = [...cookie.attributes.keys()].filter(
      (name) => !['max-age', 'path', 'httponly', 'secure', 'samesite', 'expires'].includes(name),
    );
    t.same(extra, [], `no other cookie attributes (${cookie.line})`);
    t.notOk(res.body.includes(cookie.value), 'the refresh token never appears in the body');
    return { body, cookie: cookie.value };
  }
  t.ok(
    typeof body.refreshToken === 'string' && body.refreshToken.length > 0,
    `${expected.client}: refreshToken is a string`,
  );
  t.equal(body.csrfToken, null, `${expected.client}: csrfToken is null`);
  t.equal(cookies.length, 0, `${expected.client}: no refresh_token cookie`);
  return { body, cookie: undefined };
}

t.test('sign-up with verification required answers 202 and mails one code and one link', async (t) => {
  const { signUp, smtp } = await setup(t);
  const email = newEmail('ada');
  const res = await signUp(email, { name: 'Ada Lovelace' });
  t.equal(res.statusCode, 202);
  t.same(
    JSON.parse(withoutBinding(res.body)),
    { requireEmailVerification: true, accessToken: null, signUpBinding: '(random)' },
    "body is exactly {requireEmailVerification: true, accessToken: null, signUpBinding} (the sign-up's binding)",
  );
  t.same(refreshCookies(res), [], 'no session cookie before verification');
  const [mail] = await smtp.waitFor(email, 1);
  await pause(500);
  t.equal(smtp.to(email).length, 1, 'exactly one email to the address');
  t.match(mail?.code, /^\d{6}$/, 'the plain text carries a 6-digit code');
  t.match(mail?.token, /^[0-9a-f]{64}$/, 'the link carries a 64-character lowercase hex token');
  t.equal(mail?.link, `${DEFAULT_VERIFY_URL}?token=${mail?.token}`, 'link is PUBLIC_URL/auth/verify-email?token=…');
});

t.test('the verification link follows EMAIL_VERIFY_URL, or PUBLIC_URL when only that is set', async (t) => {
  t.test('EMAIL_VERIFY_URL', async (t) => {
    const { signUpAndReadMail } = await setup(t, {
      PUBLIC_URL: 'https://api.example.com',
      EMAIL_VERIFY_URL: 'https://app.example.com/verify',
    });
    const mail = await signUpAndReadMail(newEmail('link'));
    t.match(mail.token, /^[0-9a-f]{64}$/);
    t.equal(mail.link, `https://app.example.com/verify?token=${mail.token}`);
  });
  t.test('EMAIL_VERIFY_URL with a query string of its own', async (t) => {
    const { signUpAndReadMail } = await setup(t, { EMAIL_VERIFY_URL: 'https://app.example.com/verify?lang=en' });
    const mail = await signUpAndReadMail(newEmail('link'));
    t.match(mail.token, /^[0-9a-f]{64}$/);
    t.equal(mail.link, `https://app.example.com/verify?lang=en&token=${mail.token}`);
  });
  t.test('PUBLIC_URL', async (t) => {
    const { signUpAndReadMail } = await setup(t, { PUBLIC_URL: 'https://accounts.example.com' });
    const mail = await signUpAndReadMail(newEmail('link'));
    t.match(mail.token, /^[0-9a-f]{64}$/);
    t.equal(mail.link, `https://accounts.example.com/auth/verify-email?token=${mail.token}`);
  });
});

t.test('verifying the code opens a web session whose access token reads the verified user', async (t) => {
  const { signUpAndReadMail, verify, current } = await setup(t);
  const email = newEmail('web');
  const mail = await signUpAndReadMail(email, { name: 'Grace Hopper' });
  const res = await verify({ otp: mail.code, email });
  const { body } = assertSession(t, res, {
    status: 200,
    client: 'web',
    email,
    emailVerified: true,
    name: 'Grace Hopper',
  });
  const me = await current(body.accessToken);
  t.equal(me.statusCode, 200, 'GET /api/auth/sessions/current answers 200');
  const meBody = me.json();
  t.same(Object.keys(meBody), ['user', 'aal', 'nextLevel'], 'the body is {user, aal, nextLevel}');
  assertUser(t, meBody.user, { status: 200, client: 'web', email, emailVerified: true, name: 'Grace Hopper' });
  t.equal(meBody.user.id, body.user.id, 'the same user');
});

t.test('mobile and desktop clients get the refresh token in the body and no cookie', async (t) => {
  const { signUpAndReadMail, verify, current } = await setup(t);
  for (const client of ['mobile', 'desktop'] as const) {
    t.test(`${client}, verified by code`, async (t) => {
      const email = newEmail(client);
      const mail = await signUpAndReadMail(email);
      const res = await verify({ otp: mail.code, email }, client);
      const { body } = assertSession(t, res, { status: 200, client, email, emailVerified: true });
      t.equal((await current(body.accessToken)).statusCode, 200, 'the access token works');
    });
    t.test(`${client}, verified by link token`, async (t) => {
      const email = newEmail(`${client}-link`);
      const mail = await signUpAndReadMail(email);
      const res = await verify({ otp: mail.token }, client);
      assertSession(t, res, { status: 200, client, email, emailVerified: true });
    });
  }
  t.test('web is the default and can be named explicitly', async (t) => {
    const email = newEmail('explicit-web');
    const mail = await signUpAndReadMail(email);
    const res = await verify({ otp: mail.token }, 'web');
    assertSession(t, res, { status: 200, client: 'web', email, emailVerified: true });
  });
});

t.test('redirectTo is AUTH_REDIRECT_URL when it is set', async (t) => {
  const redirectTo = 'https://app.example.com/welcome';
  const { signUpAndReadMail, verify, signIn } = await setup(t, { AUTH_REDIRECT_URL: redirectTo });
  const email = newEmail('redirect');
  const mail = await signUpAndReadMail(email);
  assertSession(t, await verify({ otp: mail.code, email }), {
    status: 200,
    client: 'web',
    email,
    emailVerified: true,
    redirectTo,
  });
  assertSession(t, await signIn(email, PASSWORD, 'mobile'), {
    status: 200,
    client: 'mobile',
    email,
    emailVerified: true,
    redirectTo,
  });
});

t.test('without AUTH_REDIRECT_URL there is no redirectTo', async (t) => {
  const { signUpAndReadMail, verify, signIn } = await setup(t);
  const email = newEmail('no-redirect');
  const mail = await signUpAndReadMail(email);
  const verified = assertSession(t, await verify({ otp: mail.code, email }), {
    status: 200,
    client: 'web',
    email,
    emailVerified: true,
  });
  t.notOk('redirectTo' in verified.body, 'verify: no redirectTo key');
  const signedIn = assertSession(t, await signIn(email, PASSWORD), {
    status: 200,
    client: 'web',
    email,
    emailVerified: true,
  });
  t.notOk('redirectTo' in signedIn.body, 'sign-in: no redirectTo key');
});

t.test('with REQUIRE_EMAIL_VERIFICATION=false sign-up answers 201 with a session at once', async (t) => {
  const { signUp, signIn, current } = await setup(t, { REQUIRE_EMAIL_VERIFICATION: 'false' });

  t.test('web', async (t) => {
    const email = newEmail('open-web');
    const res = await signUp(email, { name: 'Ada' });
    const { body } = assertSession(t, res, { status: 201, client: 'web', email, emailVerified: false, name: 'Ada' });
    const me = await current(body.accessToken);
    t.equal(me.statusCode, 200, 'the access token works');
    t.equal(me.json().user.id, body.user.id);
  });

  t.test('mobile', async (t) => {
    const email = newEmail('open-mobile');
    assertSession(t, await signUp(email, {}, '?client_type=mobile'), {
      status: 201,
      client: 'mobile',
      email,
      emailVerified: false,
    });
  });

  t.test('an unverified account may sign in, and a second sign-up of its address is 409', async (t) => {
    const email = newEmail('open-again');
    t.equal((await signUp(email)).statusCode, 201);
    assertSession(t, await signIn(email, PASSWORD, 'desktop'), {
      status: 200,
      client: 'desktop',
      email,
      emailVerified: false,
    });
    assertErrorBody(t, await signUp(email.toUpperCase()), 409, 'USER_ALREADY_EXISTS');
  });
});

t.test('once verified, sign-in opens a session for each client type, with the address in any case', async (t) => {
  const { signUpAndReadMail, verify, signIn, current } = await setup(t);
  const email = newEmail('signin');
  const mail = await signUpAndReadMail(email);
  t.equal((await verify({ otp: mail.code, email })).statusCode, 200, 'verified');
  for (const client of ['web', 'mobile', 'desktop'] as const) {
    const { body } = assertSession(t, await signIn(email, PASSWORD, client), {
      status: 200,
      client,
      email,
      emailVerified: true,
    });
    t.equal((await current(body.accessToken)).statusCode, 200, `${client}: the access token works`);
  }
  assertSession(t, await signIn(email.toUpperCase(), PASSWORD), {
    status: 200,
    client: 'web',
    email,
    emailVerified: true,
  });
});

t.test('GET /auth/verify-email shows a page that posts the token, and does not consume it', async (t) => {
  const { app, signUpAndReadMail, verify } = await setup(t);
  const email = newEmail('page');
  const mail = await signUpAndReadMail(email);
  for (const attempt of [1, 2]) {
    const page = await app.inject({ url: `/auth/verify-email?token=${mail.token}` });
    t.equal(page.statusCode, 200, `request ${attempt}: 200`);
    t.match(String(page.headers['content-type']), /^text\/html/, `request ${attempt}: text/html`);
    t.match(page.body, /<(form|button)\b/i, 'the page has a form or a button');
    t.match(page.body, /<form method="post" action="\/auth\/verify-email">/, 'posted back to the page');
  }
  const res = await verify({ otp: mail.token });
  assertSession(t, res, { status: 200, client: 'web', email, emailVerified: true });
});

t.test('GET /auth/verify-email never reflects a hostile token as markup', async (t) => {
  const { app } = await setup(t);
  const hostile = '<script>alert(1)</script>';
  const page = await app.inject({ url: `/auth/verify-email?token=${encodeURIComponent(hostile)}` });
  t.ok(page.statusCode < 500, `no server error (got ${page.statusCode})`);
  t.notOk(page.body.includes(hostile), 'the script tag is not echoed');
});
