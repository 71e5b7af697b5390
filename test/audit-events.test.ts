// Every account event is in the audit log, written with the change it records, and no row holds a
// secret: the flows below run for real (codes over the SMTP capture, TOTP codes from Debian's
// oathtool), then every column of every row is scanned for the passwords, codes and tokens used.
// A change that fails writes no success row.
import { execFileSync } from 'node:child_process';
import { sql } from 'kysely';
import t from 'tap';
import { ADMIN_PASSWORD, accountCalls, bearer } from './helpers/accounts.ts';
import { buildAnotherInstance } from './helpers/app.ts';
import { buildAuthTestApp, newEmail, PASSWORD } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';

const ADMIN = newEmail('audit-admin');
const s = await buildAuthTestApp(t, {
  label: 'audit-events',
  env: { ADMIN_EMAIL: ADMIN, ADMIN_PASSWORD, REFRESH_TOKEN_REUSE_INTERVAL_SECONDS: '0' },
});
const { app, clock } = s;
const calls = accountCalls(app);
const db = s.database.handle.db;

/** Every secret the flows handled: none may appear in any column of the audit log. */
const secrets = new Set<string>([PASSWORD, ADMIN_PASSWORD]);
const keep = (...values: (string | undefined)[]) => {
  for (const v of values) if (v !== undefined && v.length >= 6) secrets.add(v);
};

const totp = (secret: string) =>
  execFileSync('oathtool', ['--totp', '-b', '--now', `@${Math.floor(clock.now().getTime() / 1000)}`, secret], {
    encoding: 'utf8',
  }).trim();

interface AuditRow {
  id: number;
  type: string;
  outcome: string;
  method: string | null;
  actor_id: string | null;
  user_id: string | null;
  session_id: string | null;
  ip: string | null;
  user_agent: string | null;
  details: Record<string, unknown>;
}
const rowsOf = async (userId: string | null) =>
  (
    await sql<AuditRow>`select * from audit_log where ${userId === null ? sql`user_id is null` : sql`user_id = ${userId}`} order by id`.execute(
      db,
    )
  ).rows;
const typesOf = async (userId: string) => (await rowsOf(userId)).map((r) => `${r.type}:${r.outcome}`);

const admin = await calls.signIn(ADMIN, ADMIN_PASSWORD);
keep(admin.accessToken, admin.refreshToken);

t.test('sign-up, verification, sign-ins, refresh-token reuse, logout, password change and reset', async (t) => {
  const email = newEmail('audit-flow');
  const signedUp = await s.signUp(email);
  t.equal(signedUp.statusCode, 202);
  const mail = await s.firstMail(email);
  keep(mail.code, mail.token);
  const verified = await s.verify({ email, otp: mail.code });
  t.equal(verified.statusCode, 200);
  const first = verified.json() as { accessToken: string; refreshToken: string; user: { id: string } };
  keep(first.accessToken, first.refreshToken);
  const userId = first.user.id;

  // A wrong password, then a right one.
  t.equal((await calls.signInRaw(email, 'not the password at all')).statusCode, 401);
  const session = await calls.signIn(email);
  keep(session.accessToken, session.refreshToken);

  // Refresh-token reuse: the rotated token presented again ends the session.
  const rotated = await calls.refresh(session.refreshToken);
  t.equal(rotated.statusCode, 200);
  keep(
    (rotated.json() as { refreshToken: string }).refreshToken,
    (rotated.json() as { accessToken: string }).accessToken,
  );
  t.equal((await calls.refresh(session.refreshToken)).statusCode, 401, 'reuse');

  // Logout (refresh token), then a password change from another session.
  const other = await calls.signIn(email);
  keep(other.accessToken, other.refreshToken);
  const out = await app.inject({
    method: 'POST',
    url: '/api/auth/logout?client_type=mobile',
    payload: { refreshToken: other.refreshToken },
  });
  t.equal(out.statusCode, 204);
  const changer = await calls.signIn(email);
  keep(changer.accessToken, changer.refreshToken);
  const NEW_PASSWORD = 'another passphrase entirely';
  keep(NEW_PASSWORD);
  // A wrong current password: refused, and no success row.
  const refused = await app.inject({
    method: 'POST',
    url: '/api/auth/password',
    headers: bearer(changer.accessToken),
    payload: { currentPassword: 'wrong current password', newPassword: NEW_PASSWORD },
  });
  t.equal(refused.statusCode, 403);
  t.notOk((await typesOf(userId)).includes('password_changed:success'), 'a refused change writes no row');
  const changed = await app.inject({
    method: 'POST',
    url: '/api/auth/password',
    headers: bearer(changer.accessToken),
    payload: { currentPassword: PASSWORD, newPassword: NEW_PASSWORD },
  });
  t.equal(changed.statusCode, 204, changed.body);

  // A reset by code.
  clock.advance(120);
  t.equal(
    (await app.inject({ method: 'POST', url: '/api/auth/email/send-reset-password', payload: { email } })).statusCode,
    202,
  );
  const resetMail = await s.nthMail(email, 2);
  keep(resetMail.code, resetMail.token);
  const exchanged = await app.inject({
    method: 'POST',
    url: '/api/auth/email/exchange-reset-password-token',
    payload: { email, code: resetMail.code },
  });
  t.equal(exchanged.statusCode, 200);
  const resetToken = (exchanged.json() as { token: string }).token;
  keep(resetToken);
  const RESET_PASSWORD = 'a reset passphrase for sure';
  keep(RESET_PASSWORD);
  t.equal(
    (
      await app.inject({
        method: 'POST',
        url: '/api/auth/email/reset-password',
        payload: { otp: resetToken, newPassword: RESET_PASSWORD },
      })
    ).statusCode,
    200,
  );

  // A sign-in by emailed code.
  clock.advance(120);
  t.equal((await app.inject({ method: 'POST', url: '/api/auth/email/send-otp', payload: { email } })).statusCode, 202);
  const otpMail = await s.nthMail(email, 3);
  keep(otpMail.code, otpMail.token);
  const byCode = await app.inject({
    method: 'POST',
    url: '/api/auth/sessions?client_type=mobile',
    payload: { method: 'otp', email, otp: otpMail.code },
  });
  t.equal(byCode.statusCode, 200, byCode.body);
  keep(
    (byCode.json() as { accessToken: string }).accessToken,
    (byCode.json() as { refreshToken: string }).refreshToken,
  );

  t.same(await typesOf(userId), [
    'sign_up:success',
    'email_verified:success',
    'sign_in:success',
    'sign_in:failure',
    'sign_in:success',
    'refresh_token_reused:success',
    'sign_in:success',
    'logout:success',
    'sign_in:success',
    'session_ended:success',
    'password_changed:success',
    'session_ended:success',
    'password_reset:success',
    'sign_in:success',
  ]);
  const rows = await rowsOf(userId);
  t.match(rows[0], { method: 'password', actor_id: userId });
  t.match(rows[1], { method: 'code', details: { passwordProven: true } });
  t.match(rows[2], { method: 'otp', session_id: String, ip: '127.0.0.1' }, 'the verification opened a session');
  t.match(rows[3], { method: 'password', actor_id: null, session_id: null });
  t.match(rows[5], { actor_id: null, session_id: session.sessionId }, 'reuse: the service ended it');
  t.match(rows[7], { session_id: other.sessionId });
  t.match(rows[9], { session_id: rows[2]?.session_id, details: { by: 'password_change' } });
  t.match(rows[10], { session_id: changer.sessionId, details: { sessionsEnded: 1 } });
  t.match(rows[11], { session_id: changer.sessionId, actor_id: userId, details: { by: 'password_reset' } });
  t.match(rows[13], { method: 'otp' });
  const unknown = await rowsOf(null);
  t.notOk(
    unknown.some((r) => JSON.stringify(r).includes(email)),
    'a failed sign-in records no address',
  );
});

t.test('a failed sign-in at an unknown address is recorded without the address', async (t) => {
  const typed = 'this-could-be-a-password@example.com';
  const before = (await rowsOf(null)).length;
  t.equal((await calls.signInRaw(typed, 'whatever it is')).statusCode, 401);
  const after = await rowsOf(null);
  t.equal(after.length, before + 1);
  t.match(after.at(-1), { type: 'sign_in', outcome: 'failure', user_id: null, actor_id: null, method: 'password' });
  t.notOk(JSON.stringify(after.at(-1)).includes('this-could-be'), 'not the address typed');
});

t.test('second factors: enrolled, verified, a wrong code, recovery codes, removed', async (t) => {
  const email = await s.verifiedAccount('audit-mfa');
  const session = await calls.signIn(email);
  keep(session.accessToken, session.refreshToken);
  const created = await app.inject({
    method: 'POST',
    url: '/api/auth/factors',
    headers: bearer(session.accessToken),
    payload: { type: 'totp', friendlyName: 'Phone' },
  });
  t.equal(created.statusCode, 201);
  const { id, totp: secrets } = created.json() as { id: string; totp: { secret: string; uri: string } };
  keep(secrets.secret, secrets.uri);
  const wrong = await app.inject({
    method: 'POST',
    url: '/api/auth/mfa/verify?client_type=mobile',
    headers: bearer(session.accessToken),
    payload: { factorId: id, code: totp(secrets.secret) === '000000' ? '111111' : '000000' },
  });
  t.equal(wrong.statusCode, 400);
  const code = totp(secrets.secret);
  keep(code);
  const verified = await app.inject({
    method: 'POST',
    url: '/api/auth/mfa/verify?client_type=mobile',
    headers: bearer(session.accessToken),
    payload: { factorId: id, code },
  });
  t.equal(verified.statusCode, 200, verified.body);
  const raised = verified.json() as { accessToken: string; refreshToken: string; recoveryCodes: string[] };
  keep(raised.accessToken, raised.refreshToken, ...raised.recoveryCodes);
  const regenerated = await app.inject({
    method: 'POST',
    url: '/api/auth/factors/recovery-codes',
    headers: bearer(raised.accessToken),
  });
  t.equal(regenerated.statusCode, 200);
  keep(...(regenerated.json() as { codes: string[] }).codes);
  const removed = await app.inject({
    method: 'DELETE',
    url: `/api/auth/factors/${id}`,
    headers: bearer(raised.accessToken),
  });
  t.equal(removed.statusCode, 204);
  const userId = session.userId;
  const types = await typesOf(userId);
  t.same(types.slice(-8), [
    'factor_enrolled:success',
    'mfa_verified:failure',
    'factor_verified:success',
    // The first factor ends the account's sessions below aal2 (the sign-up's and this one).
    'session_ended:success',
    'session_ended:success',
    'mfa_verified:success',
    'recovery_codes_regenerated:success',
    'factor_removed:success',
  ]);
  const rows = await rowsOf(userId);
  t.match(rows.at(-6), { method: 'totp', details: { factorId: id, firstFactor: true } });
  t.match(rows.at(-5), { details: { by: 'second_factor' } });
  t.match(rows.at(-3), { method: 'totp', details: { replacedSessionId: session.sessionId, aal: 'aal2' } });
});

t.test('administrators: role, disable, enable, factors reset, delete, signing keys, profile', async (t) => {
  const target = await calls.signIn(await s.verifiedAccount('audit-target'));
  keep(target.accessToken, target.refreshToken);
  const profile = await calls.setProfile(target.accessToken, { bio: 'Analyst' });
  t.equal(profile.statusCode, 200);
  t.equal((await calls.updateUser(admin.accessToken, target.userId, { role: 'admin' })).statusCode, 200);
  t.equal((await calls.updateUser(admin.accessToken, target.userId, { role: 'user' })).statusCode, 200);
  t.equal((await calls.updateUser(admin.accessToken, target.userId, { disabled: true })).statusCode, 200);
  t.equal((await calls.updateUser(admin.accessToken, target.userId, { disabled: false })).statusCode, 200);
  t.equal(
    (
      await app.inject({
        method: 'DELETE',
        url: `/api/auth/users/${target.userId}/factors`,
        headers: bearer(admin.accessToken),
      })
    ).statusCode,
    204,
  );
  // The last administrator cannot demote themselves: refused, and no row.
  assertErrorBody(t, await calls.updateUser(admin.accessToken, admin.userId, { role: 'user' }), 409, 'LAST_ADMIN');
  t.notOk((await typesOf(admin.userId)).includes('user_role_changed:success'), 'a refused change writes no row');
  t.equal((await calls.deleteUsers(admin.accessToken, [target.userId])).statusCode, 200);

  const rows = await rowsOf(target.userId);
  t.same(
    rows.map((r) => r.type).filter((type) => !['sign_up', 'email_verified', 'sign_in', 'session_ended'].includes(type)),
    [
      'profile_updated',
      'user_role_changed',
      'user_role_changed',
      'user_disabled',
      'user_enabled',
      'user_factors_reset',
      'user_deleted',
    ],
  );
  t.ok(
    rows.some(
      (r) => r.type === 'session_ended' && r.session_id === target.sessionId && r.details.by === 'administrator',
    ),
    "the promotion's revocation of its session is recorded as by the administrator",
  );
  for (const row of rows.filter((r) => r.type.startsWith('user_'))) {
    t.match(row, { actor_id: admin.userId, session_id: admin.sessionId, ip: '127.0.0.1' }, `${row.type}: by whom`);
  }
  t.match(
    rows.find((r) => r.type === 'user_role_changed'),
    { details: { from: 'user', to: 'admin' } },
  );
  t.match(
    rows.find((r) => r.type === 'profile_updated'),
    { actor_id: target.userId, details: { fields: 'bio' } },
  );

  const created = await app.inject({
    method: 'POST',
    url: '/api/auth/signing-keys',
    headers: bearer(admin.accessToken),
    payload: { alg: 'ES256' },
  });
  t.equal(created.statusCode, 201);
  const kid = (created.json() as { kid: string }).kid;
  t.equal(
    (await app.inject({ method: 'POST', url: '/api/auth/signing-keys/rotate', headers: bearer(admin.accessToken) }))
      .statusCode,
    200,
  );
  const keys = await app.inject({ url: '/api/auth/signing-keys', headers: bearer(admin.accessToken) });
  const previous = (keys.json() as { keys: { kid: string; status: string }[] }).keys.find(
    (k) => k.status === 'previous',
  );
  t.ok(previous, 'a previous key to revoke');
  t.equal(
    (
      await app.inject({
        method: 'POST',
        url: `/api/auth/signing-keys/${previous?.kid}/revoke`,
        headers: bearer(admin.accessToken),
      })
    ).statusCode,
    200,
  );
  const keyRows = (await rowsOf(null)).filter((r) => r.type.startsWith('signing_key_'));
  t.match(keyRows, [
    { type: 'signing_key_created', actor_id: admin.userId, details: { kid, alg: 'ES256' } },
    { type: 'signing_key_rotated', actor_id: admin.userId, details: { kid } },
    { type: 'signing_key_revoked', actor_id: admin.userId, details: { kid: previous?.kid } },
  ]);
});

t.test('an emailed sign-in code that proves an unverified address: verified, its sessions ended', async (t) => {
  const email = newEmail('audit-otp-verify');
  t.equal((await s.signUp(email)).statusCode, 202);
  const first = await s.firstMail(email);
  keep(first.code, first.token);
  clock.advance(120);
  t.equal((await app.inject({ method: 'POST', url: '/api/auth/email/send-otp', payload: { email } })).statusCode, 202);
  const otp = await s.nthMail(email, 2);
  keep(otp.code, otp.token);
  const res = await app.inject({
    method: 'POST',
    url: '/api/auth/sessions?client_type=mobile',
    payload: { method: 'otp', email, otp: otp.code },
  });
  t.equal(res.statusCode, 200, res.body);
  const body = res.json() as { accessToken: string; refreshToken: string; user: { id: string } };
  keep(body.accessToken, body.refreshToken);
  t.same(await typesOf(body.user.id), ['sign_up:success', 'email_verified:success', 'sign_in:success']);
  t.match((await rowsOf(body.user.id))[1], { method: 'otp' });
});

t.test("the administrator's account, made from ADMIN_EMAIL at start, and a promotion at a restart", async (t) => {
  t.match(await rowsOf(admin.userId), [{ type: 'user_created', actor_id: null, method: 'admin_email' }]);
  const email = await s.verifiedAccount('audit-promoted');
  const before = await calls.signIn(email);
  keep(before.accessToken, before.refreshToken);
  const restarted = await buildAnotherInstance(t, s, {
    env: { ADMIN_EMAIL: email, ADMIN_PASSWORD: 'the promoted passphrase', SMTP_URL: s.config.smtpUrl ?? '' },
  });
  keep('the promoted passphrase');
  t.ok(restarted, 'a restart names the account as ADMIN_EMAIL');
  const rows = await rowsOf(before.userId);
  t.match(
    rows.find((r) => r.type === 'user_role_changed'),
    {
      actor_id: null,
      method: 'admin_email',
      details: { from: 'user', to: 'admin' },
    },
  );
  t.ok(
    rows.some((r) => r.type === 'session_ended' && r.session_id === before.sessionId && r.details.by === 'promotion'),
    'its sessions ended, by the promotion',
  );
});

t.test('no column of any row holds a password, code or token the flows used', async (t) => {
  const rows = (await sql<Record<string, unknown>>`select * from audit_log`.execute(db)).rows;
  t.ok(rows.length > 30, `${rows.length} rows written`);
  const found: string[] = [];
  for (const row of rows) {
    const text = JSON.stringify(row);
    for (const secret of secrets) if (text.includes(secret)) found.push(`${row.type}: ${secret.slice(0, 12)}…`);
  }
  t.same(found, [], `none of ${secrets.size} secrets appears`);
  const allTypes = new Set(rows.map((r) => r.type));
  t.ok(allTypes.size >= 20, `${allTypes.size} event types seen`);
});
