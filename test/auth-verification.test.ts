// Email verification: the rules for codes and link tokens (POST /api/auth/email/verify) and for
// sending new verification emails (POST /api/auth/email/send-verification).
import { randomBytes } from 'node:crypto';
import type { LightMyRequestResponse } from 'fastify';
import t, { type Test } from 'tap';
import { buildAuthTestApp, newEmail, PASSWORD, pause, QUIET_MS, wrongCode } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import type { ReceivedMail } from './helpers/smtp.ts';

async function setup(t: Test) {
  const built = await buildAuthTestApp(t, { label: 'verification' });

  /** Signs up (verification required) and returns the verification email. */
  async function signUp(email: string): Promise<ReceivedMail> {
    const res = await built.signUp(email);
    if (res.statusCode !== 202) throw new Error(`sign-up of ${email}: ${res.statusCode} ${res.body}`);
    return built.firstMail(email);
  }

  return { ...built, signUp };
}

function assertInvalidOtp(t: Test, res: LightMyRequestResponse, label: string) {
  t.test(label, async (t) => {
    assertErrorBody(t, res, 400, 'INVALID_OTP');
  });
}

t.test('verify: the shape of otp and email decides between INVALID_INPUT and a real check', async (t) => {
  const { signUp, verify } = await setup(t);
  const email = newEmail('shape');
  const mail = await signUp(email);
  const hex = randomBytes(32).toString('hex');
  const cases: Array<[string, Record<string, unknown>]> = [
    ['a 6-digit code without email', { otp: mail.code }],
    ['a link token with email', { otp: mail.token, email }],
    ['5 digits', { otp: '12345', email }],
    ['7 digits', { otp: '1234567', email }],
    ['6 letters', { otp: 'abcdef', email }],
    ['6 digits with a space', { otp: '123 45', email }],
    ['63 hex characters', { otp: hex.slice(1) }],
    ['65 hex characters', { otp: `${hex}a` }],
    ['64 characters that are not hex', { otp: 'g'.repeat(64) }],
    ['an empty otp', { otp: '', email }],
    ['no otp', { email }],
    ['a malformed email with a code', { otp: mail.code, email: 'not-an-email' }],
  ];
  for (const [label, payload] of cases) {
    const res = await verify(payload);
    t.test(label, async (t) => {
      assertErrorBody(t, res, 400, 'INVALID_INPUT');
    });
  }
  const res = await verify({ otp: mail.token });
  t.equal(res.statusCode, 200, 'the rejected shapes consumed nothing: the link token alone still verifies');
});

t.test('wrong, unknown-address, used, voided and expired codes and tokens share one INVALID_OTP body', async (t) => {
  const { signUp, nthMail, verify, sendVerification, clock } = await setup(t);
  const wrong = newEmail('wrong');
  const used = newEmail('used');
  const voided = newEmail('voided');
  const early = newEmail('early');
  const late = newEmail('late');
  const mailWrong = await signUp(wrong);
  const mailUsed = await signUp(used);
  const mailVoided = await signUp(voided);
  const mailEarly = await signUp(early);
  const mailLate = await signUp(late);

  const failures: Array<[string, LightMyRequestResponse]> = [];
  failures.push(['a wrong code', await verify({ otp: wrongCode(mailWrong.code ?? '0'), email: wrong })]);
  failures.push(['a code for an unknown address', await verify({ otp: mailWrong.code, email: newEmail('nobody') })]);
  failures.push(['an unknown link token', await verify({ otp: randomBytes(32).toString('hex') })]);
  failures.push([
    "another account's code",
    await verify({
      otp: mailUsed.code === mailWrong.code ? wrongCode(mailUsed.code ?? '0') : mailUsed.code,
      email: wrong,
    }),
  ]);

  t.equal((await verify({ otp: mailUsed.code, email: used })).statusCode, 200, 'control: the code works once');
  failures.push(['a used code', await verify({ otp: mailUsed.code, email: used })]);
  failures.push(['the link token of a used code', await verify({ otp: mailUsed.token })]);

  clock.advance(61);
  t.equal((await sendVerification(voided)).statusCode, 202);
  const fresh = await nthMail(voided, 2);
  failures.push(['a code voided by a newer email', await verify({ otp: mailVoided.code, email: voided })]);
  failures.push(['a link token voided by a newer email', await verify({ otp: mailVoided.token })]);
  t.equal((await verify({ otp: fresh.code, email: voided })).statusCode, 200, 'control: the newer code works');

  // The test clock also moves with real time, so the control keeps a margin for the seconds this test takes.
  clock.advance(560 - 61);
  t.equal(
    (await verify({ otp: mailEarly.code, email: early })).statusCode,
    200,
    'control: a code 560 s old still works',
  );
  clock.advance(601 - 560);
  failures.push(['a code over 601 s old', await verify({ otp: mailLate.code, email: late })]);
  failures.push(['a link token over 601 s old', await verify({ otp: mailLate.token })]);

  const [first] = failures;
  if (first === undefined) throw new Error('no failures collected');
  for (const [label, res] of failures) {
    assertInvalidOtp(t, res, label);
    t.equal(res.body, first[1].body, `${label}: the body is byte-identical to "${first[0]}"`);
  }
});

t.test('failed attempts count per code: four wrong tries leave it usable', async (t) => {
  const { signUp, verify } = await setup(t);
  const email = newEmail('four');
  const mail = await signUp(email);
  const code = mail.code ?? '';
  for (let k = 1; k <= 4; k++) assertInvalidOtp(t, await verify({ otp: wrongCode(code, k), email }), `wrong try ${k}`);
  t.equal((await verify({ otp: code, email })).statusCode, 200, 'the right code still works after 4 wrong tries');
});

t.test('five wrong tries burn the code; the code of a new email works again', async (t) => {
  const { signUp, nthMail, verify, sendVerification, clock } = await setup(t);
  const email = newEmail('five');
  const mail = await signUp(email);
  const code = mail.code ?? '';
  for (let k = 1; k <= 5; k++) assertInvalidOtp(t, await verify({ otp: wrongCode(code, k), email }), `wrong try ${k}`);
  assertInvalidOtp(t, await verify({ otp: code, email }), 'the right code after 5 wrong tries');
  clock.advance(61);
  t.equal((await sendVerification(email)).statusCode, 202);
  const next = await nthMail(email, 2);
  t.equal((await verify({ otp: next.code, email })).statusCode, 200, 'a fresh code has its own count');
});

t.test('five wrong codes void the code but not the link sent with it', async (t) => {
  const { signUp, verify } = await setup(t);
  const email = newEmail('link-survives');
  const mail = await signUp(email);
  const code = mail.code ?? '';
  for (let k = 1; k <= 5; k++) assertInvalidOtp(t, await verify({ otp: wrongCode(code, k), email }), `wrong try ${k}`);
  assertInvalidOtp(t, await verify({ otp: code, email }), 'the code is void');
  t.equal(
    (await verify({ otp: mail.token })).statusCode,
    200,
    'the link still works: guessing codes cannot lock its owner out',
  );
});

t.test('at most 10 verification emails per address per day', async (t) => {
  const { signUp, app, smtp, clock } = await setup(t);
  const email = newEmail('daily-cap');
  // Each request from a requester of its own, so that only the address's cap applies (one
  // requester's share is smaller: see account-ownership.test.ts).
  const sendFrom = (n: number) =>
    app.inject({
      method: 'POST',
      url: '/api/auth/email/send-verification',
      payload: { email },
      remoteAddress: `192.0.2.${n}`,
    });
  await signUp(email);
  for (let i = 2; i <= 12; i++) {
    clock.advance(61);
    t.equal((await sendFrom(i)).statusCode, 202);
  }
  await smtp.waitFor(email, 10);
  await pause(QUIET_MS);
  t.equal(smtp.to(email).length, 10, 'the 11th and 12th requests of the day send nothing');
  clock.advance(24 * 3600);
  t.equal((await sendFrom(13)).statusCode, 202);
  await smtp.waitFor(email, 11);
  t.pass('a day later, mail flows again');
});

t.test('50 parallel submissions of one valid code yield exactly one session', async (t) => {
  const { signUp, verify } = await setup(t);
  const email = newEmail('race');
  const mail = await signUp(email);
  const answers = await Promise.all(Array.from({ length: 50 }, () => verify({ otp: mail.code, email })));
  const ok = answers.filter((res) => res.statusCode === 200);
  const refused = answers.filter((res) => res.statusCode === 400 && res.json().error === 'INVALID_OTP');
  t.equal(ok.length, 1, 'exactly one 200');
  t.equal(refused.length, 49, '49 × 400 INVALID_OTP');
  const others = answers.filter((res) => res.statusCode !== 200 && !refused.includes(res));
  t.same(
    others.map((res) => `${res.statusCode} ${res.body}`),
    [],
    'no other answers',
  );
});

t.test('a link token works once and consumes the code of the same email', async (t) => {
  const { signUp, verify } = await setup(t);
  const email = newEmail('link-first');
  const mail = await signUp(email);
  const res = await verify({ otp: mail.token });
  t.equal(res.statusCode, 200, 'the link token verifies');
  t.equal(res.json().user.emailVerified, true);
  assertInvalidOtp(t, await verify({ otp: mail.token }), 'the same link token again');
  assertInvalidOtp(t, await verify({ otp: mail.code, email }), 'the code of the same email');
});

t.test('a code consumes the link token of the same email', async (t) => {
  const { signUp, verify } = await setup(t);
  const email = newEmail('code-first');
  const mail = await signUp(email);
  t.equal((await verify({ otp: mail.code, email: email.toUpperCase() })).statusCode, 200, 'the code verifies');
  assertInvalidOtp(t, await verify({ otp: mail.token }), 'the link token of the same email');
});

t.test('a successful verification marks the address verified for sign-in and the current session', async (t) => {
  const { app, signUp, verify, current } = await setup(t);
  const email = newEmail('verified');
  const mail = await signUp(email);
  const signIn = () =>
    app.inject({ method: 'POST', url: '/api/auth/sessions', payload: { email, password: PASSWORD } });
  assertErrorBody(t, await signIn(), 401, 'INVALID_CREDENTIALS');
  const res = await verify({ otp: mail.code, email });
  t.equal(res.statusCode, 200);
  const { accessToken, user } = res.json();
  t.equal(user.emailVerified, true, 'the session result says verified');
  const me = await current(accessToken);
  t.equal(me.statusCode, 200);
  t.equal(me.json().user.emailVerified, true, 'the current session says verified');
  t.equal((await signIn()).statusCode, 200, 'sign-in is no longer refused');
});

t.test('send-verification answers the same 202 for unknown, verified and pending addresses', async (t) => {
  const { signUp, verify, sendVerification, smtp, clock } = await setup(t);
  const verified = newEmail('done');
  const pending = newEmail('pending');
  const unknown = newEmail('unknown');
  const verifiedMail = await signUp(verified);
  await signUp(pending);
  t.equal((await verify({ otp: verifiedMail.code, email: verified })).statusCode, 200);
  clock.advance(61);

  const answers = {
    unknown: await sendVerification(unknown),
    verified: await sendVerification(verified),
    pending: await sendVerification(pending.toUpperCase()),
  };
  for (const [label, res] of Object.entries(answers)) {
    t.equal(res.statusCode, 202, `${label}: 202`);
    t.same(Object.keys(res.json()), ['success', 'message'], `${label}: body is {success, message}`);
    t.equal(res.json().success, true, `${label}: success is true`);
    t.type(res.json().message, 'string');
    t.equal(res.body, answers.unknown.body, `${label}: the same body as for an unknown address`);
  }
  const [, second] = await smtp.waitFor(pending, 2);
  t.match(second?.code, /^\d{6}$/, 'the pending address gets a new code');
  t.match(second?.token, /^[0-9a-f]{64}$/, 'and a new link token');
  await pause(QUIET_MS);
  t.equal(smtp.to(unknown).length, 0, 'nothing is sent to an unknown address');
  t.equal(smtp.to(verified).length, 1, 'nothing more is sent to a verified address');
  t.equal(smtp.to(pending).length, 2, 'exactly one more email to the pending address');
});

t.test('a new verification email voids the earlier code and link token', async (t) => {
  const { signUp, nthMail, verify, sendVerification, clock } = await setup(t);
  const email = newEmail('renew');
  const first = await signUp(email);
  clock.advance(61);
  t.equal((await sendVerification(email)).statusCode, 202);
  const second = await nthMail(email, 2);
  t.not(second.token, first.token, 'a different link token');
  assertInvalidOtp(t, await verify({ otp: first.token }), 'the earlier link token');
  assertInvalidOtp(
    t,
    await verify({ otp: second.code === first.code ? wrongCode(first.code ?? '0') : first.code, email }),
    'the earlier code',
  );
  t.equal((await verify({ otp: second.token })).statusCode, 200, 'the new link token works');
});

t.test('at most one verification email per address per 60 s, sign-up included', async (t) => {
  const { signUp, nthMail, sendVerification, smtp, clock } = await setup(t);
  const email = newEmail('cooldown');
  const other = newEmail('cooldown-other');
  await signUp(email);
  await signUp(other);

  t.equal((await sendVerification(email)).statusCode, 202, 'right after sign-up: 202');
  // The test clock also moves with real time: 50 s leaves a margin below the 60 s cooldown.
  clock.advance(50);
  t.equal((await sendVerification(email)).statusCode, 202, '50 s after sign-up: 202');
  await pause(QUIET_MS);
  t.equal(smtp.to(email).length, 1, 'nothing sent within 60 s of the sign-up email');

  clock.advance(11);
  t.equal((await sendVerification(email)).statusCode, 202);
  t.match((await nthMail(email, 2)).code, /^\d{6}$/, '61 s after sign-up: a new email with a code is sent');

  t.equal((await sendVerification(email)).statusCode, 202, 'right after that send: 202');
  t.equal((await sendVerification(other)).statusCode, 202);
  t.match((await nthMail(other, 2)).code, /^\d{6}$/, 'the cooldown of one address does not hold back another');
  clock.advance(30);
  t.equal((await sendVerification(email)).statusCode, 202, '30 s after it: 202');
  await pause(QUIET_MS);
  t.equal(smtp.to(email).length, 2, 'nothing sent within 60 s of the previous email');

  clock.advance(31);
  t.equal((await sendVerification(email)).statusCode, 202);
  t.match((await nthMail(email, 3)).code, /^\d{6}$/, '61 s after the previous email: sent again');
});

t.test('a request held back by the cooldown leaves the last code working', async (t) => {
  const { signUp, verify, sendVerification, smtp } = await setup(t);
  const email = newEmail('held');
  const mail = await signUp(email);
  t.equal((await sendVerification(email)).statusCode, 202);
  await pause(QUIET_MS);
  t.equal(smtp.to(email).length, 1, 'no second email');
  t.equal((await verify({ otp: mail.code, email })).statusCode, 200, 'the code from sign-up still verifies');
});
