// Passwordless sign-in: POST /api/auth/email/send-otp, then POST /api/auth/sessions with
// {method: "otp", email, otp}; ALLOW_SIGN_UP=false.
import type { LightMyRequestResponse } from 'fastify';
import t, { type Test } from 'tap';
import {
  type AuthTestAppOptions,
  buildAuthTestApp,
  newEmail,
  PASSWORD,
  pause,
  QUIET_MS,
  refreshCookies,
  wrongCode,
} from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import type { ReceivedMail } from './helpers/smtp.ts';

const SUBJECT = 'Your sign-in code';

async function setup(t: Test, options: AuthTestAppOptions = {}) {
  const built = await buildAuthTestApp(t, { label: 'passwordless', ...options });
  const { app } = built;
  const post = (url: string, payload: Record<string, unknown>) => app.inject({ method: 'POST', url, payload });

  /** A verified account with PASSWORD (signed up and verified by code). */
  async function account(label: string): Promise<string> {
    const email = newEmail(label);
    const res = await built.signUp(email);
    if (res.statusCode !== 202) throw new Error(`sign-up: ${res.statusCode} ${res.body}`);
    const mail = await built.firstMail(email);
    const done = await built.verify({ email, otp: mail.code });
    if (done.statusCode !== 200) throw new Error(`verify: ${done.statusCode} ${done.body}`);
    return email;
  }

  const sendOtp = (email: string) => post('/api/auth/email/send-otp', { email });
  const signInWithCode = (
    email: string,
    otp: string | undefined,
    extra: Record<string, unknown> = {},
    query = '?client_type=mobile',
  ) => post(`/api/auth/sessions${query}`, { method: 'otp', email, otp, ...extra });
  const signIn = (email: string, password: string) =>
    post('/api/auth/sessions?client_type=mobile', { email, password });

  const codeMails = (email: string) => built.smtp.to(email).filter((m) => m.subject === SUBJECT);

  /** Asks for a sign-in code (after moving past the 60 s cooldown unless told not to) and returns its email. */
  async function codeMail(email: string, advance = true): Promise<ReceivedMail> {
    if (advance) built.clock.advance(61);
    const before = codeMails(email).length;
    const res = await sendOtp(email);
    if (res.statusCode !== 202) throw new Error(`send-otp: ${res.statusCode} ${res.body}`);
    const deadline = Date.now() + 5000;
    while (codeMails(email).length <= before) {
      if (Date.now() > deadline) throw new Error(`no sign-in code for ${email}`);
      await pause(20);
    }
    return codeMails(email)[before] as ReceivedMail;
  }

  const disable = (email: string) =>
    built.database.handle.db.updateTable('users').set({ disabled_at: new Date() }).where('email', '=', email).execute();

  return { ...built, post, account, sendOtp, signInWithCode, signIn, codeMails, codeMail, disable };
}

const body = (res: LightMyRequestResponse) => JSON.parse(res.body) as Record<string, unknown>;
type User = {
  id: string;
  email: string;
  emailVerified: boolean;
  profile: { name: string | null };
  providers: string[];
};

t.test('an existing account signs in with an emailed code; its password keeps working', async (t) => {
  const s = await setup(t);
  const email = await s.account('existing');
  const before = await s.signIn(email, PASSWORD);
  const id = (body(before).user as User).id;
  s.clock.advance(61);
  const sent = await s.sendOtp(email);
  t.equal(sent.statusCode, 202);
  t.same(body(sent), {
    success: true,
    message: 'If sign-in by email code is available for this address, a code is on its way.',
  });
  const mail = await s.codeMail(email, false);
  t.match(mail.code, /^\d{6}$/);
  t.equal(mail.link, undefined, 'a code only, no link');
  t.match(mail.text, /did not ask to sign in/, 'says what to do when the reader did not ask');

  const res = await s.signInWithCode(email, mail.code, { name: 'Not Used' });
  t.equal(res.statusCode, 200);
  const session = body(res);
  t.equal((session.user as User).id, id, 'the same account');
  t.equal((session.user as User).profile.name, null, 'name is only for new accounts');
  t.type(session.refreshToken, 'string', 'mobile: the refresh token in the body');
  t.equal(session.csrfToken, null);
  t.equal((await s.current(String(session.accessToken))).statusCode, 200, 'the access token works');
  t.equal((await s.current(String(body(before).accessToken))).statusCode, 200, 'other sessions are untouched');
  t.equal((await s.signIn(email, PASSWORD)).statusCode, 200, 'the password still works');
  assertErrorBody(t, await s.signInWithCode(email, mail.code), 400, 'INVALID_OTP');
});

t.test('a new address becomes a verified account without a password', async (t) => {
  const s = await setup(t);
  const email = newEmail('new');
  const mail = await s.codeMail(email, false);
  t.match(mail.text, /creates one/, 'the email says a code can create an account');
  const res = await s.signInWithCode(email, mail.code, { name: 'Grace Hopper' }, '');
  t.equal(res.statusCode, 200, 'web client');
  const user = body(res).user as User;
  t.equal(user.email, email);
  t.equal(user.emailVerified, true);
  t.equal(user.profile.name, 'Grace Hopper');
  t.same(user.providers, ['email']);
  t.type(body(res).csrfToken, 'string', 'web: a CSRF token');
  t.equal(body(res).refreshToken, null);
  t.equal(refreshCookies(res).filter((c) => c.value !== '').length, 1, 'web: the refresh cookie');
  assertErrorBody(t, await s.signIn(email, PASSWORD), 401, 'INVALID_CREDENTIALS');
  const again = await s.codeMail(email);
  const second = await s.signInWithCode(email, again.code);
  t.equal((body(second).user as User).id, user.id, 'the next code signs in the same account');
  // The account has no password: it sets its first one without a current password.
  const set = await s.app.inject({
    method: 'POST',
    url: '/api/auth/password',
    headers: { authorization: `Bearer ${String(body(second).accessToken)}` },
    payload: { newPassword: 'a first passphrase' },
  });
  t.equal(set.statusCode, 204);
  t.equal((await s.signIn(email, 'a first passphrase')).statusCode, 200);
});

t.test('an unverified account is verified by the code, without the password that waited', async (t) => {
  const s = await setup(t);
  const email = newEmail('pending');
  t.equal((await s.signUp(email)).statusCode, 202);
  const verification = await s.firstMail(email);
  const mail = await s.codeMail(email);
  const res = await s.signInWithCode(email, mail.code);
  t.equal(res.statusCode, 200);
  t.equal((body(res).user as User).emailVerified, true);
  assertErrorBody(t, await s.signIn(email, PASSWORD), 401, 'INVALID_CREDENTIALS');
  assertErrorBody(t, await s.verify({ email, otp: verification.code }), 400, 'INVALID_OTP');
  assertErrorBody(t, await s.verify({ otp: verification.token }), 400, 'INVALID_OTP');
});

t.test('an unverified account made without verification loses its password and sessions', async (t) => {
  const s = await setup(t, { env: { REQUIRE_EMAIL_VERIFICATION: 'false' } });
  const email = newEmail('squatted');
  const squatter = await s.signUp(email, {}, '?client_type=mobile');
  t.equal(squatter.statusCode, 201);
  const mail = await s.codeMail(email, false);
  t.equal((await s.signInWithCode(email, mail.code)).statusCode, 200);
  assertErrorBody(t, await s.current(String(body(squatter).accessToken)), 401, 'SESSION_REVOKED');
  assertErrorBody(t, await s.signIn(email, PASSWORD), 401, 'INVALID_CREDENTIALS');
});

t.test('the password form keeps working with method absent or "password"; bad forms are 400', async (t) => {
  const s = await setup(t);
  const email = await s.account('forms');
  t.equal((await s.signIn(email, PASSWORD)).statusCode, 200, 'method absent');
  t.equal(
    (await s.post('/api/auth/sessions?client_type=mobile', { method: 'password', email, password: PASSWORD }))
      .statusCode,
    200,
    'method "password"',
  );
  // Each message speaks of the form the body's `method` names (absent: the password form).
  const cases: Array<[string, Record<string, unknown>, string]> = [
    ['an unknown method', { method: 'magic', email, password: PASSWORD }, 'body.'],
    [
      'otp with a password',
      { method: 'otp', email, otp: '123456', password: PASSWORD },
      'body.password is not an accepted field',
    ],
    ['password method with an otp', { method: 'password', email, otp: '123456' }, 'body.password is required'],
    ['otp without a code', { method: 'otp', email }, 'body.otp is required'],
    ['otp of 5 digits', { method: 'otp', email, otp: '12345' }, 'body.otp must be a 6-digit code'],
    ['otp with an empty name', { method: 'otp', email, otp: '123456', name: '' }, 'body.name must not be empty'],
    ['otp with a bad address', { method: 'otp', email: 'nobody', otp: '123456' }, 'body.email'],
    ['a code without method', { email, otp: '123456' }, 'body.password is required'],
    ['an empty password', { email, password: '' }, 'body.password must not be empty'],
  ];
  for (const [label, payload, words] of cases) {
    const res = await s.post('/api/auth/sessions', payload);
    t.test(label, async (t) => {
      const b = assertErrorBody(t, res, 400, 'INVALID_INPUT');
      t.ok(b.message.startsWith(words), `"${b.message}" starts with "${words}"`);
    });
  }
});

t.test('a code works once: of concurrent sign-ins with one code exactly one wins', async (t) => {
  const s = await setup(t);
  const email = newEmail('race');
  const mail = await s.codeMail(email, false);
  const results = await Promise.all([1, 2, 3, 4].map(() => s.signInWithCode(email, mail.code)));
  t.equal(results.filter((r) => r.statusCode === 200).length, 1, 'one session');
  for (const r of results) if (r.statusCode !== 200) assertErrorBody(t, r, 400, 'INVALID_OTP');
  const count = await s.database.handle.db
    .selectFrom('users')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where('email', '=', email)
    .executeTakeFirstOrThrow();
  t.equal(Number(count.n), 1, 'one account');
});

t.test('five wrong codes kill the code; a new code voids the old one', async (t) => {
  const s = await setup(t);
  // A new address: its three emails are one requester's daily share.
  const email = newEmail('five');
  const mail = await s.codeMail(email, false);
  const code = mail.code ?? '';
  for (let k = 1; k <= 5; k++)
    assertErrorBody(t, await s.signInWithCode(email, wrongCode(code, k)), 400, 'INVALID_OTP');
  assertErrorBody(t, await s.signInWithCode(email, code), 400, 'INVALID_OTP');
  const first = await s.codeMail(email);
  const second = await s.codeMail(email);
  const old = first.code === second.code ? wrongCode(first.code ?? '') : first.code;
  s.clock.advance(60); // past the sign-in back-off the failures above started
  assertErrorBody(t, await s.signInWithCode(email, old), 400, 'INVALID_OTP');
  s.clock.advance(60);
  t.equal((await s.signInWithCode(email, second.code)).statusCode, 200, 'the newest code works');
});

t.test('codes expire after 10 minutes', async (t) => {
  const s = await setup(t);
  const early = newEmail('early');
  const late = newEmail('late');
  const lateMail = await s.codeMail(late, false);
  const earlyMail = await s.codeMail(early, false);
  // The test clock also moves with real time: the control keeps a margin.
  s.clock.advance(540);
  t.equal((await s.signInWithCode(early, earlyMail.code)).statusCode, 200, 'control: 540 s old');
  s.clock.advance(62);
  assertErrorBody(t, await s.signInWithCode(late, lateMail.code), 400, 'INVALID_OTP');
});

t.test('a disabled account gets no code and cannot use one sent before', async (t) => {
  const s = await setup(t);
  const before = await s.account('disabled-before');
  const mail = await s.codeMail(before);
  await s.disable(before);
  const refused = await s.signInWithCode(before, mail.code);
  assertErrorBody(t, refused, 400, 'INVALID_OTP');
  const wrong = await s.signInWithCode(await s.account('control'), '000000');
  t.equal(refused.body, wrong.body, 'the same body as a wrong code');

  const disabled = await s.account('disabled');
  await s.disable(disabled);
  s.clock.advance(61);
  const sent = await s.sendOtp(disabled);
  t.equal(sent.statusCode, 202);
  t.equal(sent.body, (await s.sendOtp(newEmail('anyone'))).body, 'the same answer as for any address');
  await pause(QUIET_MS);
  t.equal(s.codeMails(disabled).length, 0, 'no code for a disabled account');
});

t.test('ALLOW_SIGN_UP=false: no account is made, by sign-up or by code', async (t) => {
  const s = await setup(t, { env: { ALLOW_SIGN_UP: 'false' } });
  const signUp = await s.signUp(newEmail('refused'));
  const b = assertErrorBody(t, signUp, 403, 'SIGN_UP_DISABLED');
  t.equal(b.message, 'Sign-ups are disabled on this service');

  // An account made before (directly in the database here) still signs in by code.
  const existing = newEmail('existing');
  await s.database.handle.db.insertInto('users').values({ email: existing, email_verified: true }).execute();
  const unknown = newEmail('unknown');
  const known = await s.sendOtp(existing);
  const stranger = await s.sendOtp(unknown);
  t.equal(stranger.statusCode, 202);
  t.equal(stranger.body, known.body, 'the same answer for an unknown address');
  const mail = await s.codeMail(existing, false).catch(async () => {
    // sendOtp above already asked; wait for that email instead.
    await pause(QUIET_MS);
    return s.codeMails(existing)[0] as ReceivedMail;
  });
  await pause(QUIET_MS);
  t.equal(s.codeMails(unknown).length, 0, 'no code for an unknown address');
  const guess = await s.signInWithCode(unknown, mail.code);
  const wrong = await s.signInWithCode(existing, wrongCode(mail.code ?? ''));
  assertErrorBody(t, guess, 400, 'INVALID_OTP');
  t.equal(guess.body, wrong.body, 'an unknown address answers exactly as a wrong code');
  t.equal((await s.signInWithCode(existing, mail.code)).statusCode, 200, 'the existing account signs in');
  const count = await s.database.handle.db.selectFrom('users').select('id').where('email', '=', unknown).execute();
  t.equal(count.length, 0, 'no account for the unknown address');
});

t.test('ALLOW_SIGN_UP=false: a code sent while sign-ups were allowed makes no account', async (t) => {
  // Same database (and so the same generated JWT_SECRET), two configurations: the code is stored
  // while sign-ups are allowed, and is good; only the closed sign-ups refuse it.
  const open = await setup(t);
  const email = newEmail('switched');
  const mail = await open.codeMail(email, false);
  const { buildApp } = await import('../src/app.ts');
  const { loadConfig } = await import('../src/config.ts');
  const closedConfig = loadConfig({
    ...process.env,
    NODE_ENV: 'test',
    LOG_LEVEL: 'silent',
    DATABASE_URL: open.database.url,
    ALLOW_SIGN_UP: 'false',
  });
  const closed = await buildApp(closedConfig, { database: open.database.handle, logger: false, clock: open.clock });
  t.teardown(() => closed.close());
  const res = await closed.inject({
    method: 'POST',
    url: '/api/auth/sessions',
    payload: { method: 'otp', email, otp: mail.code },
  });
  assertErrorBody(t, res, 400, 'INVALID_OTP');
});

t.test('wrong codes count as failed sign-ins of the address: the back-off applies', async (t) => {
  const s = await setup(t);
  const email = await s.account('backoff');
  const mail = await s.codeMail(email);
  for (let k = 1; k <= 3; k++) await s.signIn(email, `wrong password ${k}`);
  for (let k = 1; k <= 3; k++)
    assertErrorBody(t, await s.signInWithCode(email, wrongCode(mail.code ?? '', k)), 400, 'INVALID_OTP');
  const held = await s.signInWithCode(email, mail.code);
  assertErrorBody(t, held, 429, 'RATE_LIMITED');
  t.ok(Number(held.headers['retry-after']) >= 1, 'Retry-After');
  s.clock.advance(2);
  t.equal((await s.signInWithCode(email, mail.code)).statusCode, 200, 'after the delay, the right code works');
  t.equal((await s.signIn(email, PASSWORD)).statusCode, 200, 'a session clears the back-off');
});

t.test('rate limits per client: send-otp and code sign-ins', async (t) => {
  const s = await setup(t, {
    generousRateLimits: false,
    env: { RATE_LIMIT_SEND_VERIFICATION: '2', RATE_LIMIT_SIGN_IN: '2' },
  });
  for (let k = 0; k < 2; k++) t.equal((await s.sendOtp(newEmail('limit'))).statusCode, 202);
  const limited = await s.sendOtp(newEmail('limit'));
  assertErrorBody(t, limited, 429, 'RATE_LIMITED');
  t.ok(Number(limited.headers['retry-after']) > 0);
  const email = newEmail('guess');
  for (let k = 0; k < 2; k++) t.equal((await s.signInWithCode(email, '000000')).statusCode, 400);
  assertErrorBody(t, await s.signInWithCode(email, '000000'), 429, 'RATE_LIMITED');
});

t.test('send-otp input errors', async (t) => {
  const s = await setup(t);
  assertErrorBody(t, await s.post('/api/auth/email/send-otp', { email: 'not an address' }), 400, 'INVALID_INPUT');
  assertErrorBody(t, await s.post('/api/auth/email/send-otp', {}), 400, 'INVALID_INPUT');
  assertErrorBody(
    t,
    await s.post('/api/auth/email/send-otp', { email: newEmail('x'), name: 'x' }),
    400,
    'INVALID_INPUT',
  );
});

t.test('the profile set by whoever signed up first is gone once the owner proves the mailbox by code', async (t) => {
  const s = await setup(t);
  const email = newEmail('pre-hijack');
  t.equal((await s.signUp(email, { name: 'Attacker Name' })).statusCode, 202);
  const mail = await s.codeMail(email);
  const res = await s.signInWithCode(email, mail.code, { name: 'The Owner' });
  t.equal(res.statusCode, 200);
  t.same((body(res).user as User).profile, { name: 'The Owner', avatar_url: null });
});
