// Second factors (TOTP and recovery codes) and the assurance level the service enforces: every
// first-factor way in opens an aal1 session for an account with a verified factor, which may do
// nothing but the second step until it proves one. TOTP codes come from Debian's oathtool, an
// implementation independent of the server's.
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createClient } from '@insforge/sdk';
import t, { type Test } from 'tap';
import { freePort } from '../scripts/lib/service-process.ts';
import { ADMIN_PASSWORD } from './helpers/accounts.ts';
import { buildAuthTestApp, decodeClaims, newEmail, PASSWORD } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { followAuthorization } from './helpers/oauth-browser.ts';
import { SERVICE_CLIENT, startOidcProvider } from './helpers/oidc-provider.ts';
import { RealtimeClients } from './helpers/realtime-client.ts';
import { accessTokenFor } from './helpers/tokens.ts';

const APP = 'https://app.example.com';
const ADMIN = newEmail('mfa-admin');
const REDIRECT = `${APP}/auth/callback`;
const port = await freePort();
const base = `http://127.0.0.1:${port}`;

const idp = await startOidcProvider({
  clients: [{ ...SERVICE_CLIENT, redirectUris: [`${base}/api/auth/oauth/testidp/callback`] }],
});
t.teardown(() => idp.close());

const s = await buildAuthTestApp(t, {
  label: 'mfa',
  env: {
    PUBLIC_URL: base,
    COOKIE_SECURE: 'false',
    AUTH_REDIRECT_ALLOWLIST: `${APP}/auth/`,
    OAUTH_PROVIDERS: 'testidp',
    OAUTH_TESTIDP_CLIENT_ID: SERVICE_CLIENT.clientId,
    OAUTH_TESTIDP_CLIENT_SECRET: SERVICE_CLIENT.clientSecret,
    OAUTH_TESTIDP_ISSUER: idp.issuer,
    MFA_ISSUER: 'Example Co',
    ADMIN_EMAIL: ADMIN,
    ADMIN_PASSWORD,
  },
});
const { app, clock } = s;
await app.listen({ port, host: '127.0.0.1' });

/** The TOTP code of a base32 secret at the service's clock (oathtool, RFC 6238 defaults). */
function totp(secret: string, at = clock.now()): string {
  return execFileSync('oathtool', ['--totp', '-b', '--now', `@${Math.floor(at.getTime() / 1000)}`, secret], {
    encoding: 'utf8',
  }).trim();
}

/**
 * The first email to `email` after the first `after` ones that carries a code or a link: the
 * notices about second factors are sent in the background and may arrive in between.
 */
async function mailWithCode(email: string, after: number) {
  for (let n = after + 1; n <= after + 4; n++) {
    const mail = await s.nthMail(email, n);
    if (mail.code !== undefined || mail.token !== undefined) return mail;
  }
  throw new Error(`no email with a code for ${email}`);
}

/** The subjects of the emails to `email` about its second factors, once `count` have arrived. */
async function factorNotices(email: string, count: number): Promise<string[]> {
  for (let i = 0; i < 100; i++) {
    const notices = s.smtp
      .to(email)
      .filter((m) => /second factors|recovery code was used/.test(m.subject))
      .map((m) => m.subject);
    if (notices.length >= count) return notices;
    await new Promise((r) => setTimeout(r, 20));
  }
  return [];
}

/** The next 30-second step: a code of a step the factor has used already is refused. */
const nextStep = () => clock.advance(30);

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const get = (url: string, token: string) => app.inject({ method: 'GET', url, headers: bearer(token) });
const post = (url: string, token: string | undefined, payload?: object) =>
  app.inject({ method: 'POST', url, headers: token === undefined ? {} : bearer(token), payload: payload ?? {} });
const mfaVerify = (token: string, payload: object) => post('/api/auth/mfa/verify?client_type=mobile', token, payload);

interface Enrolled {
  email: string;
  factorId: string;
  secret: string;
  recoveryCodes: string[];
  /** An aal2 session's access token. */
  token: string;
}

/** A session (access token) from a password sign-in. */
async function passwordSignIn(email: string): Promise<string> {
  const res = await post('/api/auth/sessions?client_type=mobile', undefined, { email, password: PASSWORD });
  t.equal(res.statusCode, 200, `password sign-in of ${email}`);
  return res.json().accessToken as string;
}

/** A verified account with a verified TOTP factor (enrolled from a password session). */
async function enrolledAccount(label: string, email?: string): Promise<Enrolled> {
  const address = email ?? (await s.verifiedAccount(label));
  const first = await passwordSignIn(address);
  const created = await post('/api/auth/factors', first, { type: 'totp', friendlyName: 'Phone' });
  if (created.statusCode !== 201) throw new Error(`enroll: ${created.statusCode} ${created.body}`);
  const { id, totp: secrets } = created.json() as { id: string; totp: { secret: string } };
  const verified = await mfaVerify(first, { factorId: id, code: totp(secrets.secret) });
  if (verified.statusCode !== 200) throw new Error(`verify: ${verified.statusCode} ${verified.body}`);
  const body = verified.json() as { accessToken: string; recoveryCodes: string[] };
  return {
    email: address,
    factorId: id,
    secret: secrets.secret,
    recoveryCodes: body.recoveryCodes,
    token: body.accessToken,
  };
}

/**
 * What an aal1 session of an account with a factor may and may not do: the claims, the current
 * session, the factors, a protected operation, the socket handshake.
 */
async function assertOwesSecondStep(t: Test, token: string, way: string) {
  const claims = decodeClaims(token);
  t.equal(claims.aal, 'aal1', `${way}: the token is aal1`);
  t.equal(claims.next_aal, 'aal2', `${way}: and owes the second step`);
  const current = await get('/api/auth/sessions/current', token);
  t.equal(current.statusCode, 200, `${way}: the current session answers ${current.body}`);
  t.same({ aal: current.json().aal, nextLevel: current.json().nextLevel }, { aal: 'aal1', nextLevel: 'aal2' });
  t.equal((await get('/api/auth/factors', token)).statusCode, 200, `${way}: the factors are listed`);
  assertErrorBody(t, await get(`/api/auth/profiles/${claims.sub}`, token), 403, 'MFA_REQUIRED');
  assertErrorBody(t, await get('/api/realtime/permissions', token), 403, 'MFA_REQUIRED');
  assertErrorBody(t, await post('/api/auth/factors', token, { type: 'totp' }), 403, 'MFA_REQUIRED');
  const clients = new RealtimeClients(t, base);
  const refused = await clients.refusal(token);
  t.equal(refused.data?.code, 'MFA_REQUIRED', `${way}: the socket handshake is refused`);
  t.same(clients.violations(), []);
}

/** The second step with a TOTP code and with a recovery code, each from a fresh `signIn()`. */
async function assertSecondStepRaises(t: Test, account: Enrolled, signIn: () => Promise<string>, way: string) {
  const first = await signIn();
  await assertOwesSecondStep(t, first, way);
  nextStep();
  const stepped = await mfaVerify(first, { factorId: account.factorId, code: totp(account.secret) });
  t.equal(stepped.statusCode, 200, `${way}: a TOTP code raises the session`);
  const claims = decodeClaims(stepped.json().accessToken);
  t.equal(claims.aal, 'aal2');
  t.equal(claims.next_aal, undefined);
  t.same((claims.amr as { method: string }[]).map((m) => m.method).slice(-1), ['totp'], `${way}: amr ends with totp`);
  t.equal((await get(`/api/auth/profiles/${claims.sub}`, stepped.json().accessToken)).statusCode, 200);
  assertErrorBody(t, await get('/api/auth/sessions/current', first), 401, 'SESSION_REVOKED');

  const again = await signIn();
  await assertOwesSecondStep(t, again, `${way} (again)`);
  const code = account.recoveryCodes.shift() as string;
  const recovered = await mfaVerify(again, { recoveryCode: code });
  t.equal(recovered.statusCode, 200, `${way}: a recovery code raises the session`);
  t.equal(decodeClaims(recovered.json().accessToken).aal, 'aal2');
  t.same((decodeClaims(recovered.json().accessToken).amr as { method: string }[]).map((m) => m.method).slice(-1), [
    'recovery_code',
  ]);
}

t.test('enrollment: a secret, its URI and QR code; the first code verifies it and brings recovery codes', async (t) => {
  const email = await s.verifiedAccount('enroll');
  const token = await passwordSignIn(email);
  t.equal(decodeClaims(token).aal, 'aal1');
  t.equal(decodeClaims(token).next_aal, undefined, 'an account without a factor owes nothing');
  const created = await post('/api/auth/factors', token, { type: 'totp', friendlyName: 'Phone' });
  t.equal(created.statusCode, 201);
  const factor = created.json();
  t.match(factor.totp.secret, /^[A-Z2-7]{32}$/, '160 bits, base32');
  const uri = new URL(factor.totp.uri);
  t.equal(uri.protocol, 'otpauth:');
  t.equal(uri.searchParams.get('issuer'), 'Example Co');
  t.match(decodeURIComponent(uri.pathname), email);
  t.match(factor.totp.qrCode, /^data:image\/svg\+xml;base64,/);
  t.match(Buffer.from(factor.totp.qrCode.split(',')[1], 'base64').toString(), /<svg/);
  t.equal(factor.status, 'unverified');
  const stored = await s.database.handle.db
    .selectFrom('mfa_factors')
    .select('secret_sealed')
    .where('id', '=', factor.id)
    .executeTakeFirstOrThrow();
  t.notMatch(stored.secret_sealed, factor.totp.secret, 'the secret is stored sealed');

  assertErrorBody(t, await app.inject({ method: 'GET', url: '/api/auth/factors' }), 401, 'UNAUTHORIZED');
  const listed = await get('/api/auth/factors', token);
  t.same(
    listed.json().factors.map((f: { id: string; status: string }) => [f.id, f.status]),
    [[factor.id, 'unverified']],
  );

  assertErrorBody(
    t,
    await mfaVerify(token, {
      factorId: factor.id,
      code: totp(factor.totp.secret, new Date(clock.now().getTime() - 90_000)),
    }),
    400,
    'INVALID_OTP',
  );
  const verified = await mfaVerify(token, { factorId: factor.id, code: totp(factor.totp.secret) });
  t.equal(verified.statusCode, 200, 'the current code verifies the factor');
  const body = verified.json();
  t.equal(body.recoveryCodes.length, 10, 'ten recovery codes, shown once');
  t.equal(new Set(body.recoveryCodes).size, 10);
  t.equal(decodeClaims(body.accessToken).aal, 'aal2');
  assertErrorBody(t, await get('/api/auth/sessions/current', token), 401, 'SESSION_REVOKED');
  const after = await get('/api/auth/factors', body.accessToken);
  t.equal(after.json().factors[0].status, 'verified');
  t.same(await factorNotices(email, 1), ['The second factors of your account changed'], 'the owner is told by email');
  t.not(after.json().factors[0].lastUsedAt, null);
});

t.test('password: enforced, then raised by TOTP and by a recovery code', async (t) => {
  const account = await enrolledAccount('way-password');
  await assertSecondStepRaises(t, account, () => passwordSignIn(account.email), 'password');
});

t.test('email code sign-in: enforced, then raised', async (t) => {
  const account = await enrolledAccount('way-otp');
  const signIn = async () => {
    const sends = s.smtp.to(account.email).length;
    clock.advance(61);
    t.equal((await post('/api/auth/email/send-otp', undefined, { email: account.email })).statusCode, 202);
    const mail = await mailWithCode(account.email, sends);
    const res = await post('/api/auth/sessions?client_type=mobile', undefined, {
      method: 'otp',
      email: account.email,
      otp: mail.code,
    });
    t.equal(res.statusCode, 200, 'email code sign-in');
    return res.json().accessToken as string;
  };
  await assertSecondStepRaises(t, account, signIn, 'email code');
});

t.test('email verification: enforced, then raised', async (t) => {
  // An account made by an email code has no password: a verification email for its address
  // carries a code that opens a session of that account.
  const email = newEmail('way-verify');
  t.equal((await post('/api/auth/email/send-otp', undefined, { email })).statusCode, 202);
  const codeMail = await s.nthMail(email, 1);
  const made = await post('/api/auth/sessions?client_type=mobile', undefined, {
    method: 'otp',
    email,
    otp: codeMail.code,
  });
  t.equal(made.statusCode, 200);
  const created = await post('/api/auth/factors', made.json().accessToken, { type: 'totp' });
  const { id, totp: secrets } = created.json();
  const verified = await mfaVerify(made.json().accessToken, { factorId: id, code: totp(secrets.secret) });
  t.equal(verified.statusCode, 200);
  const account: Enrolled = {
    email,
    factorId: id,
    secret: secrets.secret,
    recoveryCodes: verified.json().recoveryCodes,
    token: verified.json().accessToken,
  };
  const signIn = async () => {
    const before = s.smtp.to(email).length;
    clock.advance(61);
    t.equal((await s.sendVerification(email)).statusCode, 202);
    const mail = await mailWithCode(email, before);
    t.ok(mail.code, 'a verification code for the account without a password');
    const res = await s.verifyElsewhere({ email, otp: mail.code });
    t.equal(res.statusCode, 200, 'email verification');
    return res.json().accessToken as string;
  };
  await assertSecondStepRaises(t, account, signIn, 'email verification');
});

t.test('OAuth (the loopback OpenID provider) and ID token: enforced, then raised', async (t) => {
  const oauthSignIn = async () => {
    const client = createClient({ baseUrl: base, isServerMode: true, retryCount: 0 });
    const started = await client.auth.signInWithOAuth({
      provider: 'testidp',
      redirectTo: REDIRECT,
      skipBrowserRedirect: true,
    });
    const landed = await followAuthorization(String(started.data?.url), {
      login: 'mfa-oauth',
      stopAt: (url) => url.origin === APP,
    });
    const code = landed.finalUrl.searchParams.get('insforge_code');
    const exchanged = await app.inject({
      method: 'POST',
      url: '/api/auth/oauth/exchange?client_type=mobile',
      payload: { code, code_verifier: String(started.data?.codeVerifier) },
    });
    t.equal(exchanged.statusCode, 200, 'OAuth exchange');
    return exchanged.json().accessToken as string;
  };
  // The account the provider's identity signs in to, with a factor enrolled from its first session.
  const first = await oauthSignIn();
  const created = await post('/api/auth/factors', first, { type: 'totp' });
  const { id, totp: secrets } = created.json();
  const verified = await mfaVerify(first, { factorId: id, code: totp(secrets.secret) });
  t.equal(verified.statusCode, 200);
  const account: Enrolled = {
    email: 'mfa-oauth@example.test',
    factorId: id,
    secret: secrets.secret,
    recoveryCodes: verified.json().recoveryCodes,
    token: verified.json().accessToken,
  };
  await assertSecondStepRaises(t, account, oauthSignIn, 'OAuth');

  const idTokenSignIn = async () => {
    const nonce = randomUUID();
    const token = await idp.issueIdToken({ clientId: SERVICE_CLIENT.clientId, login: 'mfa-oauth', nonce });
    const res = await post('/api/auth/id-token?client_type=mobile', undefined, { provider: 'testidp', token, nonce });
    t.equal(res.statusCode, 200, `ID-token sign-in ${res.body}`);
    return res.json().accessToken as string;
  };
  await assertSecondStepRaises(t, account, idTokenSignIn, 'ID token');
});

t.test('a TOTP code is accepted once, within a step of the clock', async (t) => {
  const account = await enrolledAccount('replay');
  const first = await passwordSignIn(account.email);
  // The enrollment used this step's code: the same code is a replay.
  assertErrorBody(
    t,
    await mfaVerify(first, { factorId: account.factorId, code: totp(account.secret) }),
    400,
    'INVALID_OTP',
  );
  nextStep();
  const code = totp(account.secret);
  const [a, b] = await Promise.all([
    mfaVerify(first, { factorId: account.factorId, code }),
    mfaVerify(await passwordSignIn(account.email), { factorId: account.factorId, code }),
  ]);
  t.same([a.statusCode, b.statusCode].sort(), [200, 400], 'two requests with one code: one succeeds');
  const second = await passwordSignIn(account.email);
  assertErrorBody(t, await mfaVerify(second, { factorId: account.factorId, code }), 400, 'INVALID_OTP');
  const older = totp(account.secret, new Date(clock.now().getTime() - 60_000));
  assertErrorBody(t, await mfaVerify(second, { factorId: account.factorId, code: older }), 400, 'INVALID_OTP');
  nextStep();
  const ahead = totp(account.secret, new Date(clock.now().getTime() + 30_000));
  t.equal(
    (await mfaVerify(second, { factorId: account.factorId, code: ahead })).statusCode,
    200,
    'one step ahead is accepted',
  );
});

t.test('6 wrong codes: the sixth answer is 429 whatever the code, with Retry-After', async (t) => {
  const account = await enrolledAccount('wrong-codes');
  const token = await passwordSignIn(account.email);
  nextStep();
  const right = totp(account.secret);
  const wrong = String((Number(right) + 1) % 1_000_000).padStart(6, '0');
  for (let i = 0; i < 5; i++) {
    assertErrorBody(t, await mfaVerify(token, { factorId: account.factorId, code: wrong }), 400, 'INVALID_OTP');
  }
  const limited = await mfaVerify(token, { factorId: account.factorId, code: right });
  assertErrorBody(t, limited, 429, 'RATE_LIMITED');
  t.ok(Number(limited.headers['retry-after']) > 0, 'Retry-After');
  // Recovery codes count apart, with the same rule.
  for (let i = 0; i < 5; i++) {
    assertErrorBody(t, await mfaVerify(token, { recoveryCode: 'aaaa-bbbb-cccc' }), 400, 'INVALID_OTP');
  }
  assertErrorBody(t, await mfaVerify(token, { recoveryCode: account.recoveryCodes[0] as string }), 429, 'RATE_LIMITED');
  clock.advance(301);
  t.equal(
    (await mfaVerify(token, { factorId: account.factorId, code: totp(account.secret) })).statusCode,
    200,
    'after the window the right code works',
  );
});

t.test('two requests with the same recovery code: exactly one succeeds', async (t) => {
  const account = await enrolledAccount('recovery-race');
  const [one, two] = [await passwordSignIn(account.email), await passwordSignIn(account.email)];
  const code = account.recoveryCodes[0] as string;
  const answers = await Promise.all([mfaVerify(one, { recoveryCode: code }), mfaVerify(two, { recoveryCode: code })]);
  t.same(answers.map((a) => a.statusCode).sort(), [200, 400]);
  t.ok((await factorNotices(account.email, 2)).includes('A recovery code was used'), 'the owner is told');
  const three = await passwordSignIn(account.email);
  assertErrorBody(t, await mfaVerify(three, { recoveryCode: code }), 400, 'INVALID_OTP');
  t.equal(
    (await mfaVerify(three, { recoveryCode: (account.recoveryCodes[1] as string).toUpperCase() })).statusCode,
    200,
    'case does not matter',
  );
});

t.test('enrollment, deletion and recovery codes need aal2 once a factor is verified', async (t) => {
  const account = await enrolledAccount('step-up');
  const pending = await passwordSignIn(account.email);
  assertErrorBody(t, await post('/api/auth/factors', pending, { type: 'totp' }), 403, 'MFA_REQUIRED');
  assertErrorBody(
    t,
    await app.inject({ method: 'DELETE', url: `/api/auth/factors/${account.factorId}`, headers: bearer(pending) }),
    403,
    'MFA_REQUIRED',
  );
  assertErrorBody(t, await post('/api/auth/factors/recovery-codes', pending), 403, 'MFA_REQUIRED');
  assertErrorBody(
    t,
    await post('/api/auth/password', pending, { currentPassword: PASSWORD, newPassword: 'another password 123' }),
    403,
    'MFA_REQUIRED',
  );

  const regenerated = await post('/api/auth/factors/recovery-codes', account.token);
  t.equal(regenerated.statusCode, 200);
  const fresh = regenerated.json().codes as string[];
  assertErrorBody(
    t,
    await mfaVerify(pending, { recoveryCode: account.recoveryCodes[0] as string }),
    400,
    'INVALID_OTP',
  );
  t.equal((await mfaVerify(pending, { recoveryCode: fresh[0] as string })).statusCode, 200, 'the new codes work');

  // Another account's factor and an unknown id look the same.
  const other = await enrolledAccount('step-up-other');
  const unknown = '00000000-0000-4000-8000-000000000000';
  for (const id of [other.factorId, unknown]) {
    assertErrorBody(t, await mfaVerify(account.token, { factorId: id, code: '123456' }), 404, 'NOT_FOUND');
    assertErrorBody(
      t,
      await app.inject({ method: 'DELETE', url: `/api/auth/factors/${id}`, headers: bearer(account.token) }),
      404,
      'NOT_FOUND',
    );
  }

  const removed = await app.inject({
    method: 'DELETE',
    url: `/api/auth/factors/${account.factorId}`,
    headers: bearer(account.token),
  });
  t.equal(removed.statusCode, 204, 'an aal2 session removes the factor');
  const plain = await passwordSignIn(account.email);
  t.equal(decodeClaims(plain).next_aal, undefined, 'without a factor, sign-in owes nothing');
  assertErrorBody(t, await post('/api/auth/factors/recovery-codes', plain), 409, 'FACTOR_STATE');
});

t.test('a refresh keeps the level; a password reset does not remove the second step', async (t) => {
  const account = await enrolledAccount('refresh-reset');
  const signIn = await post('/api/auth/sessions?client_type=mobile', undefined, {
    email: account.email,
    password: PASSWORD,
  });
  const refreshed = await post('/api/auth/refresh?client_type=mobile', undefined, {
    refreshToken: signIn.json().refreshToken,
  });
  t.equal(refreshed.statusCode, 200, refreshed.body);
  t.equal(decodeClaims(refreshed.json().accessToken).next_aal, 'aal2', 'an aal1 session stays aal1 on refresh');
  nextStep();
  const stepped = await mfaVerify(refreshed.json().accessToken, {
    factorId: account.factorId,
    code: totp(account.secret),
  });
  const again = await post('/api/auth/refresh?client_type=mobile', undefined, {
    refreshToken: stepped.json().refreshToken,
  });
  t.equal(decodeClaims(again.json().accessToken).aal, 'aal2', 'an aal2 session stays aal2 on refresh');

  const before = s.smtp.to(account.email).length;
  clock.advance(61);
  t.equal((await post('/api/auth/email/send-reset-password', undefined, { email: account.email })).statusCode, 202);
  const mail = await mailWithCode(account.email, before);
  const reset = await post('/api/auth/email/reset-password', undefined, {
    otp: mail?.token,
    newPassword: 'a new password 12345',
  });
  t.equal(reset.statusCode, 200, reset.body);
  const after = await post('/api/auth/sessions?client_type=mobile', undefined, {
    email: account.email,
    password: 'a new password 12345',
  });
  t.equal(decodeClaims(after.json().accessToken).next_aal, 'aal2', 'the next sign-in still owes the second step');
  const recovered = await mfaVerify(after.json().accessToken, { recoveryCode: account.recoveryCodes[0] });
  t.equal(recovered.statusCode, 200, `the recovery codes outlive the reset: ${recovered.body}`);
});

t.test('a password change and an administrator’s disabling keep the recovery codes', async (t) => {
  const account = await enrolledAccount('keeps-recovery');
  const changed = await app.inject({
    method: 'POST',
    url: '/api/auth/password',
    headers: bearer(account.token),
    payload: { currentPassword: PASSWORD, newPassword: 'a changed password 12345' },
  });
  t.equal(changed.statusCode, 204, changed.body);
  const signIn = async () => {
    const res = await post('/api/auth/sessions?client_type=mobile', undefined, {
      email: account.email,
      password: 'a changed password 12345',
    });
    t.equal(res.statusCode, 200, res.body);
    return res.json().accessToken as string;
  };
  const afterChange = await mfaVerify(await signIn(), { recoveryCode: account.recoveryCodes[0] });
  t.equal(afterChange.statusCode, 200, `after a password change: ${afterChange.body}`);

  const adminSignIn = await post('/api/auth/sessions?client_type=mobile', undefined, {
    email: ADMIN,
    password: ADMIN_PASSWORD,
  });
  const admin = adminSignIn.json().accessToken as string;
  const userId = decodeClaims(account.token).sub as string;
  for (const disabled of [true, false]) {
    const res = await app.inject({
      method: 'PATCH',
      url: `/api/auth/users/${userId}`,
      headers: bearer(admin),
      payload: { disabled },
    });
    t.equal(res.statusCode, 200, res.body);
  }
  const afterDisabling = await mfaVerify(await signIn(), { recoveryCode: account.recoveryCodes[1] });
  t.equal(afterDisabling.statusCode, 200, `after disabling and enabling: ${afterDisabling.body}`);
});

t.test('administrators remove an account\u2019s factors; MFA_REQUIRED_FOR_ADMINS', async (t) => {
  const account = await enrolledAccount('admin-removes');
  const admin = accessTokenFor(app, 'admin');
  const removed = await app.inject({
    method: 'DELETE',
    url: `/api/auth/users/${decodeClaims(account.token).sub}/factors`,
    headers: bearer(admin),
  });
  t.equal(removed.statusCode, 204);
  assertErrorBody(t, await get('/api/auth/sessions/current', account.token), 401, 'SESSION_REVOKED');
  t.equal((await factorNotices(account.email, 2)).length, 2, 'the owner is told (added, then removed)');
  t.equal(decodeClaims(await passwordSignIn(account.email)).next_aal, undefined, 'no second step any more');
  assertErrorBody(
    t,
    await app.inject({
      method: 'DELETE',
      url: '/api/auth/users/00000000-0000-4000-8000-000000000000/factors',
      headers: bearer(admin),
    }),
    404,
    'NOT_FOUND',
  );

  const strict = await buildAuthTestApp(t, { label: 'mfa-admins', env: { MFA_REQUIRED_FOR_ADMINS: 'true' } });
  const adminToken = accessTokenFor(strict.app, 'admin');
  assertErrorBody(
    t,
    await strict.app.inject({ method: 'GET', url: '/api/auth/users', headers: bearer(adminToken) }),
    403,
    'MFA_REQUIRED',
  );
  const config = await strict.app.inject({ method: 'GET', url: '/api/auth/public-config' });
  t.equal(config.json().mfaRequiredForAdmins, true);
  t.same(config.json().mfaFactorTypes, ['totp'], 'no passkeys while the relying party is an IP address');
});

t.test('the list never shows the secret; the stored one is sealed to its factor', async (t) => {
  const account = await enrolledAccount('sealed');
  const listed = await get('/api/auth/factors', account.token);
  t.notMatch(listed.body, account.secret, 'the list never shows the secret');
  const stored = await s.database.handle.db
    .selectFrom('mfa_factors')
    .select('secret_sealed')
    .where('id', '=', account.factorId)
    .executeTakeFirstOrThrow();
  t.notMatch(stored.secret_sealed, account.secret);
  t.match(stored.secret_sealed, /^v1\./, 'AES-256-GCM, bound to the factor id');
});

t.test('a session that owes its second step cannot prove a factor enrolled before the first one counted', async (t) => {
  const email = await s.verifiedAccount('pending-factor');
  // Someone holding the password starts an enrollment and keeps its secret.
  const intruder = await passwordSignIn(email);
  const theirs = (await post('/api/auth/factors', intruder, { type: 'totp' })).json();
  // The owner enrolls and verifies a factor of their own.
  const owner = await passwordSignIn(email);
  const mine = (await post('/api/auth/factors', owner, { type: 'totp' })).json();
  const verified = await mfaVerify(owner, { factorId: mine.id, code: totp(mine.totp.secret) });
  t.equal(verified.statusCode, 200);
  const listed = (await get('/api/auth/factors', verified.json().accessToken)).json().factors;
  t.same(
    listed.map((f: { id: string }) => f.id),
    [mine.id],
    'the enrollment begun before is void',
  );
  const again = await passwordSignIn(email);
  nextStep();
  assertErrorBody(t, await mfaVerify(again, { factorId: theirs.id, code: totp(theirs.totp.secret) }), 404, 'NOT_FOUND');
  t.equal(decodeClaims(again).next_aal, 'aal2');
});

t.test(
  'changing the factors needs a proof of the last 10 minutes; a step-up does not lengthen the session',
  async (t) => {
    const email = await s.verifiedAccount('recent-proof');
    const signedIn = await post('/api/auth/sessions?client_type=mobile', undefined, { email, password: PASSWORD });
    clock.advance(11 * 60);
    const refreshed = await post('/api/auth/refresh?client_type=mobile', undefined, {
      refreshToken: signedIn.json().refreshToken,
    });
    const stale = refreshed.json().accessToken as string;
    assertErrorBody(t, await post('/api/auth/factors', stale, { type: 'totp' }), 403, 'REAUTHENTICATION_REQUIRED');
    const fresh = await passwordSignIn(email);
    const factor = (await post('/api/auth/factors', fresh, { type: 'totp' })).json();
    const before = await s.database.handle.db
      .selectFrom('sessions')
      .select('expires_at')
      .where('id', '=', String(decodeClaims(fresh).sid))
      .executeTakeFirstOrThrow();
    const stepped = await mfaVerify(fresh, { factorId: factor.id, code: totp(factor.totp.secret) });
    const after = await s.database.handle.db
      .selectFrom('sessions')
      .select('expires_at')
      .where('id', '=', String(decodeClaims(stepped.json().accessToken).sid))
      .executeTakeFirstOrThrow();
    t.equal(
      after.expires_at.getTime(),
      before.expires_at.getTime(),
      'the aal2 session ends when the aal1 one would have',
    );
    clock.advance(11 * 60);
    const later = stepped.json().accessToken as string;
    assertErrorBody(t, await post('/api/auth/factors/recovery-codes', later), 403, 'REAUTHENTICATION_REQUIRED');
    assertErrorBody(
      t,
      await app.inject({ method: 'DELETE', url: `/api/auth/factors/${factor.id}`, headers: bearer(later) }),
      403,
      'REAUTHENTICATION_REQUIRED',
    );
  },
);

t.test('proving the mailbox removes the factors an unproven password\u2019s holder added', async (t) => {
  const account = await enrolledAccount('unproven-holder');
  // As if a sign-up's password had been confirmed from another device (unproven-password.ts).
  await s.database.handle.db
    .updateTable('users')
    .set({ password_unproven_since: new Date() })
    .where('email', '=', account.email)
    .execute();
  const before = s.smtp.to(account.email).length;
  clock.advance(61);
  t.equal((await post('/api/auth/email/send-otp', undefined, { email: account.email })).statusCode, 202);
  const mail = await mailWithCode(account.email, before);
  const signedIn = await post('/api/auth/sessions?client_type=mobile', undefined, {
    method: 'otp',
    email: account.email,
    otp: mail.code,
  });
  t.equal(signedIn.statusCode, 200);
  const token = signedIn.json().accessToken as string;
  t.equal(decodeClaims(token).next_aal, undefined, 'the owner owes no second step to the other person\u2019s factor');
  t.same((await get('/api/auth/factors', token)).json().factors, [], 'the factors are gone');
  assertErrorBody(t, await mfaVerify(token, { recoveryCode: account.recoveryCodes[0] as string }), 400, 'INVALID_OTP');
});
