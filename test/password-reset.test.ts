// Password reset: POST /api/auth/email/send-reset-password, exchange-reset-password-token and
// reset-password, and the page reset links open (/auth/reset-password).
import { randomBytes } from 'node:crypto';
import type { LightMyRequestResponse } from 'fastify';
import t, { type Test } from 'tap';
import type { Env } from '../src/config.ts';
import {
  type AuthTestAppOptions,
  buildAuthTestApp,
  newEmail,
  PASSWORD,
  pause,
  QUIET_MS,
  wrongCode,
} from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import type { ReceivedMail } from './helpers/smtp.ts';

const NEW_PASSWORD = 'a brand new passphrase';

async function setup(t: Test, options: AuthTestAppOptions = {}) {
  const built = await buildAuthTestApp(t, { label: 'password-reset', ...options });
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

  const signIn = (email: string, password: string) =>
    post('/api/auth/sessions?client_type=mobile', { email, password });
  const sendReset = (email: string, extra: Record<string, unknown> = {}) =>
    post('/api/auth/email/send-reset-password', { email, ...extra });
  const exchange = (email: string, code: string | undefined) =>
    post('/api/auth/email/exchange-reset-password-token', { email, code });
  const reset = (otp: string | undefined, newPassword = NEW_PASSWORD) =>
    post('/api/auth/email/reset-password', { otp, newPassword });

  /** The reset emails an address has received so far. */
  const resetMails = (email: string) => built.smtp.to(email).filter((m) => m.subject === 'Reset your password');

  /** Waits for the n-th reset email (1-based) to an address. */
  async function nthResetMail(email: string, n: number): Promise<ReceivedMail> {
    const deadline = Date.now() + 5000;
    while (resetMails(email).length < n) {
      if (Date.now() > deadline) throw new Error(`no reset email ${n} for ${email}`);
      await pause(20);
    }
    return resetMails(email)[n - 1] as ReceivedMail;
  }

  /** Asks for a reset email (after moving past the 60 s cooldown) and returns it. */
  async function resetMail(email: string, advance = true): Promise<ReceivedMail> {
    if (advance) built.clock.advance(61);
    const before = resetMails(email).length;
    const res = await sendReset(email);
    if (res.statusCode !== 202) throw new Error(`send-reset-password: ${res.statusCode} ${res.body}`);
    return nthResetMail(email, before + 1);
  }

  const disable = (email: string) =>
    built.database.handle.db.updateTable('users').set({ disabled_at: new Date() }).where('email', '=', email).execute();

  return { ...built, post, account, signIn, sendReset, exchange, reset, resetMail, nthResetMail, disable };
}

const body = (res: LightMyRequestResponse) => JSON.parse(res.body) as Record<string, unknown>;

t.test('the code path: send, exchange, reset; sessions end, the old password fails, the new one works', async (t) => {
  const s = await setup(t);
  const email = await s.account('code-path');
  const before = await s.signIn(email, PASSWORD);
  t.equal(before.statusCode, 200, 'signed in with the old password');
  const oldAccess = String(body(before).accessToken);
  t.equal((await s.current(oldAccess)).statusCode, 200, 'the old session works');

  s.clock.advance(61);
  const sent = await s.sendReset(email);
  t.equal(sent.statusCode, 202);
  t.same(body(sent), {
    success: true,
    message: 'If the address belongs to an account, an email with a reset code and link is on its way.',
  });
  const mail = await s.nthResetMail(email, 1);
  t.equal(mail.subject, 'Reset your password');
  t.match(mail.code, /^\d{6}$/, 'a 6-digit code');
  t.match(mail.token, /^[0-9a-f]{64}$/, 'a 64-hex link token');
  t.match(mail.text, /did not ask to reset your password/, 'says what to do when the reader did not ask');
  t.match(
    mail.link,
    new RegExp(`^${s.config.publicUrl}/auth/reset-password\\?token=`),
    "the link opens the service's page",
  );

  const exchanged = await s.exchange(email, mail.code);
  t.equal(exchanged.statusCode, 200);
  const { token, expiresAt } = body(exchanged) as { token: string; expiresAt: string };
  t.match(token, /^[0-9a-f]{64}$/, 'the reset token is 64 hex');
  t.not(token, mail.token, 'the reset token is not the link token');
  const lifetime = (Date.parse(expiresAt) - s.clock.now().getTime()) / 1000;
  t.ok(lifetime > 590 && lifetime <= 600, `expiresAt is 10 minutes ahead (${lifetime} s)`);
  assertErrorBody(t, await s.exchange(email, mail.code), 400, 'INVALID_OTP');

  const done = await s.reset(token);
  t.equal(done.statusCode, 200);
  t.same(body(done), { message: 'Your password has been reset. Sign in with the new password.' });
  assertErrorBody(t, await s.current(oldAccess), 401, 'SESSION_REVOKED');
  assertErrorBody(t, await s.signIn(email, PASSWORD), 401, 'INVALID_CREDENTIALS');
  t.equal((await s.signIn(email, NEW_PASSWORD)).statusCode, 200, 'the new password signs in');
  assertErrorBody(t, await s.reset(token, 'yet another passphrase'), 400, 'INVALID_OTP');
  assertErrorBody(t, await s.reset(mail.token), 400, 'INVALID_OTP');
  t.equal((await s.signIn(email, NEW_PASSWORD)).statusCode, 200, 'the used tokens changed nothing');
});

t.test('the link path: its token resets alone; it works once', async (t) => {
  const s = await setup(t);
  const email = await s.account('link-path');
  const mail = await s.resetMail(email);
  t.equal((await s.reset(mail.token)).statusCode, 200);
  assertErrorBody(t, await s.reset(mail.token, 'another passphrase'), 400, 'INVALID_OTP');
  assertErrorBody(t, await s.exchange(email, mail.code), 400, 'INVALID_OTP');
  t.equal((await s.signIn(email, NEW_PASSWORD)).statusCode, 200);
});

t.test('code and link are independent; a reset voids the other one; a new email voids the old pair', async (t) => {
  const s = await setup(t);
  const email = await s.account('independent');
  const first = await s.resetMail(email);
  const second = await s.resetMail(email);
  assertErrorBody(
    t,
    await s.exchange(email, first.code === second.code ? wrongCode(first.code ?? '') : first.code),
    400,
    'INVALID_OTP',
  );
  assertErrorBody(t, await s.reset(first.token), 400, 'INVALID_OTP');

  const exchanged = await s.exchange(email, second.code);
  t.equal(exchanged.statusCode, 200, 'the code of the newest email works');
  t.equal((await s.reset(second.token)).statusCode, 200, 'its link still works after the code was exchanged');
  assertErrorBody(t, await s.reset(String(body(exchanged).token)), 400, 'INVALID_OTP');
});

t.test('two resets with one token at once: exactly one wins, and its password is the one set', async (t) => {
  const s = await setup(t);
  for (const [label, kind] of [
    ['link', 'link'],
    ['exchanged', 'exchanged'],
  ] as const) {
    const email = await s.account(`race-${label}`);
    const mail = await s.resetMail(email);
    const token = kind === 'link' ? mail.token : String(body(await s.exchange(email, mail.code)).token);
    const passwords = ['first racing passphrase', 'second racing passphrase', 'third racing passphrase'];
    const results = await Promise.all(passwords.map((p) => s.reset(token, p)));
    const winners = results.flatMap((r, i) => (r.statusCode === 200 ? [passwords[i] as string] : []));
    t.equal(winners.length, 1, `${label}: exactly one reset succeeded`);
    for (const r of results) if (r.statusCode !== 200) assertErrorBody(t, r, 400, 'INVALID_OTP');
    for (const p of passwords) {
      t.equal((await s.signIn(email, p)).statusCode, p === winners[0] ? 200 : 401, `${label}: ${p}`);
    }
  }
});

t.test('two exchanges of one code at once: exactly one gets a token', async (t) => {
  const s = await setup(t);
  const email = await s.account('exchange-race');
  const mail = await s.resetMail(email);
  const results = await Promise.all([1, 2, 3].map(() => s.exchange(email, mail.code)));
  t.equal(results.filter((r) => r.statusCode === 200).length, 1);
  t.equal(results.filter((r) => r.statusCode === 400).length, 2);
});

t.test('five wrong codes kill the code (not the link); each attempt counts even when right after', async (t) => {
  const s = await setup(t);
  const email = await s.account('five');
  const mail = await s.resetMail(email);
  const code = mail.code ?? '';
  for (let k = 1; k <= 4; k++) assertErrorBody(t, await s.exchange(email, wrongCode(code, k)), 400, 'INVALID_OTP');
  const other = await s.account('four');
  const otherMail = await s.resetMail(other);
  for (let k = 1; k <= 4; k++) await s.exchange(other, wrongCode(otherMail.code ?? '', k));
  t.equal((await s.exchange(other, otherMail.code)).statusCode, 200, 'four wrong tries leave a code usable');

  assertErrorBody(t, await s.exchange(email, wrongCode(code, 5)), 400, 'INVALID_OTP');
  assertErrorBody(t, await s.exchange(email, code), 400, 'INVALID_OTP');
  t.equal((await s.reset(mail.token)).statusCode, 200, 'the link of a dead code still resets');
});

t.test('codes, link tokens and reset tokens expire after 10 minutes', async (t) => {
  const s = await setup(t);
  const early = await s.account('early');
  const late = await s.account('late');
  const lateToken = await s.account('late-token');
  // One move past the cooldown of the verification emails; then the three are sent together.
  s.clock.advance(61);
  const lateMail = await s.resetMail(late, false);
  const tokenMail = await s.resetMail(lateToken, false);
  const earlyMail = await s.resetMail(early, false);
  const exchanged = String(body(await s.exchange(lateToken, tokenMail.code)).token);
  // The test clock also moves with real time: the control keeps a margin.
  s.clock.advance(540);
  t.equal((await s.exchange(early, earlyMail.code)).statusCode, 200, 'control: a code 540 s old works');
  s.clock.advance(62);
  assertErrorBody(t, await s.exchange(late, lateMail.code), 400, 'INVALID_OTP');
  assertErrorBody(t, await s.reset(lateMail.token), 400, 'INVALID_OTP');
  assertErrorBody(t, await s.reset(exchanged), 400, 'INVALID_OTP');
  t.equal((await s.signIn(late, PASSWORD)).statusCode, 200, 'nothing changed');
});

t.test('unknown addresses and disabled accounts get the same answer and no email', async (t) => {
  const s = await setup(t);
  const known = await s.account('known');
  const disabled = await s.account('disabled');
  await s.disable(disabled);
  const unknown = newEmail('unknown');
  const answers = [];
  for (const email of [known, disabled, unknown]) {
    s.clock.advance(61);
    answers.push(await s.sendReset(email));
  }
  for (const res of answers) {
    t.equal(res.statusCode, 202);
    t.equal(res.body, answers[0]?.body, 'the same body');
  }
  await s.nthResetMail(known, 1);
  await pause(QUIET_MS);
  t.equal(s.smtp.to(disabled).length, 1, 'the disabled account got no reset email (only its verification email)');
  t.equal(s.smtp.to(unknown).length, 0, 'the unknown address got no email');
});

t.test('an account disabled after the email cannot exchange its code or use its tokens', async (t) => {
  const s = await setup(t);
  const email = await s.account('disabled-later');
  const mail = await s.resetMail(email);
  const other = await s.account('disabled-later-token');
  const otherMail = await s.resetMail(other);
  const exchanged = String(body(await s.exchange(other, otherMail.code)).token);
  await s.disable(email);
  await s.disable(other);
  const unknownToken = await s.reset(randomBytes(32).toString('hex'));
  // The link's page says so when opened, before its form, as for an unknown link.
  const page = await s.app.inject({ url: `/auth/reset-password?token=${mail.token}` });
  t.equal(page.statusCode, 400, "a disabled account's reset link is refused when opened");
  t.match(page.body, /invalid, has expired or was already used/);
  t.notMatch(page.body, /<form/);
  const refusals = [await s.exchange(email, mail.code), await s.reset(mail.token), await s.reset(exchanged)];
  for (const res of refusals) {
    assertErrorBody(t, res, 400, 'INVALID_OTP');
    t.equal(res.body, unknownToken.body, 'the same body as an unknown token');
  }
});

t.test('a reset verifies the address and clears a contested pending sign-up', async (t) => {
  const s = await setup(t);
  const email = newEmail('contested');
  t.equal((await s.signUp(email)).statusCode, 202);
  const verification = await s.firstMail(email);
  s.clock.advance(61);
  t.equal((await s.signUp(email, { password: 'a squatter password' })).statusCode, 202, 'a competing sign-up');
  await s.nthMail(email, 2);
  const mail = await s.resetMail(email);
  t.equal((await s.reset(mail.token)).statusCode, 200, 'an unverified account can reset its password');
  const signedIn = await s.signIn(email, NEW_PASSWORD);
  t.equal(signedIn.statusCode, 200);
  t.equal((body(signedIn).user as { emailVerified: boolean }).emailVerified, true, 'the address is verified');
  assertErrorBody(t, await s.signIn(email, 'a squatter password'), 401, 'INVALID_CREDENTIALS');
  assertErrorBody(t, await s.verify({ email, otp: verification.code }), 400, 'INVALID_OTP');
  assertErrorBody(t, await s.verify({ otp: verification.token }), 400, 'INVALID_OTP');
});

t.test('a reset ends every session and clears the sign-in back-off of the address', async (t) => {
  const s = await setup(t);
  const email = await s.account('backoff');
  const sessions = [await s.signIn(email, PASSWORD), await s.signIn(email, PASSWORD)];
  const web = await s.post('/api/auth/sessions', { email, password: PASSWORD });
  for (let k = 0; k < 6; k++) await s.signIn(email, `wrong password ${k}`);
  assertErrorBody(t, await s.signIn(email, PASSWORD), 429, 'RATE_LIMITED');
  const mail = await s.resetMail(email);
  t.equal((await s.reset(mail.token)).statusCode, 200);
  for (const res of [...sessions, web]) {
    assertErrorBody(t, await s.current(String(body(res).accessToken)), 401, 'SESSION_REVOKED');
  }
  const refreshed = await s.post('/api/auth/refresh?client_type=mobile', {
    refreshToken: body(sessions[0] as LightMyRequestResponse).refreshToken,
  });
  assertErrorBody(t, refreshed, 401, 'REFRESH_TOKEN_INVALID');
  t.equal((await s.signIn(email, NEW_PASSWORD)).statusCode, 200, 'no back-off after the reset');
});

t.test('input is checked before anything is spent', async (t) => {
  const s = await setup(t);
  const email = await s.account('input');
  const mail = await s.resetMail(email);
  const cases: Array<[string, LightMyRequestResponse, string]> = [
    ['a 7-character password', await s.reset(mail.token, 'short12'), 'body.newPassword'],
    ['a 257-character password', await s.reset(mail.token, 'x'.repeat(257)), 'body.newPassword'],
    ['a token of 63 hex', await s.reset(mail.token?.slice(1)), 'body.otp must be a 64-character hexadecimal token'],
    ['a 6-digit code as the token', await s.reset(mail.code), 'body.otp'],
    ['no token', await s.post('/api/auth/email/reset-password', { newPassword: NEW_PASSWORD }), 'body.otp is required'],
    ['a 5-digit code', await s.exchange(email, '12345'), 'body.code must be a 6-digit code'],
    ['a malformed address', await s.exchange('nobody', mail.code), 'body.email'],
    ['an unknown field', await s.sendReset(email, { extra: 1 }), 'body.extra is not an accepted field'],
    [
      'a redirect without AUTH_REDIRECT_URL',
      await s.sendReset(email, { redirectTo: 'https://app.example.com/' }),
      'body.redirectTo',
    ],
  ];
  for (const [label, res, words] of cases) {
    t.test(label, async (t) => {
      const b = assertErrorBody(t, res, 400, 'INVALID_INPUT');
      t.ok(b.message.includes(words), `"${b.message}" names ${words}`);
    });
  }
  t.equal((await s.exchange(email, mail.code)).statusCode, 200, 'the code still works');
  t.equal((await s.reset(mail.token)).statusCode, 200, 'the link token still works');
});

t.test('RESET_PASSWORD_URL sends the link to the app; an allowed redirectTo rides along', async (t) => {
  const s = await setup(t, {
    env: { RESET_PASSWORD_URL: 'https://app.example.com/reset', AUTH_REDIRECT_URL: 'https://app.example.com/home' },
  });
  const email = await s.account('app-link');
  s.clock.advance(61);
  const res = await s.sendReset(email, { redirectTo: 'https://app.example.com/signed-out' });
  t.equal(res.statusCode, 202);
  const mail = await s.nthResetMail(email, 1);
  const link = new URL(mail.link ?? '');
  t.equal(`${link.origin}${link.pathname}`, 'https://app.example.com/reset');
  t.equal(link.searchParams.get('token'), mail.token);
  t.equal(link.searchParams.get('redirect_to'), 'https://app.example.com/signed-out');
  assertErrorBody(t, await s.sendReset(email, { redirectTo: 'https://evil.example.net/' }), 400, 'INVALID_INPUT');
  t.equal((await s.reset(mail.token)).statusCode, 200, "the app posts the link's token");
});

t.test('RESET_PASSWORD_URL must be an http(s) URL', async (t) => {
  const { loadConfig } = await import('../src/config.ts');
  const env: Env = { NODE_ENV: 'test', RESET_PASSWORD_URL: 'javascript:alert(1)' };
  t.throws(() => loadConfig(env), /RESET_PASSWORD_URL must be an http:\/\/ or https:\/\/ URL/);
  const ok = loadConfig({ NODE_ENV: 'test', PUBLIC_URL: 'https://accounts.example.com' });
  t.equal(ok.resetPasswordUrl, 'https://accounts.example.com/auth/reset-password');
  t.equal(
    loadConfig({ NODE_ENV: 'test', RESET_PASSWORD_URL: 'https://app.example.com/reset/' }).resetPasswordUrl,
    'https://app.example.com/reset',
  );
});

t.test('rate limits per client: send, exchange and reset', async (t) => {
  const s = await setup(t, {
    generousRateLimits: false,
    env: { RATE_LIMIT_SEND_VERIFICATION: '2', RATE_LIMIT_VERIFY: '2', RATE_LIMIT_SIGN_UP: '100' },
  });
  const email = newEmail('limits');
  for (let k = 0; k < 2; k++) t.equal((await s.sendReset(email)).statusCode, 202);
  const limited = await s.sendReset(email);
  assertErrorBody(t, limited, 429, 'RATE_LIMITED');
  t.ok(Number(limited.headers['retry-after']) > 0, 'Retry-After');
  for (let k = 0; k < 2; k++) t.equal((await s.exchange(email, '000000')).statusCode, 400);
  assertErrorBody(t, await s.exchange(email, '000000'), 429, 'RATE_LIMITED');
  const token = randomBytes(32).toString('hex');
  for (let k = 0; k < 2; k++) t.equal((await s.reset(token)).statusCode, 400);
  assertErrorBody(t, await s.reset(token), 429, 'RATE_LIMITED');
});

t.test('one email per address per 60 s, shared with verification emails', async (t) => {
  const s = await setup(t);
  const email = newEmail('cooldown');
  t.equal((await s.signUp(email)).statusCode, 202);
  await s.firstMail(email);
  t.equal((await s.sendReset(email)).statusCode, 202, 'the same answer inside the cooldown');
  await pause(QUIET_MS);
  t.equal(s.smtp.to(email).length, 1, 'no reset email inside the cooldown');
  s.clock.advance(61);
  t.equal((await s.sendReset(email)).statusCode, 202);
  t.equal((await s.nthMail(email, 2)).subject, 'Reset your password');
});

// The page a reset link opens.

const formPost = (s: Awaited<ReturnType<typeof setup>>, fields: Record<string, string>) =>
  s.app.inject({
    method: 'POST',
    url: '/auth/reset-password',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    payload: new URLSearchParams(fields).toString(),
  });

t.test('the reset page: opening it spends nothing; posting the form sets the password', async (t) => {
  const s = await setup(t, { env: { AUTH_REDIRECT_URL: 'https://app.example.com/home' } });
  const email = await s.account('page');
  const mail = await s.resetMail(email);
  const token = mail.token ?? '';
  const page = await s.app.inject({ url: `/auth/reset-password?token=${token}` });
  t.equal(page.statusCode, 200);
  t.match(String(page.headers['content-type']), /^text\/html/);
  t.equal(page.headers['cache-control'], 'no-store');
  t.equal(page.headers['referrer-policy'], 'no-referrer');
  t.match(String(page.headers['content-security-policy']), /default-src 'none'/);
  t.match(String(page.headers['content-security-policy']), /frame-ancestors 'none'/);
  t.equal(page.headers['x-content-type-options'], 'nosniff');
  t.match(page.body, /<form method="post" action="\/auth\/reset-password">/);
  t.match(page.body, new RegExp(`name="token" value="${token}"`));
  await s.app.inject({ url: `/auth/reset-password?token=${token}` });
  t.equal((await s.signIn(email, PASSWORD)).statusCode, 200, 'opening the page twice changed nothing');

  const mismatch = await formPost(s, { token, newPassword: NEW_PASSWORD, confirmPassword: 'something else' });
  t.equal(mismatch.statusCode, 400);
  t.match(mismatch.body, /The two passwords are not the same/);
  t.match(mismatch.body, new RegExp(`name="token" value="${token}"`), 'the form comes back with the token');
  const short = await formPost(s, { token, newPassword: 'short', confirmPassword: 'short' });
  t.equal(short.statusCode, 400);
  t.match(short.body, /8 to 256 characters/);

  const done = await formPost(s, { token, newPassword: NEW_PASSWORD, confirmPassword: NEW_PASSWORD });
  t.equal(done.statusCode, 200);
  t.match(done.body, /Your password has been changed/);
  t.match(done.body, /href="https:\/\/app.example.com\/home"/, 'offers the configured redirect');
  t.equal(done.headers['cache-control'], 'no-store');
  t.equal((await s.signIn(email, NEW_PASSWORD)).statusCode, 200, 'the new password signs in');

  t.match(
    page.body,
    /<p class="app">Accounts<\/p>\n<h1>Choose a new password<\/h1>/,
    'the product name above the heading',
  );
  t.match(done.body, /<h1>Password changed<\/h1>/, 'the heading says what happened');
  t.notMatch(done.body, /Choose a new password/);

  const again = await formPost(s, { token, newPassword: 'another passphrase', confirmPassword: 'another passphrase' });
  t.equal(again.statusCode, 400);
  t.match(again.body, /invalid, has expired or was already used/, 'a spent token gets a clear error');
  const reopened = await s.app.inject({ url: `/auth/reset-password?token=${token}` });
  t.equal(reopened.statusCode, 400, 'a used link says so when it is opened, before anything is typed');
  t.match(reopened.body, /invalid, has expired or was already used/);
  t.notMatch(reopened.body, /<form/, 'and shows no form');
});

t.test('the reset page: bad tokens, escaping and what it refuses', async (t) => {
  const s = await setup(t, { env: { AUTH_REDIRECT_URL: 'https://app.example.com/home' } });
  for (const url of [
    '/auth/reset-password',
    '/auth/reset-password?token=abc',
    `/auth/reset-password?token=${'g'.repeat(64)}`,
  ]) {
    const res = await s.app.inject({ url });
    t.equal(res.statusCode, 400, url);
    t.match(res.body, /This link is incomplete/);
    t.notMatch(res.body, /<form/, 'no form without a token');
  }
  const unknownToken = randomBytes(32).toString('hex');
  const unknown = await formPost(s, { token: unknownToken, newPassword: NEW_PASSWORD, confirmPassword: NEW_PASSWORD });
  t.equal(unknown.statusCode, 400);
  t.match(unknown.body, /invalid, has expired or was already used/);
  const opened = await s.app.inject({ url: `/auth/reset-password?token=${unknownToken}` });
  t.equal(opened.statusCode, 400, 'an unknown link is refused when opened');
  t.match(opened.body, /invalid, has expired or was already used/);
  t.notMatch(opened.body, /<form/, 'without a form');

  const token = (await s.resetMail(await s.account('escaping'))).token ?? '';

  const hostile = 'https://app.example.com/x?a="><script>alert(1)</script>';
  const allowed = await s.app.inject({
    url: `/auth/reset-password?token=${token}&redirect_to=${encodeURIComponent(hostile)}`,
  });
  t.equal(allowed.statusCode, 200);
  t.notMatch(allowed.body, /<script>alert/, 'nothing from the URL is written unescaped');
  t.match(allowed.body, /name="redirect_to" value="https:\/\/app.example.com\/x\?a=%22%3E%3Cscript%3E/);
  const foreign = await s.app.inject({
    url: `/auth/reset-password?token=${token}&redirect_to=https%3A%2F%2Fevil.example.net%2F`,
  });
  t.notMatch(foreign.body, /evil\.example\.net/, 'a redirect off the allowed origin is dropped');

  const json = await s.app.inject({
    method: 'POST',
    url: '/auth/reset-password',
    payload: { token, newPassword: NEW_PASSWORD, confirmPassword: NEW_PASSWORD },
  });
  t.equal(json.statusCode, 415, 'the page takes only its form');
});

t.test('the reset page POST is rate-limited per client like the reset operation', async (t) => {
  const s = await setup(t, { generousRateLimits: false, env: { RATE_LIMIT_VERIFY: '2' } });
  const token = randomBytes(32).toString('hex');
  const fields = { token, newPassword: NEW_PASSWORD, confirmPassword: NEW_PASSWORD };
  for (let k = 0; k < 2; k++) t.equal((await formPost(s, fields)).statusCode, 400);
  t.equal((await formPost(s, fields)).statusCode, 429);
});

t.test('a password change while signed in voids the reset code and link sent before it', async (t) => {
  const s = await setup(t);
  const email = await s.account('changed-meanwhile');
  const signedIn = await s.signIn(email, PASSWORD);
  const access = String(body(signedIn).accessToken);
  const mail = await s.resetMail(email);
  const changed = await s.app.inject({
    method: 'POST',
    url: '/api/auth/password',
    headers: { authorization: `Bearer ${access}` },
    payload: { currentPassword: PASSWORD, newPassword: 'the owner chose this one' },
  });
  t.equal(changed.statusCode, 204, 'the owner changes the password');
  assertErrorBody(t, await s.reset(mail.token), 400, 'INVALID_OTP');
  assertErrorBody(t, await s.exchange(email, mail.code), 400, 'INVALID_OTP');
  t.equal((await s.signIn(email, 'the owner chose this one')).statusCode, 200, "the owner's password stands");
});

t.test(
  "guesses where an address has no live code do not use up its daily attempts: the owner's next code works",
  async (t) => {
    const s = await setup(t);
    const email = await s.account('no-lockout');
    // More guesses than the daily allowance (50), spread over the code endpoints, while no code is live.
    for (let i = 0; i < 30; i++) assertErrorBody(t, await s.exchange(email, wrongCode('123456')), 400, 'INVALID_OTP');
    for (let i = 0; i < 25; i++) {
      const res = await s.verify({ email, otp: wrongCode('123456') });
      t.equal(res.statusCode, 400);
    }
    const mail = await s.resetMail(email);
    const exchanged = await s.exchange(email, mail.code);
    t.equal(exchanged.statusCode, 200, "the owner's freshly mailed code is accepted");
  },
);

t.test('a new reset email voids the token exchanged for the code of the one before', async (t) => {
  const s = await setup(t);
  const email = await s.account('re-sent');
  const first = await s.resetMail(email);
  const exchanged = await s.exchange(email, first.code);
  t.equal(exchanged.statusCode, 200);
  const { token } = body(exchanged) as { token: string };
  await s.resetMail(email);
  assertErrorBody(t, await s.reset(token), 400, 'INVALID_OTP');
});

t.test('a reset of an account whose address was not verified clears the profile its first sign-up set', async (t) => {
  const s = await setup(t, { env: { REQUIRE_EMAIL_VERIFICATION: 'false' } });
  const email = newEmail('planted');
  const squatter = await s.post('/api/auth/users?client_type=mobile', {
    email,
    password: PASSWORD,
    name: 'Support Team',
  });
  t.equal(squatter.statusCode, 201);
  const planted = await s.app.inject({
    method: 'PATCH',
    url: '/api/auth/profiles/current',
    headers: { authorization: `Bearer ${String(body(squatter).accessToken)}` },
    payload: { profile: { avatar_url: 'https://attacker.example/a.png', bio: 'planted' } },
  });
  t.equal(planted.statusCode, 200);
  const mail = await s.resetMail(email, false);
  t.equal((await s.reset(mail.token)).statusCode, 200);
  const signedIn = await s.signIn(email, NEW_PASSWORD);
  t.same((body(signedIn).user as { profile: unknown }).profile, { name: null, avatar_url: null });
});
