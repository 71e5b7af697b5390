/**
 * A password the mailbox's owner did not choose never survives the owner's next proof of the
 * mailbox (src/auth/unproven-password.ts), as a person would meet it: someone signs up with the
 * owner's address; the owner confirms it from the email (the link page's button, or a re-sent code
 * typed into another app), which proves the mailbox but not who chose the password; later the
 * owner signs in with an OpenID provider (a real one, on loopback) or an emailed code, or resets
 * the password. The other person's password, sessions and identities are then gone and the owner
 * is told by email. The one-device path (sign up, verify in the same client, sign in with the
 * password) keeps the password: the sign-up's binding, in a cookie for web clients or in the body
 * for the others (the project's SDK sends it by itself), proves it.
 */
import { createClient } from '@insforge/sdk';
import type { LightMyRequestResponse } from 'fastify';
import t, { type Test } from 'tap';
import { freePort } from '../scripts/lib/service-process.ts';
import { createClient as createTypedClient } from '../src/client/index.ts';
import { buildAuthTestApp, newEmail, PASSWORD, pause, QUIET_MS } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { followAuthorization } from './helpers/oauth-browser.ts';
import { SERVICE_CLIENT, startOidcProvider } from './helpers/oidc-provider.ts';

const ATTACKER_PASSWORD = 'the attacker chose this one';
const ATTACKER_IP = '198.51.100.66';
const OWNER_IP = '203.0.113.10';
const NOTICE = 'A password on your account was removed';
const APP = 'https://app.example.com';
const REDIRECT = `${APP}/auth/callback`;

const port = await freePort();
const base = `http://127.0.0.1:${port}`;
const idp = await startOidcProvider({
  clients: [{ ...SERVICE_CLIENT, redirectUris: [`${base}/api/auth/oauth/testidp/callback`] }],
});
t.teardown(() => idp.close());

const s = await buildAuthTestApp(t, {
  label: 'unproven',
  env: {
    PUBLIC_URL: base,
    COOKIE_SECURE: 'false',
    AUTH_REDIRECT_ALLOWLIST: `${APP}/auth/`,
    OAUTH_PROVIDERS: 'testidp',
    OAUTH_TESTIDP_CLIENT_ID: SERVICE_CLIENT.clientId,
    OAUTH_TESTIDP_CLIENT_SECRET: SERVICE_CLIENT.clientSecret,
    OAUTH_TESTIDP_ISSUER: idp.issuer,
  },
});
const { app, smtp } = s;
await app.listen({ port, host: '127.0.0.1' });
const db = s.database.handle.db;

const expectStatus = (res: LightMyRequestResponse, status: number, what: string) => {
  if (res.statusCode !== status) throw new Error(`${what}: expected ${status}, got ${res.statusCode} ${res.body}`);
  return res;
};
const post = (url: string, payload: Record<string, unknown>, headers: Record<string, string> = {}, ip = OWNER_IP) =>
  app.inject({ method: 'POST', url, payload, headers, remoteAddress: ip });
const signIn = (email: string, password: string) =>
  post('/api/auth/sessions?client_type=mobile', { email, password }, {}, ATTACKER_IP);
const bearer = (token: string) =>
  app.inject({ url: '/api/auth/sessions/current', headers: { authorization: `Bearer ${token}` } });
const notices = (email: string) => smtp.to(email).filter((m) => m.subject === NOTICE);

/** The other person signs up with the owner's address (a web client elsewhere: its cookie stays there). */
async function attackerSignsUp(email: string) {
  expectStatus(await post('/api/auth/users', { email, password: ATTACKER_PASSWORD }, {}, ATTACKER_IP), 202, 'sign-up');
  return smtp.waitFor(email, 1);
}

/** The owner opens the emailed link and presses the page's button (no cookie of the sign-up). */
async function ownerConfirmsByLink(email: string, n = 1, cookie?: string) {
  const mail = (await smtp.waitFor(email, n))[n - 1];
  expectStatus(await app.inject({ url: `/auth/verify-email?token=${mail?.token}` }), 200, 'link page');
  const res = await app.inject({
    method: 'POST',
    url: '/auth/verify-email',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...(cookie ? { cookie } : {}) },
    payload: `token=${mail?.token}`,
  });
  expectStatus(res, 200, 'confirm');
  return res;
}

/** The attacker's session with the password: it works while the password is unproven. */
async function attackerSession(email: string) {
  const res = expectStatus(await signIn(email, ATTACKER_PASSWORD), 200, 'attacker sign-in while unproven');
  return res.json() as { accessToken: string; refreshToken: string; user: { id: string } };
}

async function unprovenSince(email: string) {
  const row = await db
    .selectFrom('users')
    .select(['password_unproven_since', 'password_hash'])
    .where('email', '=', email)
    .executeTakeFirstOrThrow();
  return { unproven: row.password_unproven_since !== null, hasPassword: row.password_hash !== null };
}

/** Everything the attacker held is dead; the owner was told once. */
async function assertAttackerOut(t: Test, email: string, held: { accessToken: string; refreshToken: string }) {
  assertErrorBody(t, await signIn(email, ATTACKER_PASSWORD), 401, 'INVALID_CREDENTIALS');
  t.equal((await bearer(held.accessToken)).statusCode, 401, "the attacker's access token is refused");
  const refreshed = await post('/api/auth/refresh?client_type=mobile', { refreshToken: held.refreshToken });
  t.equal(refreshed.statusCode, 401, "the attacker's refresh token is dead");
  await smtp.waitFor(email, smtp.to(email).length - notices(email).length + 1, 5000).catch(() => []);
  await pause(QUIET_MS);
  t.equal(notices(email).length, 1, 'the owner is told in one email');
  t.match(notices(email)[0]?.text, /every session of the account was ended/);
  t.same(await unprovenSince(email), { unproven: false, hasPassword: false }, 'the account has no password now');
}

/** The owner signs in with the OpenID provider (InsForge's SDK, server mode; a scripted browser at the provider). */
async function ownerSignsInWithProvider(email: string) {
  const login = email.split('@')[0] ?? email;
  idp.accounts.set(login, { email, email_verified: true, name: 'Owner' });
  const client = createClient({ baseUrl: base, isServerMode: true, retryCount: 0 });
  const started = await client.auth.signInWithOAuth({
    provider: 'testidp',
    redirectTo: REDIRECT,
    skipBrowserRedirect: true,
  });
  if (started.error !== null || started.data.url === undefined) throw new Error(JSON.stringify(started.error));
  const { finalUrl } = await followAuthorization(started.data.url, {
    login,
    stopAt: (url) => url.origin === APP,
  });
  const code = finalUrl.searchParams.get('insforge_code');
  if (code === null) throw new Error(`no insforge_code: ${finalUrl.href}`);
  const exchanged = await client.auth.exchangeOAuthCode(code, String(started.data.codeVerifier));
  if (exchanged.error !== null || exchanged.data === null) throw new Error(JSON.stringify(exchanged.error));
  return exchanged.data;
}

t.test('HIGH: confirmed by the link page, then the owner signs in with an OpenID provider', async (t) => {
  const email = newEmail('hijack-oidc');
  await attackerSignsUp(email);
  const page = await ownerConfirmsByLink(email);
  t.match(page.body, /confirmed/, 'the page confirms the address');
  const held = await attackerSession(email);
  const owner = await ownerSignsInWithProvider(email);
  t.equal(owner.user.id, held.user.id, 'the provider links to the account with the address');
  t.same(owner.user.providers, ['email', 'testidp']);
  await assertAttackerOut(t, email, held);
  t.equal((await bearer(String(owner.accessToken))).statusCode, 200, "the owner's session works");
  const again = await ownerSignsInWithProvider(email);
  t.equal(again.user.id, owner.user.id, 'a later provider sign-in changes nothing');
  await pause(QUIET_MS);
  t.equal(notices(email).length, 1, 'and sends no second notice');
});

t.test('HIGH: a re-sent code typed in another app, then the owner signs in with an emailed code', async (t) => {
  const email = newEmail('hijack-code');
  await attackerSignsUp(email);
  s.clock.advance(61);
  expectStatus(await post('/api/auth/email/send-verification', { email }), 202, 'the owner asks for a new email');
  const resent = (await smtp.waitFor(email, 2))[1];
  expectStatus(await s.verifyElsewhere({ email, otp: resent?.code }), 200, 'the owner types the code');
  const held = await attackerSession(email);
  s.clock.advance(61);
  expectStatus(await post('/api/auth/email/send-otp', { email }), 202, 'sign-in code');
  const codeMail = (await smtp.waitFor(email, 3))[2];
  const owner = expectStatus(
    await post('/api/auth/sessions?client_type=mobile', { email, otp: codeMail?.code, method: 'otp' }),
    200,
    'the owner signs in with the code',
  );
  t.equal(owner.json().user.id, held.user.id);
  await assertAttackerOut(t, email, held);
  t.equal((await bearer(owner.json().accessToken)).statusCode, 200, "the owner's new session works");
});

t.test('a reset of an unproven password tells the owner and ends every session', async (t) => {
  const email = newEmail('hijack-reset');
  await attackerSignsUp(email);
  await ownerConfirmsByLink(email);
  const held = await attackerSession(email);
  s.clock.advance(61);
  expectStatus(await post('/api/auth/email/send-reset-password', { email }), 202, 'reset email');
  const reset = (await smtp.waitFor(email, 2))[1];
  const exchanged = expectStatus(
    await post('/api/auth/email/exchange-reset-password-token', { email, code: reset?.code }),
    200,
    'exchange',
  );
  const newPassword = 'the owner chose this one';
  expectStatus(
    await post('/api/auth/email/reset-password', { otp: exchanged.json().token, newPassword }),
    200,
    'reset',
  );
  assertErrorBody(t, await signIn(email, ATTACKER_PASSWORD), 401, 'INVALID_CREDENTIALS');
  t.equal((await bearer(held.accessToken)).statusCode, 401, "the attacker's session ended");
  t.same(await unprovenSince(email), { unproven: false, hasPassword: true }, "the owner's password is proven");
  await smtp.waitFor(email, 3);
  t.equal(notices(email).length, 1, 'the owner is told');
  t.match(notices(email)[0]?.text, /replaced by the one you chose/);
  expectStatus(await signIn(email, newPassword), 200, "the owner's password signs in");
});

t.test('one device, web: the sign-up cookie proves the password; code and provider sign-ins keep it', async (t) => {
  const email = newEmail('one-device-web');
  const signedUp = expectStatus(await post('/api/auth/users', { email, password: PASSWORD }), 202, 'sign-up');
  const cookie = [signedUp.headers['set-cookie']].flat().find((c) => c?.startsWith('sign_up_binding='));
  t.match(cookie, /^sign_up_binding=[A-Za-z0-9_-]{43}; Max-Age=\d+; Path=\/; HttpOnly; SameSite=Lax$/);
  t.match(signedUp.json().signUpBinding, /^[A-Za-z0-9_-]{43}$/, 'the answer carries the binding too');
  const mail = (await smtp.waitFor(email, 1))[0];
  const verified = await post(
    '/api/auth/email/verify',
    { email, otp: mail?.code },
    { cookie: String(cookie).split(';')[0] ?? '' },
  );
  expectStatus(verified, 200, 'verify in the same browser');
  t.ok(
    [verified.headers['set-cookie']].flat().some((c) => c?.startsWith('sign_up_binding=; Max-Age=0')),
    'the binding cookie is cleared once used',
  );
  t.same(await unprovenSince(email), { unproven: false, hasPassword: true }, 'the password is proven');
  expectStatus(await signIn(email, PASSWORD), 200, 'the password signs in');
  s.clock.advance(61);
  expectStatus(await post('/api/auth/email/send-otp', { email }), 202, 'sign-in code');
  const code = (await smtp.waitFor(email, 2))[1]?.code;
  expectStatus(await post('/api/auth/sessions?client_type=mobile', { email, otp: code, method: 'otp' }), 200, 'code');
  await ownerSignsInWithProvider(email);
  expectStatus(await signIn(email, PASSWORD), 200, 'the password still signs in');
  await pause(QUIET_MS);
  t.equal(notices(email).length, 0, 'no notice');
});

t.test('one device, the link page in the browser that signed up: the cookie proves the password', async (t) => {
  const email = newEmail('one-device-link');
  const signedUp = expectStatus(await post('/api/auth/users', { email, password: PASSWORD }), 202, 'sign-up');
  const cookie = [signedUp.headers['set-cookie']].flat().find((c) => c?.startsWith('sign_up_binding='));
  const confirmed = await ownerConfirmsByLink(email, 1, String(cookie).split(';')[0]);
  t.same(await unprovenSince(email), { unproven: false, hasPassword: true });
  t.match(
    [confirmed.headers['set-cookie']].flat().find((c) => c?.startsWith('sign_up_binding=')),
    /^sign_up_binding=; Max-Age=0; Path=\/; HttpOnly; SameSite=Lax$/,
    'the page clears the cookie once the address is confirmed',
  );
});

t.test('mobile: the binding in the body proves the password; another sign-up binding does not', async (t) => {
  const email = newEmail('one-device-mobile');
  const other = newEmail('other');
  const mine = expectStatus(await post('/api/auth/users?client_type=mobile', { email, password: PASSWORD }), 202, 'a');
  t.notOk(mine.headers['set-cookie'], 'no cookie for mobile clients');
  const theirs = expectStatus(await post('/api/auth/users', { email: other, password: PASSWORD }), 202, 'b');
  const code = (await smtp.waitFor(email, 1))[0]?.code;
  const otherCode = (await smtp.waitFor(other, 1))[0]?.code;
  expectStatus(
    await s.verifyElsewhere({ email: other, otp: otherCode, signUpBinding: mine.json().signUpBinding }),
    200,
    'a binding of another sign-up',
  );
  t.same(await unprovenSince(other), { unproven: true, hasPassword: true }, 'proves nothing');
  t.not(theirs.json().signUpBinding, mine.json().signUpBinding);
  expectStatus(await s.verifyElsewhere({ email, otp: code, signUpBinding: mine.json().signUpBinding }), 200, 'own');
  t.same(await unprovenSince(email), { unproven: false, hasPassword: true }, 'its own binding proves it');
});

t.test("the project's SDK keeps the binding and sends it with the verification", async (t) => {
  const email = newEmail('typed-sdk');
  const api = createTypedClient({ baseUrl: base, clientType: 'mobile' });
  const signedUp = await api.POST('/api/auth/users', {
    params: { query: { client_type: 'mobile' } },
    body: { email, password: PASSWORD },
  });
  t.equal(signedUp.response.status, 202);
  const code = String((await smtp.waitFor(email, 1))[0]?.code);
  const verified = await api.POST('/api/auth/email/verify', {
    params: { query: { client_type: 'mobile' } },
    body: { email, otp: code },
  });
  t.equal(verified.response.status, 200);
  t.same(await unprovenSince(email), { unproven: false, hasPassword: true }, 'proven without the caller doing more');
});

t.test('the sign-up answer is the same for new, unverified and verified addresses', async (t) => {
  const verified = newEmail('known');
  expectStatus(await s.signUp(verified), 202, 'sign-up');
  expectStatus(await s.verify({ email: verified, otp: (await smtp.waitFor(verified, 1))[0]?.code }), 200, 'verify');
  const shapes = [];
  for (const email of [newEmail('unknown'), verified]) {
    s.clock.advance(61);
    const res = expectStatus(
      await post('/api/auth/users', { email, password: ATTACKER_PASSWORD }, {}, ATTACKER_IP),
      202,
      'probe',
    );
    const body = res.json();
    shapes.push({ keys: Object.keys(body).sort(), binding: /^[A-Za-z0-9_-]{43}$/.test(body.signUpBinding) });
    shapes.push({ cookie: [res.headers['set-cookie']].flat().some((c) => c?.startsWith('sign_up_binding=')) });
  }
  t.same(shapes[0], shapes[2]);
  t.same(shapes[1], shapes[3]);
});

t.test('a removed password never comes back through a later verification email', async (t) => {
  const email = newEmail('resurrect');
  await attackerSignsUp(email);
  await ownerConfirmsByLink(email);
  const held = await attackerSession(email);
  s.clock.advance(61);
  expectStatus(await post('/api/auth/email/send-otp', { email }), 202, 'sign-in code');
  const code = (await smtp.waitFor(email, 2))[1]?.code;
  expectStatus(await post('/api/auth/sessions?client_type=mobile', { email, otp: code, method: 'otp' }), 200, 'code');
  await assertAttackerOut(t, email, held);
  // The other person asks for a verification email; the owner, now without a password, uses its link.
  s.clock.advance(61);
  expectStatus(await post('/api/auth/email/send-verification', { email }, {}, ATTACKER_IP), 202, 'a re-send');
  const mails = await smtp.waitFor(email, 4);
  const resent = mails.find((m, i) => i >= 2 && m.subject !== NOTICE);
  t.ok(resent?.token, 'a verification email for the account without a password');
  expectStatus(await s.verifyElsewhere({ otp: resent?.token }), 200, 'the owner follows it');
  assertErrorBody(t, await signIn(email, ATTACKER_PASSWORD), 401, 'INVALID_CREDENTIALS');
  t.same(await unprovenSince(email), { unproven: false, hasPassword: false }, 'still no password');
});

t.test('with Secure cookies the binding is a __Host- cookie: a planted one proves nothing', async (t) => {
  const secure = await buildAuthTestApp(t, { label: 'unproven-secure', env: { COOKIE_SECURE: 'true' } });
  const email = newEmail('planted');
  const signedUp = await secure.app.inject({
    method: 'POST',
    url: '/api/auth/users',
    payload: { email, password: ATTACKER_PASSWORD },
    remoteAddress: ATTACKER_IP,
  });
  expectStatus(signedUp, 202, 'sign-up');
  const cookie = [signedUp.headers['set-cookie']].flat().find((c) => c?.includes('sign_up_binding='));
  t.match(cookie, /^__Host-sign_up_binding=[A-Za-z0-9_-]{43}; Max-Age=\d+; Path=\/; HttpOnly; Secure; SameSite=Lax$/);
  t.notMatch(cookie, /Domain=/i, 'host-only');
  const binding = signedUp.json().signUpBinding;
  const mail = (await secure.smtp.waitFor(email, 1))[0];
  // A sibling host's cookie (no prefix) carrying the attacker's binding, sent with the owner's confirmation.
  const res = await secure.app.inject({
    method: 'POST',
    url: '/auth/verify-email',
    headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: `sign_up_binding=${binding}` },
    payload: `token=${mail?.token}`,
  });
  expectStatus(res, 200, 'confirm');
  const row = await secure.database.handle.db
    .selectFrom('users')
    .select('password_unproven_since')
    .where('email', '=', email)
    .executeTakeFirstOrThrow();
  t.not(row.password_unproven_since, null, 'the password is unproven');
});

t.test("the other person's known devices are known no more once the password is removed", async (t) => {
  const email = newEmail('devices');
  await attackerSignsUp(email);
  await ownerConfirmsByLink(email);
  const held = (await attackerSession(email)) as { deviceToken?: string };
  t.match(held.deviceToken, /\S{20,}/, 'a device token for the session');
  s.clock.advance(61);
  expectStatus(await post('/api/auth/email/send-otp', { email }), 202, 'sign-in code');
  const code = (await smtp.waitFor(email, 2))[1]?.code;
  expectStatus(await post('/api/auth/sessions?client_type=mobile', { email, otp: code, method: 'otp' }), 200, 'code');
  await smtp.waitFor(email, 3);
  // Inside the address's 60 s gap, only a known device of the account gets an email at once.
  const before = smtp.to(email).length;
  expectStatus(
    await post('/api/auth/email/send-otp', { email }, { 'x-device-token': String(held.deviceToken) }, ATTACKER_IP),
    202,
    'send-otp with the old device token',
  );
  await pause(QUIET_MS);
  t.equal(smtp.to(email).length, before, 'no email: the device is not known to the account any more');
});

t.test(
  'without required verification: a code sign-in on the unverified account forgets the sign-up device',
  async (t) => {
    const open = await buildAuthTestApp(t, {
      label: 'unverified-devices',
      env: { REQUIRE_EMAIL_VERIFICATION: 'false' },
    });
    const email = newEmail('unverified-devices');
    const send = (url: string, payload: Record<string, unknown>, headers: Record<string, string> = {}) =>
      open.app.inject({ method: 'POST', url, payload, headers, remoteAddress: ATTACKER_IP });
    // The other person signs up (a session at once, and a device token) with the owner's address.
    const signedUp = expectStatus(
      await send('/api/auth/users?client_type=mobile', { email, password: ATTACKER_PASSWORD }),
      201,
      'sign-up opens a session',
    );
    const deviceToken = String((signedUp.json() as { deviceToken?: string }).deviceToken);
    t.match(deviceToken, /\S{20,}/, 'a device token for the session');
    // The owner signs in with a code: the password goes, and so does every device it signed in.
    expectStatus(await send('/api/auth/email/send-otp', { email }), 202, 'sign-in code');
    const code = (await open.smtp.waitFor(email, 1))[0]?.code;
    expectStatus(await send('/api/auth/sessions?client_type=mobile', { email, otp: code, method: 'otp' }), 200, 'code');
    const before = open.smtp.to(email).length;
    // Inside the address's 60 s gap, only a known device of the account gets an email at once.
    expectStatus(
      await send('/api/auth/email/send-otp', { email }, { 'x-device-token': deviceToken }),
      202,
      'send-otp with the old device token',
    );
    await pause(QUIET_MS);
    t.equal(open.smtp.to(email).length, before, 'no email: the device is not known to the account any more');
  },
);
