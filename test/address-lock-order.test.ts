// Every transaction that writes an address's email limits or its codes takes the address's lock
// first (addressLock in src/db/repositories/address-limits.ts): the claims of every send, then
// their codes; the guesses, then the code and the address's count; the flows that spend or delete
// the address's codes, then the code and the account's row. These are the orders of flows meeting
// at one address that once waited for each other until PostgreSQL failed one of them (SQLSTATE
// 40P01, a 503). PostgreSQL only: row locks between connections.
import { sql } from 'kysely';
import t from 'tap';
import { EMAIL_LIMITS } from '../src/auth/auth-context.ts';
import { deriveKeys } from '../src/auth/crypto.ts';
import { oneTimeCodeHmac } from '../src/auth/one-time-codes.ts';
import { claimEmailSend, lockAddresses } from '../src/db/repositories/address-limits.ts';
import { insertPasswordlessUser, lockUserByEmail } from '../src/db/repositories/mailbox-accounts.ts';
import { consume, issueSignInCode } from '../src/db/repositories/one-time-codes.ts';
import { buildAuthTestApp, newEmail, PASSWORD, toSession, wrongCode } from './helpers/auth.ts';
import { heldTransaction, lockWaiters, lockWaits, usingPostgres } from './helpers/database.ts';
import { assertErrorBody } from './helpers/error-body.ts';

const JWT_SECRET = 'address-lock-order-test-secret-0c4f6e2a9b1d';
const keys = deriveKeys(JWT_SECRET);
const CODE = '975310';
const only = { skip: !usingPostgres && 'PostgreSQL only (row locks between connections)' };

async function setup(t: Parameters<typeof buildAuthTestApp>[0]) {
  const s = await buildAuthTestApp(t, { label: 'address-lock-order', env: { JWT_SECRET } });
  const db = s.database.handle.db;
  const waits = await lockWaits(t, s.database.url);
  const waiters = await lockWaiters(t, s.database.url);
  const post = (url: string, payload: Record<string, unknown>) => s.app.inject({ method: 'POST', url, payload });
  /** A sign-in code for the address, as a send stores it (after its claim, within the transaction). */
  const signInCode = (codeHmac: string) => ({ codeHmac, codeExpiresAt: new Date(s.clock.now().getTime() + 600_000) });
  return { ...s, db, waits, waiters, post, signInCode };
}

const hmacOf = (email: string, code: string) => oneTimeCodeHmac(keys, 'sign_in', email, code);

// A wrong guess (G) held the address while it waited for the sign-in code that a right-code sign-in
// (P) was spending; P then needed the account's row, which a sign-up at the address (SU) had written
// before its claim waited for the address. Each waited for the next. The sign-up now claims first,
// and P takes the address first too: G and SU wait for it there.
for (const existing of [false, true]) {
  const where = existing ? 'an account made by a provider sign-in' : 'a new address';
  t.test(`a guess, a right-code sign-in and a sign-up at one address all finish (${where})`, only, async (t) => {
    const s = await setup(t);
    const email = newEmail('three-flows');
    if (existing) {
      const { rows } = await sql<{ id: string }>`insert into users (email, password_hash, email_verified)
        values (${email}, null, true) returning id`.execute(s.db);
      await sql`insert into user_providers (user_id, provider, provider_account_id)
        values (${rows[0]?.id}, 'github', '12345')`.execute(s.db);
    }
    await s.db.transaction().execute(async (trx) => {
      await claimEmailSend(trx, email, { requester: '192.0.2.1', kind: 'sign_in' }, s.clock.now(), EMAIL_LIMITS);
      await issueSignInCode(trx, email, s.signInCode(hmacOf(email, CODE)), true, s.clock.now());
    });
    const row = await s.db
      .selectFrom('one_time_codes')
      .selectAll()
      .where('email', '=', email)
      .executeTakeFirstOrThrow();
    // P, as passwordless-sign-in.ts spends a right code: the address, the code, the account's row.
    const rightCode = heldTransaction(
      s.db,
      async (trx) => {
        await lockAddresses(trx, [email]);
        await consume(trx, row, s.clock.now());
      },
      async (trx) => {
        if ((await lockUserByEmail(trx, email)) === undefined) await insertPasswordlessUser(trx, email, null);
      },
    );
    await rightCode.held;
    const guess = s.post('/api/auth/sessions?client_type=mobile', { method: 'otp', email, otp: wrongCode(CODE, 1) });
    t.ok(await s.waits('%failed_attempts = failed_attempts +%'), 'the guess waits for the address');
    s.clock.advance(61);
    const signUp = s.signUp(email);
    t.ok(await s.waiters(2, ['%pg_advisory_xact_lock%']), 'the sign-up waits for the address too');
    const [guessed, signedUp] = await Promise.all([
      guess,
      signUp,
      t.resolves(rightCode.commit(), 'the right code is spent'),
    ]);
    assertErrorBody(t, guessed, 400, 'INVALID_OTP');
    t.equal(signedUp.statusCode, 202, 'the sign-up is answered (verification required)');
  });
}

// A code sent through a known device writes no row of email_send_log (the device has a budget of
// its own), so a lock on that row could not order a guess before a send from another client: the
// send's claim inserts the row and then needs the code, which the guess took when it found no row.
t.test('a guess at a code a known device asked for waits for a send from elsewhere', only, async (t) => {
  const s = await setup(t);
  const email = newEmail('device-code');
  const device = { requester: '192.0.2.2', device: 'device-1', kind: 'sign_in' as const };
  await s.db.transaction().execute(async (trx) => {
    t.same(await claimEmailSend(trx, email, device, s.clock.now(), EMAIL_LIMITS), {
      pool: 'device',
      device: 'device-1',
    });
    await issueSignInCode(trx, email, s.signInCode(hmacOf(email, CODE)), true, s.clock.now());
  });
  const { rows } = await sql<{
    n: number;
  }>`select count(*)::int as n from email_send_log where email = ${email}`.execute(s.db);
  t.same(rows, [{ n: 0 }], 'a live code, and no row of email_send_log');
  const send = heldTransaction(
    s.db,
    (trx) => claimEmailSend(trx, email, { requester: '192.0.2.3', kind: 'sign_in' }, s.clock.now(), EMAIL_LIMITS),
    (trx) => issueSignInCode(trx, email, s.signInCode(hmacOf(email, '135799')), true, s.clock.now()),
  );
  await send.held;
  const guess = s.post('/api/auth/sessions?client_type=mobile', { method: 'otp', email, otp: wrongCode(CODE, 1) });
  t.ok(await s.waits('%pg_advisory_xact_lock%'), 'the guess waits for the address');
  await t.resolves(send.commit(), 'the send commits');
  assertErrorBody(t, await guess, 400, 'INVALID_OTP');
  const counts = await sql<{ failed: number; window: number }>`
    select c.failed_attempts as failed, l.code_attempts_in_window as window
    from one_time_codes c join email_send_log l using (email) where c.email = ${email}`.execute(s.db);
  t.same(counts.rows, [{ failed: 1, window: 1 }], 'the guess counted at the new code and at the address');
});

// The flows that spend or delete an address's codes take its lock first too, before the account's
// row and the codes: each pair below once held one of the two (a code, the account's row) while
// waiting for the other. The test holds the account's row so that both flows start, the first one
// queued first for the row; then lets go. One of them now waits for the other at the address
// instead, and the second finds the code gone (a wrong code's answer), never a 503.
async function heldAccount(s: Awaited<ReturnType<typeof setup>>, email: string) {
  const held = heldTransaction(s.db, (trx) => sql`select id from users where email = ${email} for update`.execute(trx));
  await held.held;
  return held;
}

const resetPassword = (s: Awaited<ReturnType<typeof setup>>, token: string | undefined) =>
  s.post('/api/auth/email/reset-password', { otp: token, newPassword: 'a new passphrase after all' });

t.test('a right sign-in code and the verification of an unverified account at one address', only, async (t) => {
  const s = await setup(t);
  const { waiters } = s;
  const email = newEmail('sign-in-and-verify');
  t.equal((await s.signUp(email)).statusCode, 202);
  const verification = await s.nthMail(email, 1);
  s.clock.advance(61);
  t.equal((await s.post('/api/auth/email/send-otp', { email })).statusCode, 202);
  const signInCode = await s.nthMail(email, 2);
  const account = await heldAccount(s, email);
  const signIn = s.post('/api/auth/sessions?client_type=mobile', { method: 'otp', email, otp: signInCode.code });
  t.ok(await waiters(1), 'the sign-in waits');
  const verify = s.verify({ email, otp: verification.code });
  t.ok(await waiters(2), 'the verification waits');
  await account.commit();
  const [signedIn, verified] = await Promise.all([signIn, verify]);
  t.equal(signedIn.statusCode, 200, signedIn.body);
  assertErrorBody(t, verified, 400, 'INVALID_OTP');
});

t.test('a right sign-in code and a reset by link at one address', only, async (t) => {
  const s = await setup(t);
  const { waiters } = s;
  const email = await s.verifiedAccount('sign-in-and-reset');
  s.clock.advance(61);
  t.equal((await s.post('/api/auth/email/send-reset-password', { email })).statusCode, 202);
  const reset = await s.nthMail(email, 2);
  s.clock.advance(61);
  t.equal((await s.post('/api/auth/email/send-otp', { email })).statusCode, 202);
  const signInCode = await s.nthMail(email, 3);
  const account = await heldAccount(s, email);
  const resetting = resetPassword(s, reset.token);
  t.ok(await waiters(1), 'the reset waits');
  const signIn = s.post('/api/auth/sessions?client_type=mobile', { method: 'otp', email, otp: signInCode.code });
  t.ok(await waiters(2), 'the sign-in waits');
  await account.commit();
  const [wasReset, signedIn] = await Promise.all([resetting, signIn]);
  t.equal(wasReset.statusCode, 200, wasReset.body);
  assertErrorBody(t, signedIn, 400, 'INVALID_OTP');
});

t.test('a reset code exchanged while a reset by link runs at one address', only, async (t) => {
  const s = await setup(t);
  const { waiters } = s;
  const email = await s.verifiedAccount('exchange-and-reset');
  s.clock.advance(61);
  t.equal((await s.post('/api/auth/email/send-reset-password', { email })).statusCode, 202);
  const reset = await s.nthMail(email, 2);
  const account = await heldAccount(s, email);
  const resetting = resetPassword(s, reset.token);
  t.ok(await waiters(1), 'the reset waits');
  const exchange = s.post('/api/auth/email/exchange-reset-password-token', { email, code: reset.code });
  t.ok(await waiters(2), 'the exchange waits');
  await account.commit();
  const [wasReset, exchanged] = await Promise.all([resetting, exchange]);
  t.equal(wasReset.statusCode, 200, wasReset.body);
  assertErrorBody(t, exchanged, 400, 'INVALID_OTP');
});

t.test('a password change and a second reset email at one address', only, async (t) => {
  const s = await setup(t);
  const { waiters } = s;
  const email = await s.verifiedAccount('change-and-reset-email');
  const { accessToken } = toSession(
    await s.post('/api/auth/sessions?client_type=mobile', { method: 'password', email, password: PASSWORD }),
  );
  s.clock.advance(61);
  t.equal((await s.post('/api/auth/email/send-reset-password', { email })).statusCode, 202);
  await s.nthMail(email, 2);
  s.clock.advance(61);
  const account = await heldAccount(s, email);
  const change = s.app.inject({
    method: 'POST',
    url: '/api/auth/password',
    headers: { authorization: `Bearer ${accessToken}` },
    payload: { currentPassword: PASSWORD, newPassword: 'a changed passphrase indeed' },
  });
  t.ok(await waiters(1), 'the change waits');
  const send = s.post('/api/auth/email/send-reset-password', { email });
  t.ok(await waiters(2), 'the reset email waits');
  await account.commit();
  const [changed, sent] = await Promise.all([change, send]);
  t.equal(changed.statusCode, 204, changed.body);
  t.equal(sent.statusCode, 202, sent.body);
  await s.nthMail(email, 3);
});
