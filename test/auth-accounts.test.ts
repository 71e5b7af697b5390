// Accounts: what sign-up stores and answers (case, password length, repeated addresses, names),
// the administrator account from the environment, and secrets never kept in plain text.
import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import t, { type Test } from 'tap';
import type { Env } from '../src/config.ts';
import { buildAuthTestApp, decodeClaims, newEmail, PASSWORD, pause, QUIET_MS, withoutBinding } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';

async function setup(t: Test, env: Env = {}) {
  const built = await buildAuthTestApp(t, { env, label: 'accounts' });
  const { app, database } = built;

  // Unlike the shared signUp, this one takes the whole payload (the password defaults to PASSWORD).
  const signUp = (payload: Record<string, unknown>) =>
    app.inject({ method: 'POST', url: '/api/auth/users', payload: { password: PASSWORD, ...payload } });

  const signIn = (email: string, password = PASSWORD, client = 'mobile') =>
    app.inject({ method: 'POST', url: `/api/auth/sessions?client_type=${client}`, payload: { email, password } });

  /** Every row of a table, as JSON text (so a secret can be searched for in any column). */
  async function tableText(table: string): Promise<{ rows: Record<string, unknown>[]; text: string }> {
    const { rows } = await sql<Record<string, unknown>>`select * from ${sql.table(table)}`.execute(database.handle.db);
    return { rows, text: JSON.stringify(rows) };
  }

  async function allTablesText(): Promise<string> {
    const { rows } = await sql<{ table_name: string }>`
      select table_name from information_schema.tables
      where table_schema = 'public' and table_type = 'BASE TABLE'
    `.execute(database.handle.db);
    const texts = await Promise.all(rows.map(async (row) => (await tableText(row.table_name)).text));
    return texts.join('\n');
  }

  return { ...built, signUp, signIn, tableText, allTablesText };
}

t.test('email addresses are stored, mailed and returned in lower case', async (t) => {
  const { signUp, verify, firstMail, tableText } = await setup(t);
  const mixed = `Mixed.Case-${randomBytes(3).toString('hex')}@Example.COM`;
  const lower = mixed.toLowerCase();
  t.equal((await signUp({ email: mixed })).statusCode, 202);
  const mail = await firstMail(lower);
  t.ok(mail.to.includes(lower), 'the email goes to the address');
  const users = await tableText('users');
  t.ok(users.text.includes(lower), 'the users table holds the lower-case address');
  t.notOk(users.text.includes(mixed), 'and not the address as typed');
  const res = await verify({ otp: mail.code, email: mixed });
  t.equal(res.statusCode, 200, 'the code verifies with the address as typed');
  t.equal(res.json().user.email, lower, 'user.email is lower case');
});

t.test('the password must be 8 to 256 characters', async (t) => {
  const { signUp, smtp, tableText } = await setup(t);
  const cases: Array<[number, number]> = [
    [7, 400],
    [8, 202],
    [256, 202],
    [257, 400],
  ];
  const rejected: string[] = [];
  for (const [length, status] of cases) {
    const email = newEmail(`pw${length}`);
    const res = await signUp({ email, password: 'p'.repeat(length) });
    if (status === 400) {
      rejected.push(email);
      t.test(`${length} characters: 400 INVALID_INPUT`, async (t) => {
        assertErrorBody(t, res, 400, 'INVALID_INPUT');
      });
    } else {
      t.equal(res.statusCode, status, `${length} characters: ${status}`);
      await smtp.waitFor(email, 1);
    }
  }
  await pause(QUIET_MS);
  const users = await tableText('users');
  for (const email of rejected) {
    t.equal(smtp.to(email).length, 0, `no mail to ${email}`);
    t.notOk(users.text.includes(email), `no account for ${email}`);
  }
});

t.test('signing up a verified address again gives the same answer and mails only a notice', async (t) => {
  const { signUp, verify, firstMail, smtp, clock } = await setup(t);
  const email = newEmail('again');
  const first = await signUp({ email });
  const mail = await firstMail(email);
  t.equal((await verify({ otp: mail.code, email })).statusCode, 200);
  clock.advance(61);
  const again = await signUp({ email: email.toUpperCase(), password: 'another password entirely' });
  t.equal(again.statusCode, first.statusCode, 'the same status');
  t.equal(again.statusCode, 202, '202');
  t.equal(withoutBinding(again.body), withoutBinding(first.body), 'the same body');
  const mails = await smtp.waitFor(email, 2);
  await pause(QUIET_MS);
  t.equal(smtp.to(email).length, 2, 'exactly one more email');
  const notice = mails[1];
  t.ok(notice && notice.text.trim().length > 0, 'the notice says something');
  t.equal(notice?.code, undefined, 'the notice has no 6-digit code');
  t.equal(notice?.token, undefined, 'the notice has no link token');
  t.equal(notice?.link, undefined, 'the notice has no verification link');
  t.notMatch(notice?.text ?? '', /\b\d{6}\b/, 'no 6-digit number in the text');
  t.notMatch(`${notice?.text}\n${notice?.html}`, /[0-9a-f]{64}/i, 'no 64-hex token anywhere in it');
});

t.test(
  'an unverified address signed up again: same answer, a new code, and the verification activates neither password',
  async (t) => {
    const { signUp, signIn, verify, firstMail, smtp, clock } = await setup(t);
    const email = newEmail('prehijack');
    // Someone who does not own the address registers it first, with a password of their own.
    const squatter = await signUp({ email, password: 'squatter password' });
    const squatterMail = await firstMail(email);
    clock.advance(61);
    // The owner signs up later: the same answer, and a fresh code that voids the first one.
    const owner = await signUp({ email: email.toUpperCase(), password: 'owner password' });
    t.equal(owner.statusCode, squatter.statusCode);
    t.equal(withoutBinding(owner.body), withoutBinding(squatter.body), 'the same body');
    const mails = await smtp.waitFor(email, 2);
    const ownerMail = mails[1];
    t.match(ownerMail?.code, /^\d{6}$/, 'the second sign-up mails a new code');
    t.not(ownerMail?.code === squatterMail.code && ownerMail?.token === squatterMail.token, true, 'a new pair');
    t.equal((await verify({ otp: squatterMail.token })).statusCode, 400, 'the first link is void');
    t.equal((await verify({ otp: ownerMail?.code, email })).statusCode, 200, 'the owner verifies');
    // Two sign-ups competed: the verification proves the mailbox but cannot tell whose password
    // is the owner's, so it activates neither (the owner sets one through the session it opened).
    t.equal((await signIn(email, 'owner password')).statusCode, 401, "the owner's sign-up password is not activated");
    t.equal((await signIn(email, 'squatter password')).statusCode, 401, "the squatter's password does not sign in");
  },
);

t.test('a repeated sign-up does not change the password of a verified account', async (t) => {
  const { signUp, signIn, verify, firstMail, clock } = await setup(t);
  const email = newEmail('takeover');
  t.equal((await signUp({ email })).statusCode, 202);
  const mail = await firstMail(email);
  t.equal((await verify({ otp: mail.token })).statusCode, 200);
  clock.advance(61);
  const attacker = 'attacker chosen password';
  t.equal((await signUp({ email, password: attacker })).statusCode, 202);
  t.equal((await signIn(email)).statusCode, 200, 'the original password still signs in');
  assertErrorBody(t, await signIn(email, attacker), 401, 'INVALID_CREDENTIALS');
});

t.test('the name given at sign-up becomes profile.name; without one it is null', async (t) => {
  const { signUp, verify, firstMail } = await setup(t);
  const named = newEmail('named');
  const anonymous = newEmail('anonymous');
  t.equal((await signUp({ email: named, name: 'Ada Lovelace' })).statusCode, 202);
  t.equal((await signUp({ email: anonymous })).statusCode, 202);
  const a = await verify({ otp: (await firstMail(named)).token });
  const b = await verify({ otp: (await firstMail(anonymous)).token });
  t.same(a.json().user.profile, { name: 'Ada Lovelace', avatar_url: null });
  t.same(b.json().user.profile, { name: null, avatar_url: null });
});

t.test('ADMIN_EMAIL/ADMIN_PASSWORD: an administrator who signs in without verification', async (t) => {
  const adminEmail = newEmail('admin');
  const adminPassword = 'administrator password';
  const { signUp, signIn, verify, firstMail, current } = await setup(t, {
    ADMIN_EMAIL: adminEmail,
    ADMIN_PASSWORD: adminPassword,
  });

  const admin = await signIn(adminEmail, adminPassword);
  t.equal(admin.statusCode, 200, 'the administrator signs in');
  const adminClaims = decodeClaims(admin.json().accessToken);
  t.equal(adminClaims.role, 'admin', "role 'admin'");
  t.equal(adminClaims.email, adminEmail);
  t.equal(adminClaims.sub, admin.json().user.id);
  const me = await current(admin.json().accessToken);
  t.equal(me.statusCode, 200, 'the administrator token works');
  t.equal(me.json().user.email, adminEmail);
  assertErrorBody(t, await signIn(adminEmail, 'not the admin password'), 401, 'INVALID_CREDENTIALS');

  const email = newEmail('plain');
  t.equal((await signUp({ email })).statusCode, 202);
  t.equal((await verify({ otp: (await firstMail(email)).token })).statusCode, 200);
  const user = await signIn(email);
  t.equal(user.statusCode, 200);
  t.equal(decodeClaims(user.json().accessToken).role, 'user', "a normal account has role 'user'");
});

t.test('secrets at rest: no password, code, link token or refresh token in plain text', async (t) => {
  const { signUp, signIn, verify, firstMail, tableText, allTablesText, app } = await setup(t);
  const email = newEmail('secrets');
  const password = `secret-${randomBytes(8).toString('hex')}`;
  t.equal((await signUp({ email, password })).statusCode, 202);
  const mail = await firstMail(email);
  const code = mail.code ?? '';
  const token = mail.token ?? '';
  t.match(code, /^\d{6}$/);
  t.match(token, /^[0-9a-f]{64}$/);

  const users = await tableText('users');
  const row = users.rows.find((r) => JSON.stringify(r).includes(email));
  t.ok(row, 'the account is in users');
  t.equal(row?.password_hash, null, 'an unverified account holds no password yet');
  t.notOk(users.text.includes(password), 'no column of users contains the password');

  const verifications = await tableText('one_time_codes');
  t.ok(verifications.rows.length > 0, 'one_time_codes has the pending verification');
  const pending = String(verifications.rows[0]?.pending_password_hash ?? '');
  t.match(pending, /^scrypt\$/, "the sign-up's password waits there as a scrypt hash");
  t.notOk(verifications.text.includes(password), 'no column holds the password');
  t.notOk(verifications.text.includes(code), 'no column holds the code');
  t.notOk(verifications.text.includes(token), 'no column holds the link token');
  t.notOk(verifications.text.toLowerCase().includes(token), 'not even in another letter case');

  const verified = await verify({ otp: code, email });
  t.equal(verified.statusCode, 200);
  const refreshTokens: string[] = [verified.json().refreshToken];
  const signedIn = await signIn(email, password);
  t.equal(signedIn.statusCode, 200);
  refreshTokens.push(signedIn.json().refreshToken);
  const rotated = await app.inject({
    method: 'POST',
    url: '/api/auth/refresh?client_type=mobile',
    payload: { refreshToken: signedIn.json().refreshToken },
  });
  t.equal(rotated.statusCode, 200);
  refreshTokens.push(rotated.json().refreshToken);

  const sessions = await tableText('sessions');
  t.ok(sessions.rows.length >= 2, 'sessions holds the sessions');
  const everything = await allTablesText();
  for (const [i, refreshToken] of refreshTokens.entries()) {
    t.ok(typeof refreshToken === 'string' && refreshToken.length >= 16, `refresh token ${i + 1} is a real token`);
    t.notOk(sessions.text.includes(refreshToken), `sessions does not contain refresh token ${i + 1}`);
    t.notOk(everything.includes(refreshToken), `no table contains refresh token ${i + 1}`);
  }
  t.notOk(everything.includes(password), 'no table contains the password');
  t.notOk(everything.includes(token), 'no table contains the link token');
});
