// Only the mailbox owner ends up with a password or a session: competing sign-ups for one unverified
// address (each variant over the real SMTP capture, as a person would), the per-requester share of
// an address's emails, and a session refreshing only through its own client type.
import type { LightMyRequestResponse } from 'fastify';
import t, { type Test } from 'tap';
import { type AuthTestApp, buildAuthTestApp, newEmail, PASSWORD, pause, QUIET_MS } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';

const VICTIM_PASSWORD = PASSWORD;
const ATTACKER_PASSWORD = 'attacker chose this password';
const OWNER_NEW_PASSWORD = 'the owner picks a new passphrase';

const VICTIM_IP = '203.0.113.10';
const ATTACKER_IP = '198.51.100.66';

async function setup(t: Test) {
  const built = await buildAuthTestApp(t, { label: 'ownership' });
  const { app } = built;
  const signUpAs = (email: string, password: string, ip: string) =>
    app.inject({ method: 'POST', url: '/api/auth/users', payload: { email, password }, remoteAddress: ip });
  const signIn = (email: string, password: string) =>
    app.inject({ method: 'POST', url: '/api/auth/sessions?client_type=mobile', payload: { email, password } });
  const resend = (email: string, ip: string) =>
    app.inject({
      method: 'POST',
      url: '/api/auth/email/send-verification',
      payload: { email },
      remoteAddress: ip,
    });
  const changePassword = (accessToken: string, payload: Record<string, unknown>) =>
    app.inject({
      method: 'POST',
      url: '/api/auth/password',
      headers: { authorization: `Bearer ${accessToken}` },
      payload,
    });
  return { ...built, signUpAs, signIn, resend, changePassword };
}

type Setup = Awaited<ReturnType<typeof setup>>;

const expectStatus = (res: LightMyRequestResponse, status: number, what: string) => {
  if (res.statusCode !== status) throw new Error(`${what}: expected ${status}, got ${res.statusCode} ${res.body}`);
  return res;
};

/** Verifies with the code of the n-th email to `email` and returns the session's access token. */
async function verifyWithMail(s: AuthTestApp, email: string, n: number): Promise<string> {
  const mail = await s.nthMail(email, n);
  const res = expectStatus(await s.verify({ email, otp: mail.code }), 200, `verify with mail ${n}`);
  return (JSON.parse(res.body) as { accessToken: string }).accessToken;
}

/** After competing sign-ups: neither password signs in; the owner's session sets a new one, which does. */
async function assertOnlyTheOwnerGetsIn(t: Test, s: Setup, email: string, ownerAccessToken: string) {
  assertErrorBody(t, await s.signIn(email, ATTACKER_PASSWORD), 401, 'INVALID_CREDENTIALS');
  assertErrorBody(t, await s.signIn(email, VICTIM_PASSWORD), 401, 'INVALID_CREDENTIALS');
  const current = JSON.parse((await s.current(ownerAccessToken)).body) as { user: { emailVerified: boolean } };
  t.equal(current.user.emailVerified, true, 'the verification proved the mailbox');
  const set = await s.changePassword(ownerAccessToken, { newPassword: OWNER_NEW_PASSWORD });
  t.equal(set.statusCode, 204, 'the owner sets a first password without a current one');
  t.equal((await s.signIn(email, OWNER_NEW_PASSWORD)).statusCode, 200, "the owner's new password signs in");
  assertErrorBody(t, await s.signIn(email, ATTACKER_PASSWORD), 401, 'INVALID_CREDENTIALS');
}

t.test('a later sign-up by someone else does not decide the password the owner verifies', async (t) => {
  const s = await setup(t);
  const email = newEmail('later');
  expectStatus(await s.signUpAs(email, VICTIM_PASSWORD, VICTIM_IP), 202, 'victim sign-up');
  await s.firstMail(email);
  s.clock.advance(61);
  expectStatus(await s.signUpAs(email, ATTACKER_PASSWORD, ATTACKER_IP), 202, 'attacker sign-up');
  const second = await s.nthMail(email, 2);
  t.match(second.text, /More than one sign-up was made with this address/, 'the email says the sign-ups competed');
  // The victim uses the newest email, as a person would.
  const token = await verifyWithMail(s, email, 2);
  await assertOnlyTheOwnerGetsIn(t, s, email, token);
});

t.test('a re-send after a competing sign-up carries no password forward', async (t) => {
  const s = await setup(t);
  const email = newEmail('resend');
  expectStatus(await s.signUpAs(email, VICTIM_PASSWORD, VICTIM_IP), 202, 'victim sign-up');
  await s.firstMail(email);
  s.clock.advance(61);
  expectStatus(await s.signUpAs(email, ATTACKER_PASSWORD, ATTACKER_IP), 202, 'attacker sign-up');
  await s.nthMail(email, 2);
  s.clock.advance(61);
  expectStatus(await s.resend(email, VICTIM_IP), 202, 'victim presses resend');
  const token = await verifyWithMail(s, email, 3);
  await assertOnlyTheOwnerGetsIn(t, s, email, token);
});

t.test(
  "a sign-up inside the cooldown is recorded: the attacker's email no longer activates the attacker's password",
  async (t) => {
    const s = await setup(t);
    const email = newEmail('cooldown');
    expectStatus(await s.signUpAs(email, ATTACKER_PASSWORD, ATTACKER_IP), 202, 'attacker sign-up');
    await s.firstMail(email);
    s.clock.advance(5);
    expectStatus(await s.signUpAs(email, VICTIM_PASSWORD, VICTIM_IP), 202, 'victim sign-up 5 s later');
    await pause(QUIET_MS);
    t.equal(s.smtp.to(email).length, 1, 'no second email inside the cooldown');
    // The only email the victim has is the attacker's: using it proves the mailbox and nothing more.
    const token = await verifyWithMail(s, email, 1);
    const row = await s.database.handle.db
      .selectFrom('one_time_codes')
      .select(['contested', 'pending_password_hash'])
      .where('purpose', '=', 'verification')
      .where('email', '=', email)
      .executeTakeFirst()
      .catch((err: Error) => err.message);
    await assertOnlyTheOwnerGetsIn(t, s, email, token);
    t.same(row, { contested: true, pending_password_hash: null }, 'the second sign-up was recorded');
  },
);

t.test('a single sign-up stays as smooth as before: verify, then sign in with its password', async (t) => {
  const s = await setup(t);
  const email = newEmail('single');
  expectStatus(await s.signUpAs(email, VICTIM_PASSWORD, VICTIM_IP), 202, 'sign-up');
  const mail = await s.firstMail(email);
  t.notMatch(mail.text, /More than one sign-up/, 'no competing sign-up is mentioned');
  t.match(
    mail.text,
    /If you did not sign up, do not use this code or link/,
    'says what to do for someone who did not sign up',
  );
  assertErrorBody(t, await s.signIn(email, VICTIM_PASSWORD), 401, 'INVALID_CREDENTIALS');
  assertErrorBody(t, await s.signIn(email, 'not the password'), 401, 'INVALID_CREDENTIALS');
  s.clock.advance(61);
  expectStatus(await s.resend(email, VICTIM_IP), 202, 'resend');
  await verifyWithMail(s, email, 2);
  t.equal((await s.signIn(email, VICTIM_PASSWORD)).statusCode, 200, 'the sign-up password signs in');
});

t.test("one requester gets a small share of an address's daily emails; the owner still gets one", async (t) => {
  const s = await setup(t);
  const email = newEmail('share');
  expectStatus(await s.signUpAs(email, VICTIM_PASSWORD, VICTIM_IP), 202, 'sign-up');
  await s.firstMail(email);
  for (let i = 0; i < 9; i++) {
    s.clock.advance(61);
    expectStatus(await s.resend(email, ATTACKER_IP), 202, `re-send ${i + 1} from another requester`);
  }
  await pause(QUIET_MS);
  const caused = s.smtp.to(email).length - 1;
  t.equal(caused, 3, 'the other requester caused 3 emails, not 9');
  s.clock.advance(61);
  expectStatus(await s.resend(email, '192.0.2.44'), 202, 'the owner asks from a new IP');
  await s.nthMail(email, caused + 2);
  t.pass("the owner's request got an email");
});

t.test('a session refreshes only through the client type it was created for', async (t) => {
  const s = await setup(t);
  const email = newEmail('clienttype');
  expectStatus(await s.signUpAs(email, VICTIM_PASSWORD, VICTIM_IP), 202, 'sign-up');
  const mail = await s.firstMail(email);
  const web = await s.app.inject({ method: 'POST', url: '/api/auth/email/verify', payload: { otp: mail.token } });
  expectStatus(web, 200, 'web verify');
  const cookie = String(web.headers['set-cookie']).match(/refresh_token=([^;]+)/)?.[1] ?? '';
  const { csrfToken } = JSON.parse(web.body) as { csrfToken: string };
  const asMobile = await s.app.inject({
    method: 'POST',
    url: '/api/auth/refresh?client_type=mobile',
    payload: { refreshToken: cookie },
  });
  assertErrorBody(t, asMobile, 401, 'REFRESH_TOKEN_INVALID');
  const asWeb = await s.app.inject({
    method: 'POST',
    url: '/api/auth/refresh',
    cookies: { refresh_token: cookie },
    headers: { 'x-csrf-token': csrfToken },
  });
  t.equal(asWeb.statusCode, 200, 'the web session still refreshes as web (the refused attempt ended nothing)');

  const mobile = JSON.parse((await s.signIn(email, VICTIM_PASSWORD)).body) as { refreshToken: string };
  const mobileAsWeb = await s.app.inject({
    method: 'POST',
    url: '/api/auth/refresh',
    cookies: { refresh_token: mobile.refreshToken },
    headers: { 'x-csrf-token': csrfToken },
  });
  assertErrorBody(t, mobileAsWeb, 401, 'REFRESH_TOKEN_INVALID');
  const mobileAsDesktop = await s.app.inject({
    method: 'POST',
    url: '/api/auth/refresh?client_type=desktop',
    payload: { refreshToken: mobile.refreshToken },
  });
  assertErrorBody(t, mobileAsDesktop, 401, 'REFRESH_TOKEN_INVALID');
});

t.test('changing the password needs the current one and ends the other sessions', async (t) => {
  const s = await setup(t);
  const email = newEmail('change');
  expectStatus(await s.signUpAs(email, VICTIM_PASSWORD, VICTIM_IP), 202, 'sign-up');
  const token = await verifyWithMail(s, email, 1);
  const other = JSON.parse((await s.signIn(email, VICTIM_PASSWORD)).body) as {
    accessToken: string;
    refreshToken: string;
  };
  assertErrorBody(t, await s.changePassword(token, { newPassword: OWNER_NEW_PASSWORD }), 403, 'PASSWORD_INCORRECT');
  assertErrorBody(
    t,
    await s.changePassword(token, { currentPassword: 'wrong one', newPassword: OWNER_NEW_PASSWORD }),
    403,
    'PASSWORD_INCORRECT',
  );
  assertErrorBody(t, await s.changePassword(token, { currentPassword: VICTIM_PASSWORD, newPassword: 'short' }), 400);
  const changed = await s.changePassword(token, { currentPassword: VICTIM_PASSWORD, newPassword: OWNER_NEW_PASSWORD });
  t.equal(changed.statusCode, 204, 'changed');
  t.equal((await s.current(token)).statusCode, 200, 'the session that changed it goes on');
  assertErrorBody(t, await s.current(other.accessToken), 401, 'SESSION_REVOKED');
  const refreshed = await s.app.inject({
    method: 'POST',
    url: '/api/auth/refresh?client_type=mobile',
    payload: { refreshToken: other.refreshToken },
  });
  assertErrorBody(t, refreshed, 401, 'REFRESH_TOKEN_INVALID');
  assertErrorBody(t, await s.signIn(email, VICTIM_PASSWORD), 401, 'INVALID_CREDENTIALS');
  t.equal((await s.signIn(email, OWNER_NEW_PASSWORD)).statusCode, 200, 'the new password signs in');
  const anonymous = await s.app.inject({
    method: 'POST',
    url: '/api/auth/password',
    payload: { newPassword: 'x'.repeat(9) },
  });
  assertErrorBody(t, anonymous, 401, 'UNAUTHORIZED');
});

t.test('an owner left without a password who lost the session gets back in by email', async (t) => {
  const s = await setup(t);
  const email = newEmail('recover');
  expectStatus(await s.signUpAs(email, VICTIM_PASSWORD, VICTIM_IP), 202, 'victim sign-up');
  await s.firstMail(email);
  s.clock.advance(5);
  expectStatus(await s.signUpAs(email, ATTACKER_PASSWORD, ATTACKER_IP), 202, 'attacker sign-up in the cooldown');
  await verifyWithMail(s, email, 1); // the session is then lost (closed tab, another device)
  s.clock.advance(61);
  expectStatus(await s.resend(email, VICTIM_IP), 202, 'the owner asks for a new email');
  const token = await verifyWithMail(s, email, 2);
  t.equal((await s.current(token)).statusCode, 200, "the new email's code signs the owner in");
  await assertOnlyTheOwnerGetsIn(t, s, email, token);
  s.clock.advance(61);
  expectStatus(await s.resend(email, VICTIM_IP), 202, 'resend once the account has a password');
  await pause(QUIET_MS);
  t.equal(s.smtp.to(email).length, 2, 'an account with a password gets no sign-in code that way');
});

t.test('signing up and then signing in tells nothing about whether the address had an account', async (t) => {
  const s = await setup(t);
  const unverified = newEmail('probe-unverified');
  const verified = newEmail('probe-verified');
  expectStatus(await s.signUpAs(unverified, VICTIM_PASSWORD, VICTIM_IP), 202, 'unverified sign-up');
  expectStatus(await s.signUpAs(verified, VICTIM_PASSWORD, VICTIM_IP), 202, 'verified sign-up');
  await verifyWithMail(s, verified, 1);
  await s.firstMail(unverified);
  const answers: Record<string, LightMyRequestResponse> = {};
  for (const [kind, email] of Object.entries({ unknown: newEmail('probe-unknown'), unverified, verified })) {
    s.clock.advance(61);
    expectStatus(await s.signUpAs(email, ATTACKER_PASSWORD, ATTACKER_IP), 202, `prober sign-up (${kind})`);
    answers[kind] = await s.signIn(email, ATTACKER_PASSWORD);
  }
  for (const [kind, res] of Object.entries(answers)) {
    assertErrorBody(t, res, 401, 'INVALID_CREDENTIALS');
    t.equal(res.body, answers.unknown?.body, `${kind}: the same body`);
  }
});

t.test('failed sign-ins by others do not stop the signed-in owner from changing the password', async (t) => {
  const s = await setup(t);
  const email = newEmail('throttled');
  expectStatus(await s.signUpAs(email, VICTIM_PASSWORD, VICTIM_IP), 202, 'sign-up');
  const token = await verifyWithMail(s, email, 1);
  for (let i = 0; i < 8; i++) await s.signIn(email, `guess ${i}`);
  assertErrorBody(t, await s.signIn(email, VICTIM_PASSWORD), 429, 'RATE_LIMITED');
  const changed = await s.changePassword(token, { currentPassword: VICTIM_PASSWORD, newPassword: OWNER_NEW_PASSWORD });
  t.equal(changed.statusCode, 204, 'the password change is not held back by the address back-off');
  for (let i = 0; i < 6; i++)
    await s.changePassword(token, { currentPassword: `guess ${i}`, newPassword: 'x'.repeat(9) });
  assertErrorBody(
    t,
    await s.changePassword(token, { currentPassword: OWNER_NEW_PASSWORD, newPassword: 'y'.repeat(9) }),
    429,
    'RATE_LIMITED',
  );
});

t.test('a code sent before the owner chose a password cannot take the password away', async (t) => {
  const s = await setup(t);
  const email = newEmail('stale-code');
  expectStatus(await s.signUpAs(email, VICTIM_PASSWORD, VICTIM_IP), 202, 'victim sign-up');
  await s.firstMail(email);
  s.clock.advance(5);
  expectStatus(await s.signUpAs(email, ATTACKER_PASSWORD, ATTACKER_IP), 202, 'attacker sign-up in the cooldown');
  const token = await verifyWithMail(s, email, 1);
  s.clock.advance(61);
  expectStatus(await s.resend(email, VICTIM_IP), 202, 'a sign-in code for the account without a password');
  const older = await s.nthMail(email, 2);
  expectStatus(await s.changePassword(token, { newPassword: OWNER_NEW_PASSWORD }), 204, 'the owner sets a password');
  assertErrorBody(t, await s.verify({ email, otp: older.code }), 400, 'INVALID_OTP');
  t.equal((await s.signIn(email, OWNER_NEW_PASSWORD)).statusCode, 200, 'the password is still set');
});

t.test('two password changes at once: one wins, the other changes nothing', async (t) => {
  const s = await setup(t);
  const email = newEmail('two-changes');
  expectStatus(await s.signUpAs(email, VICTIM_PASSWORD, VICTIM_IP), 202, 'sign-up');
  const owner = await verifyWithMail(s, email, 1);
  const other = (JSON.parse((await s.signIn(email, VICTIM_PASSWORD)).body) as { accessToken: string }).accessToken;
  const [a, b] = await Promise.all([
    s.changePassword(owner, { currentPassword: VICTIM_PASSWORD, newPassword: OWNER_NEW_PASSWORD }),
    s.changePassword(other, { currentPassword: VICTIM_PASSWORD, newPassword: ATTACKER_PASSWORD }),
  ]);
  const statuses = [a.statusCode, b.statusCode];
  t.equal(statuses.filter((status) => status === 204).length, 1, `exactly one change went through (${statuses})`);
  const winner = a.statusCode === 204 ? OWNER_NEW_PASSWORD : ATTACKER_PASSWORD;
  const loser = a.statusCode === 204 ? ATTACKER_PASSWORD : OWNER_NEW_PASSWORD;
  const refused = a.statusCode === 204 ? b : a;
  t.ok([401, 403].includes(refused.statusCode), `the other was refused (${refused.statusCode} ${refused.body})`);
  t.equal((await s.signIn(email, winner)).statusCode, 200, "the winner's password is the account's");
  assertErrorBody(t, await s.signIn(email, loser), 401, 'INVALID_CREDENTIALS');
});
