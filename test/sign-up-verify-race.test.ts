// A second sign-up for an address whose owner is verifying it at that moment. The verification takes
// the address's lock first (addressLock), so the sign-up, whose claim takes it too, waits for the
// verification to commit and then finds the account verified; it once read the account as
// unverified and waited on the verification row instead. An outside lock on the account row holds
// the verification in the middle. Both requests run the service's own code.
import { sql } from 'kysely';
import pg from 'pg';
import t from 'tap';
import { buildAuthTestApp, newEmail } from './helpers/auth.ts';
import { lockWaits, usingPostgres } from './helpers/database.ts';

t.test(
  'a sign-up racing the owner’s verification does not put its password on the account',
  { skip: !usingPostgres && 'PostgreSQL only (row locks between connections)' },
  async (t) => {
    const s = await buildAuthTestApp(t, { label: 'verify-race', env: { DATABASE_POOL_MAX: '10' } });
    const post = (url: string, payload: object, remoteAddress = '127.0.0.1') =>
      s.app.inject({ method: 'POST', url, payload, remoteAddress });
    const email = newEmail('verify-race');
    const OWNER = 'owner password 123 long';
    const OTHER = 'other password 123 long';
    const signUp = await post('/api/auth/users?client_type=mobile', { email, password: OWNER });
    t.equal(signUp.statusCode, 202, 'the owner signs up');
    const binding = (signUp.json() as { signUpBinding: string }).signUpBinding;
    const first = await s.nthMail(email, 1);
    s.clock.advance(61); // past the email cooldown, so that the second sign-up may be mailed

    const locker = new pg.Client({ connectionString: s.database.url });
    await locker.connect();
    t.teardown(() => locker.end());
    const waitingOn = await lockWaits(t, s.database.url);
    await locker.query('begin');
    await locker.query('select id from users where email = $1 for update', [email]);
    // The owner's verification consumes the code, then waits for the account's row.
    const verifying = s.verifyElsewhere({ otp: first.token, signUpBinding: binding });
    const onAccount = await waitingOn('update "users"%', 'select % from "users" %for update');
    t.ok(onAccount, 'the verification has consumed the code and waits');
    // The second sign-up waits for the address, which the verification holds.
    const competing = post('/api/auth/users?client_type=mobile', { email, password: OTHER }, '10.9.9.9');
    t.ok(await waitingOn('%pg_advisory_xact_lock%'), 'the second sign-up waits for the address');
    await locker.query('rollback');
    t.equal((await verifying).statusCode, 200, 'the owner is verified');
    t.equal((await competing).statusCode, 202, 'the second sign-up gets the usual answer');

    const row = await s.database.handle.db
      .selectFrom('one_time_codes')
      .select(['consumed_at', 'pending_password_hash'])
      .where('email', '=', email)
      .where('purpose', '=', 'verification')
      .executeTakeFirstOrThrow();
    t.not(row.consumed_at, null, 'the verification row stays consumed');
    t.equal(row.pending_password_hash, null, 'and holds no password');
    const second = await s.nthMail(email, 2);
    t.notOk(second.token, 'the second sign-up mails no code or link for a verified account');
    t.equal((await post('/api/auth/sessions?client_type=mobile', { email, password: OWNER })).statusCode, 200);
    const other = await post('/api/auth/sessions?client_type=mobile', { email, password: OTHER }, '10.9.9.9');
    t.equal(other.statusCode, 401, 'the second password does not sign in');
  },
);

t.test('a verification keeps the password of an account verified meanwhile by another flow', async (t) => {
  const s = await buildAuthTestApp(t, { label: 'verify-meanwhile' });
  const email = newEmail('verify-meanwhile');
  const signUp = await s.app.inject({
    method: 'POST',
    url: '/api/auth/users?client_type=mobile',
    payload: { email, password: 'sign-up password 123 long' },
  });
  t.equal(signUp.statusCode, 202, 'a sign-up waits for its address');
  const mail = await s.nthMail(email, 1);
  // Another flow proved the mailbox and set the password it chose (as a password reset does).
  const { rows } = await sql<{ password_hash: string }>`
    update users set email_verified = true, password_hash = 'scrypt$set-meanwhile', device_epoch = 7
    where email = ${email} returning password_hash`.execute(s.database.handle.db);
  t.equal(rows.length, 1);
  const verified = await s.app.inject({
    method: 'POST',
    url: '/api/auth/email/verify?client_type=mobile',
    payload: { email, otp: mail.code },
  });
  t.equal(verified.statusCode, 200, 'the code still verifies');
  const after = await s.database.handle.db
    .selectFrom('users')
    .select(['password_hash', 'device_epoch', 'password_unproven_since'])
    .where('email', '=', email)
    .executeTakeFirstOrThrow();
  t.equal(after.password_hash, 'scrypt$set-meanwhile', 'the password set meanwhile stays');
  t.equal(after.device_epoch, 7, 'and so do the device signals');
  t.equal(after.password_unproven_since, null);
});
