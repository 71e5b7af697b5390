// Administrators' actions on accounts: read one, change its role, disable or enable it, delete
// accounts. Deleting, disabling and role changes end every session of the account at once (access
// tokens refused, refresh tokens dead, sockets disconnected, on every instance); a disabled account
// cannot sign in (answered exactly as a wrong password), refresh or verify; and no call, however
// concurrent, leaves no enabled administrator.
import { randomUUID } from 'node:crypto';
import type { LightMyRequestResponse } from 'fastify';
import t, { type Test } from 'tap';
import { createSessionRevocations } from '../src/auth/session-revocations.ts';
import { insertSessionIfCredentialsHold } from '../src/db/repositories/sessions.ts';
import { ADMIN_PASSWORD, accountCalls, bearer, buildAccountsApp, type MobileSession } from './helpers/accounts.ts';
import { buildAnotherInstance } from './helpers/app.ts';
import { newEmail, PASSWORD, wrongCode } from './helpers/auth.ts';
import { usingPostgres } from './helpers/database.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { disconnection, nextEvent, RealtimeClients, urlOf } from './helpers/realtime-client.ts';
import { assertMatchesSchema } from './helpers/spec-schema.ts';
import { accessTokenFor } from './helpers/tokens.ts';

type Accounts = Awaited<ReturnType<typeof buildAccountsApp>>;

/** Makes a new account an administrator and returns a session of it with the admin role. */
async function newAdmin(a: Accounts, label: string): Promise<MobileSession> {
  const user = await a.signUp(newEmail(label));
  const promoted = await a.updateUser(a.admin.accessToken, user.userId, { role: 'admin' });
  if (promoted.statusCode !== 200) throw new Error(`promotion: ${promoted.statusCode} ${promoted.body}`);
  return a.signIn(user.email);
}

/** The ids of the enabled administrators, from the database. */
async function enabledAdmins(a: Accounts): Promise<string[]> {
  const rows = await a.database.handle.db
    .selectFrom('users')
    .select('id')
    .where('role', '=', 'admin')
    .where('disabled_at', 'is', null)
    .execute();
  return rows.map((r) => r.id).sort();
}

/** The session's access token is refused with SESSION_REVOKED and its refresh token is dead. */
async function assertSessionEnded(t: Test, a: Accounts, s: MobileSession, what: string) {
  assertErrorBody(t, await a.current(s.accessToken), 401, 'SESSION_REVOKED');
  assertErrorBody(
    t,
    await a.api.get('/api/realtime/permissions', { headers: bearer(s.accessToken) }),
    401,
    'SESSION_REVOKED',
  );
  const refreshed = await a.refresh(s.refreshToken);
  assertErrorBody(t, refreshed, 401, 'REFRESH_TOKEN_INVALID');
  t.pass(`${what}: the access token is refused and the refresh token is dead`);
}

t.test(
  'only administrators: 401 without a token, 403 for users and for a token without an enabled admin',
  async (t) => {
    const a = await buildAccountsApp(t, { label: 'admin-perm' });
    const user = await a.signUp();
    const target = (await a.signUp()).userId;
    const requests = (token: string | undefined) => {
      const headers = token === undefined ? {} : bearer(token);
      const params = { userId: target };
      return [
        () => a.api.get('/api/auth/users/{userId}', { params, headers }),
        () => a.api.patch('/api/auth/users/{userId}', { params, headers, body: { disabled: true } }),
        () => a.api.delete('/api/auth/users', { headers, body: { userIds: [target] } }),
      ];
    };
    for (const request of requests(undefined)) assertErrorBody(t, await request(), 401, 'UNAUTHORIZED');
    for (const request of requests(user.accessToken)) assertErrorBody(t, await request(), 403, 'FORBIDDEN');
    // A validly signed admin token whose account is no enabled administrator (a made-up one here):
    // changes are checked against the database, not only the token.
    const ghost = accessTokenFor(a.app, 'admin');
    assertErrorBody(t, await a.updateUser(ghost, target, { disabled: true }), 403, 'FORBIDDEN');
    assertErrorBody(t, await a.deleteUsers(ghost, [target]), 403, 'FORBIDDEN');
    const row = await a.getUser(a.admin.accessToken, target);
    t.same([row.json().disabled, row.statusCode], [false, 200], 'nothing changed');
  },
);

t.test('GET /api/auth/users/{userId}', async (t) => {
  const a = await buildAccountsApp(t, { label: 'admin-get' });
  const ada = await a.signUp(newEmail('ada'), { name: 'Ada' });
  const res = await a.getUser(a.admin.accessToken, ada.userId);
  t.equal(res.statusCode, 200);
  assertMatchesSchema(t, res.json(), 'AdminUser');
  t.match(res.json(), {
    id: ada.userId,
    email: ada.email,
    profile: { name: 'Ada', avatar_url: null },
    role: 'user',
    disabled: false,
    disabledAt: null,
    emailVerified: false,
    providers: ['email'],
  });
  t.equal((await a.getUser(a.admin.accessToken, ada.userId.toUpperCase())).json().id, ada.userId, 'any case');
  assertErrorBody(t, await a.getUser(a.admin.accessToken, randomUUID()), 404, 'NOT_FOUND');
  assertErrorBody(t, await a.getUser(a.admin.accessToken, 'not-a-uuid'), 400, 'INVALID_INPUT');
  const me = (await a.getUser(a.admin.accessToken, a.admin.userId)).json();
  t.match(me, { role: 'admin', email: a.adminEmail, emailVerified: true }, 'the administrator itself');
});

t.test('PATCH role: promotion and demotion take effect, and end the sessions carrying the old role', async (t) => {
  const a = await buildAccountsApp(t, { label: 'admin-role' });
  const bob = await a.signUp(newEmail('bob'));
  const directory = (token: string) => a.api.get('/api/auth/users', { headers: bearer(token) });
  assertErrorBody(t, await directory(bob.accessToken), 403, 'FORBIDDEN');

  const promoted = await a.updateUser(a.admin.accessToken, bob.userId, { role: 'admin' });
  t.equal(promoted.statusCode, 200);
  t.match(promoted.json(), { id: bob.userId, role: 'admin', disabled: false });
  assertMatchesSchema(t, promoted.json(), 'AdminUser');
  await assertSessionEnded(t, a, bob, 'promotion');
  const bobAdmin = await a.signIn(bob.email);
  t.equal((await directory(bobAdmin.accessToken)).statusCode, 200, 'a new session has the admin role');

  const demoted = await a.updateUser(a.admin.accessToken, bob.userId, { role: 'user' });
  t.equal(demoted.json().role, 'user');
  await assertSessionEnded(t, a, bobAdmin, 'demotion');
  assertErrorBody(t, await directory((await a.signIn(bob.email)).accessToken), 403, 'FORBIDDEN');

  const again = await a.signIn(bob.email);
  const unchanged = await a.updateUser(a.admin.accessToken, bob.userId, { role: 'user', disabled: false });
  t.equal(unchanged.statusCode, 200, 'setting what is already set');
  t.equal((await a.current(again.accessToken)).statusCode, 200, 'ends no session');
  t.equal((await a.current(a.admin.accessToken)).statusCode, 200, "the caller's session is untouched");
});

t.test('PATCH disabled: every session ends at once, sign-in answers as a wrong password', async (t) => {
  const a = await buildAccountsApp(t, { label: 'admin-disable' });
  await a.app.listen({ port: 0, host: '127.0.0.1' });
  const clients = new RealtimeClients(t, urlOf(a.app));
  const bob = await a.signUp(newEmail('bob'));
  const bobToo = await a.signIn(bob.email);
  const carol = await a.signUp(newEmail('carol'));
  t.equal((await a.current(bob.accessToken)).statusCode, 200, 'before: the token works (and is in the cache)');
  const socket = await clients.connect(bob.accessToken);
  const carolSocket = await clients.connect(carol.accessToken);
  const told = nextEvent(socket, 'realtime:error', 4_000);
  const closed = disconnection(socket, 4_000);

  const res = await a.updateUser(a.admin.accessToken, bob.userId, { disabled: true });
  t.equal(res.statusCode, 200);
  t.match(res.json(), { id: bob.userId, disabled: true, role: 'user' });
  t.ok(Date.parse(res.json().disabledAt) > 0, 'disabledAt says when');

  await assertSessionEnded(t, a, bob, 'the session that signed up');
  await assertSessionEnded(t, a, bobToo, 'another session of the account');
  t.match(await told, { code: 'SESSION_REVOKED', channel: null }, 'its socket is told');
  t.equal(await closed, 'io server disconnect', 'and disconnected');
  t.equal((await clients.refusal(bob.accessToken)).data?.code, 'SESSION_REVOKED', 'a new handshake is refused');
  t.ok(carolSocket.connected, "another account's socket stays");
  t.equal((await a.current(carol.accessToken)).statusCode, 200, "another account's session stays");

  // The right password of a disabled account, and a wrong password, get the same answer.
  const rightPassword = await a.signInRaw(bob.email, PASSWORD);
  const wrongPassword = await a.signInRaw(bob.email, 'not the password');
  assertErrorBody(t, rightPassword, 401, 'INVALID_CREDENTIALS');
  t.same(rightPassword.json(), wrongPassword.json(), 'the same body as a wrong password');
  t.same(
    Object.keys(rightPassword.headers).sort(),
    Object.keys(wrongPassword.headers).sort(),
    'the same headers as a wrong password',
  );
  const disabledAgain = await a.updateUser(a.admin.accessToken, bob.userId, { disabled: true });
  t.equal(disabledAgain.json().disabledAt, res.json().disabledAt, 'disabling again keeps the first time');

  const enabled = await a.updateUser(a.admin.accessToken, bob.userId, { disabled: false });
  t.match(enabled.json(), { disabled: false, disabledAt: null });
  await assertSessionEnded(t, a, bobToo, 'after enabling, the old sessions stay ended');
  const back = await a.signIn(bob.email);
  t.equal((await a.current(back.accessToken)).statusCode, 200, 'the account signs in again');
  t.same(clients.violations(), [], 'everything on the sockets matched asyncapi.yaml');
});

t.test(
  'a disabled account counts failed sign-ins like a wrong password (the back-off gives nothing away)',
  async (t) => {
    const a = await buildAccountsApp(t, { label: 'admin-throttle' });
    const bob = await a.signUp(newEmail('bob'));
    t.equal((await a.updateUser(a.admin.accessToken, bob.userId, { disabled: true })).statusCode, 200);
    const disabled: number[] = [];
    const unknown: number[] = [];
    const stranger = newEmail('nobody');
    for (let i = 0; i < 8; i++) {
      disabled.push((await a.signInRaw(bob.email, PASSWORD)).statusCode);
      unknown.push((await a.signInRaw(stranger, PASSWORD)).statusCode);
    }
    t.same(disabled, unknown, `the same sequence as an unknown address (${disabled.join(', ')})`);
    t.ok(disabled.includes(429), 'both reach the back-off');
  },
);

t.test('the checks hold by themselves (an account disabled without its sessions being ended)', async (t) => {
  const a = await buildAccountsApp(t, { label: 'admin-checks' });
  const bob = await a.signUp(newEmail('bob'));
  const db = a.database.handle.db;
  await db.updateTable('users').set({ disabled_at: new Date() }).where('id', '=', bob.userId).execute();
  assertErrorBody(t, await a.refresh(bob.refreshToken), 401, 'REFRESH_TOKEN_INVALID');
  assertErrorBody(t, await a.signInRaw(bob.email, PASSWORD), 401, 'INVALID_CREDENTIALS');
  const user = await db
    .selectFrom('users')
    .select(['password_hash', 'role'])
    .where('id', '=', bob.userId)
    .executeTakeFirstOrThrow();
  const now = new Date();
  const inserted = await insertSessionIfCredentialsHold(
    db,
    {
      aal: 'aal1',
      amr: [],
      userId: bob.userId,
      refreshTokenHash: randomUUID(),
      clientType: 'mobile',
      now,
      expiresAt: new Date(now.getTime() + 60_000),
      userAgent: null,
      ip: null,
    },
    { passwordHash: user.password_hash ?? '', role: user.role },
  );
  t.equal(inserted, undefined, 'no session is inserted for a disabled account (the race with a sign-in)');
  await db.updateTable('users').set({ disabled_at: null }).where('id', '=', bob.userId).execute();
  t.equal((await a.refresh(bob.refreshToken)).statusCode, 200, 'enabled: the refresh token (not rotated) works');
});

t.test('a disabled account cannot verify its address; disabling voids the code and link sent before', async (t) => {
  const a = await buildAccountsApp(t, { label: 'admin-verify', env: { REQUIRE_EMAIL_VERIFICATION: 'true' } });
  const email = newEmail('pending');
  const signUp = await a.api.post('/api/auth/users', { body: { email, password: PASSWORD } });
  t.equal(signUp.statusCode, 202, 'sign-up needs verification');
  const mail = await a.firstMail(email);
  const listed = await a.api.get('/api/auth/users', { query: { search: email }, headers: bearer(a.admin.accessToken) });
  const id = listed.json().data[0]?.id as string;
  t.equal((await a.updateUser(a.admin.accessToken, id, { disabled: true })).statusCode, 200, 'disabled');
  const refused = await a.verify({ email, otp: mail.code });
  const wrong = await a.verify({ email, otp: wrongCode(mail.code ?? '000000') });
  assertErrorBody(t, refused, 400, 'INVALID_OTP');
  t.same(refused.json(), wrong.json(), 'the answer of a wrong code');
  assertErrorBody(t, await a.verify({ otp: mail.token }), 400, 'INVALID_OTP');
  t.equal((await a.getUser(a.admin.accessToken, id)).json().emailVerified, false, 'not verified');
  t.equal((await a.updateUser(a.admin.accessToken, id, { disabled: false })).statusCode, 200, 'enabled');
  assertErrorBody(t, await a.verify({ otp: mail.token }), 400, 'INVALID_OTP');
  assertErrorBody(t, await a.verify({ email, otp: mail.code }), 400, 'INVALID_OTP');
});

t.test('a reset link sent before the account was disabled does not work once it is enabled again', async (t) => {
  const a = await buildAccountsApp(t, { label: 'admin-reset' });
  const bob = await a.signUp();
  const sent = await a.api.post('/api/auth/email/send-reset-password', { body: { email: bob.email } });
  t.equal(sent.statusCode, 202);
  const mail = await a.firstMail(bob.email);
  t.match(mail.token, /^[0-9a-f]{64}$/, 'the reset link came');
  t.equal((await a.updateUser(a.admin.accessToken, bob.userId, { disabled: true })).statusCode, 200, 'disabled');
  t.equal((await a.updateUser(a.admin.accessToken, bob.userId, { disabled: false })).statusCode, 200, 'enabled');
  const reset = (otp: string) =>
    a.api.post('/api/auth/email/reset-password', { body: { otp, newPassword: 'a password from before' } });
  assertErrorBody(t, await reset(mail.token ?? ''), 400, 'INVALID_OTP');
  const exchanged = await a.api.post('/api/auth/email/exchange-reset-password-token', {
    body: { email: bob.email, code: mail.code ?? '' },
  });
  assertErrorBody(t, exchanged, 400, 'INVALID_OTP');
});

t.test('PATCH and DELETE refuse bad input', async (t) => {
  const a = await buildAccountsApp(t, { label: 'admin-input' });
  const bob = await a.signUp();
  for (const payload of [
    {},
    { role: 'root' },
    { disabled: 'yes' },
    { role: 'admin', email: 'x@example.com' },
    { role: null },
  ]) {
    assertErrorBody(t, await a.updateUser(a.admin.accessToken, bob.userId, payload), 400, 'INVALID_INPUT');
  }
  assertErrorBody(t, await a.updateUser(a.admin.accessToken, 'nope', { disabled: true }), 400, 'INVALID_INPUT');
  assertErrorBody(t, await a.updateUser(a.admin.accessToken, randomUUID(), { disabled: true }), 404, 'NOT_FOUND');
  const tooMany = Array.from({ length: 101 }, () => randomUUID());
  for (const userIds of [[], ['not-a-uuid'], [bob.userId, 42], tooMany, 'x', null]) {
    assertErrorBody(t, await a.deleteUsers(a.admin.accessToken, userIds), 400, 'INVALID_INPUT');
  }
  const headers = bearer(a.admin.accessToken);
  assertErrorBody(
    t,
    await a.api.delete('/api/auth/users', { headers, rawBody: { userIds: [bob.userId], force: true } }),
    400,
    'INVALID_INPUT',
  );
  assertErrorBody(t, await a.api.delete('/api/auth/users', { headers, rawBody: undefined }), 400, 'INVALID_INPUT');
  assertErrorBody(
    t,
    await a.api.delete('/api/auth/users', {
      headers: { ...headers, 'content-type': 'text/plain' },
      rawBody: bob.userId,
    }),
    415,
    'UNSUPPORTED_MEDIA_TYPE',
  );
  assertErrorBody(
    t,
    await a.api.patch('/api/auth/users/{userId}', {
      params: { userId: bob.userId },
      headers,
      rawBody: { role: 'user', padding: 'x'.repeat(17_000) },
    }),
    413,
    'PAYLOAD_TOO_LARGE',
  );
  t.equal((await a.current(bob.accessToken)).statusCode, 200, 'nothing happened to the account');
});

t.test('DELETE /api/auth/users: counts what it deleted and ends every session at once', async (t) => {
  const a = await buildAccountsApp(t, { label: 'admin-delete' });
  await a.app.listen({ port: 0, host: '127.0.0.1' });
  const clients = new RealtimeClients(t, urlOf(a.app));
  const bob = await a.signUp(newEmail('bob'));
  const bobToo = await a.signIn(bob.email);
  const carol = await a.signUp(newEmail('carol'));
  const dave = await a.signUp(newEmail('dave'));
  t.equal((await a.current(bob.accessToken)).statusCode, 200);
  const socket = await clients.connect(bobToo.accessToken);
  const told = nextEvent(socket, 'realtime:error', 4_000);
  const closed = disconnection(socket, 4_000);
  // A session of Bob's that had already ended (logged out) before the deletion.
  const loggedOut = await a.signIn(bob.email);
  const logout = await a.api.post('/api/auth/logout', {
    query: { client_type: 'mobile' },
    body: { refreshToken: loggedOut.refreshToken },
  });
  t.equal(logout.statusCode, 204);

  const res = await a.deleteUsers(a.admin.accessToken, [
    bob.userId,
    carol.userId,
    bob.userId.toUpperCase(),
    randomUUID(),
  ]);
  t.equal(res.statusCode, 200);
  t.same(res.json(), { message: '2 users deleted', deletedCount: 2 }, 'twice named counts once, unknown not at all');
  assertMatchesSchema(t, res.json(), 'DeleteUsersResult');

  await assertSessionEnded(t, a, bob, 'Bob');
  await assertSessionEnded(t, a, bobToo, "Bob's other session");
  await assertSessionEnded(t, a, carol, 'Carol');
  t.match(await told, { code: 'SESSION_REVOKED', channel: null }, "Bob's socket is told");
  t.equal(await closed, 'io server disconnect', 'and disconnected');
  t.equal((await a.current(dave.accessToken)).statusCode, 200, 'Dave is untouched');
  assertErrorBody(t, await a.signInRaw(bob.email, PASSWORD), 401, 'INVALID_CREDENTIALS');
  assertErrorBody(t, await a.getUser(a.admin.accessToken, bob.userId), 404, 'NOT_FOUND');
  assertErrorBody(t, await a.getProfile(dave.accessToken, bob.userId), 404, 'NOT_FOUND');
  const db = a.database.handle.db;
  t.same(
    await db.selectFrom('sessions').select('id').where('user_id', 'in', [bob.userId, carol.userId]).execute(),
    [],
    'their sessions are gone from the table',
  );

  // An instance that starts now (or catches up after losing its LISTEN connection) still refuses
  // the tokens of the deleted accounts' sessions, though their rows are gone.
  const later = createSessionRevocations({
    db,
    database: a.config.database,
    accessTokenTtlSeconds: a.config.accessTokenTtlSeconds,
    log: a.app.log,
  });
  t.teardown(() => later.close());
  await later.start();
  for (const s of [bob, bobToo, carol, loggedOut]) {
    t.ok(later.isRevoked(s.sessionId), `a later instance knows session ${s.sessionId.slice(0, 8)} is revoked`);
  }
  t.notOk(later.isRevoked(dave.sessionId), "and not Dave's");

  const none = await a.deleteUsers(a.admin.accessToken, [bob.userId]);
  t.same(none.json(), { message: '0 users deleted', deletedCount: 0 }, 'deleting again deletes nothing');
  const one = await a.deleteUsers(a.admin.accessToken, [dave.userId]);
  t.same(one.json(), { message: '1 user deleted', deletedCount: 1 });
  t.same(clients.violations(), [], 'everything on the sockets matched asyncapi.yaml');
});

t.test('the last enabled administrator cannot be deleted, demoted or disabled', async (t) => {
  const a = await buildAccountsApp(t, { label: 'admin-last' });
  const bob = await a.signUp(newEmail('bob'));
  const self = a.admin.userId;
  for (const res of [
    await a.updateUser(a.admin.accessToken, self, { role: 'user' }),
    await a.updateUser(a.admin.accessToken, self, { disabled: true }),
    await a.updateUser(a.admin.accessToken, self, { role: 'user', disabled: true }),
    await a.deleteUsers(a.admin.accessToken, [self]),
    await a.deleteUsers(a.admin.accessToken, [bob.userId, self]),
  ]) {
    const body = assertErrorBody(t, res, 409, 'LAST_ADMIN');
    t.match(body.message, /no enabled administrator/);
  }
  t.equal((await a.current(bob.accessToken)).statusCode, 200, 'a refused delete deletes none of the others');
  t.equal((await a.current(a.admin.accessToken)).statusCode, 200, 'and the administrator keeps its session');
  t.same(await enabledAdmins(a), [self]);
  t.equal(
    (await a.updateUser(a.admin.accessToken, self, { role: 'admin', disabled: false })).statusCode,
    200,
    'a no-op is allowed',
  );

  // A disabled administrator does not count.
  const carol = await newAdmin(a, 'carol');
  t.equal(
    (await a.updateUser(a.admin.accessToken, carol.userId, { disabled: true })).statusCode,
    200,
    'Carol (admin) disabled',
  );
  assertErrorBody(t, await a.updateUser(a.admin.accessToken, self, { role: 'user' }), 409, 'LAST_ADMIN');
  t.equal(
    (await a.deleteUsers(a.admin.accessToken, [carol.userId])).json().deletedCount,
    1,
    'a disabled administrator may be deleted',
  );

  // With another enabled administrator, an administrator may step down (its sessions end).
  const dave = await newAdmin(a, 'dave');
  const stepDown = await a.updateUser(a.admin.accessToken, self, { role: 'user' });
  t.equal(stepDown.statusCode, 200, 'stepping down while Dave remains');
  assertErrorBody(t, await a.current(a.admin.accessToken), 401, 'SESSION_REVOKED');
  assertErrorBody(t, await a.deleteUsers(dave.accessToken, [dave.userId]), 409, 'LAST_ADMIN');
  t.same(await enabledAdmins(a), [dave.userId]);
});

t.test('concurrent calls never leave no enabled administrator', async (t) => {
  const a = await buildAccountsApp(t, { label: 'admin-race' });
  const rounds: [string, (x: MobileSession, y: MobileSession) => Promise<LightMyRequestResponse>[]][] = [
    [
      'each demotes itself',
      (x, y) => [
        a.updateUser(x.accessToken, x.userId, { role: 'user' }),
        a.updateUser(y.accessToken, y.userId, { role: 'user' }),
      ],
    ],
    [
      'each demotes the other',
      (x, y) => [
        a.updateUser(x.accessToken, y.userId, { role: 'user' }),
        a.updateUser(y.accessToken, x.userId, { role: 'user' }),
      ],
    ],
    [
      'each disables the other',
      (x, y) => [
        a.updateUser(x.accessToken, y.userId, { disabled: true }),
        a.updateUser(y.accessToken, x.userId, { disabled: true }),
      ],
    ],
    [
      'each deletes the other',
      (x, y) => [a.deleteUsers(x.accessToken, [y.userId]), a.deleteUsers(y.accessToken, [x.userId])],
    ],
    [
      'each deletes itself',
      (x, y) => [a.deleteUsers(x.accessToken, [x.userId]), a.deleteUsers(y.accessToken, [y.userId])],
    ],
    [
      'one disables itself, the other deletes itself',
      (x, y) => [a.updateUser(x.accessToken, x.userId, { disabled: true }), a.deleteUsers(y.accessToken, [y.userId])],
    ],
  ];
  for (const [what, race] of rounds) {
    for (let i = 0; i < 3; i++) {
      // Two fresh administrators, and the configured one demoted out of the way (while they remain).
      const x = await newAdmin(a, 'x');
      const y = await newAdmin(a, 'y');
      const admins = await enabledAdmins(a);
      for (const id of admins.filter((id) => id !== x.userId && id !== y.userId)) {
        const res = await a.updateUser(x.accessToken, id, { role: 'user' });
        if (res.statusCode !== 200) throw new Error(`demoting ${id}: ${res.statusCode} ${res.body}`);
      }
      t.same(await enabledAdmins(a), [x.userId, y.userId].sort(), `${what} (${i + 1}): two enabled administrators`);
      const results = await Promise.all(race(x, y));
      const outcome = results.map((r) => `${r.statusCode} ${r.statusCode === 200 ? '' : r.json().error}`.trim());
      t.equal(
        results.filter((r) => r.statusCode === 200).length,
        1,
        `${what}: exactly one succeeded (${outcome.join(', ')})`,
      );
      for (const r of results.filter((r) => r.statusCode !== 200)) {
        const refusal = `${r.statusCode} ${r.json().error}`;
        t.ok(
          ['409 LAST_ADMIN', '403 FORBIDDEN', '401 SESSION_REVOKED'].includes(refusal),
          `the other was refused (${refusal}): LAST_ADMIN, or its caller had just been removed`,
        );
      }
      const left = await enabledAdmins(a);
      t.equal(left.length, 1, `${what}: one enabled administrator remains`);
      // Promote the configured administrator back for the next round, with the one that remains.
      const remaining = [x, y].find((s) => s.userId === left[0]) as MobileSession;
      const survivor = await a.signIn(remaining.email);
      const restored = await a.updateUser(survivor.accessToken, a.admin.userId, { role: 'admin', disabled: false });
      if (restored.statusCode !== 200) throw new Error(`restoring: ${restored.statusCode} ${restored.body}`);
      a.admin = await a.signIn(a.adminEmail, ADMIN_PASSWORD);
      const cleanup = await a.deleteUsers(a.admin.accessToken, [x.userId, y.userId]);
      if (cleanup.statusCode !== 200) throw new Error(`cleanup: ${cleanup.statusCode} ${cleanup.body}`);
    }
  }
});

/** Polls until `check` answers 401 SESSION_REVOKED; the delay since `from`. */
async function refusedWithin(check: () => Promise<LightMyRequestResponse>, from: number): Promise<number> {
  for (;;) {
    const res = await check();
    if (res.statusCode === 401 && res.json().error === 'SESSION_REVOKED') return Date.now() - from;
    if (Date.now() - from > 4_000) throw new Error(`still ${res.statusCode} ${res.body} after 4 s`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

t.test('another instance refuses at once too', { skip: !usingPostgres && 'PostgreSQL only' }, async (t) => {
  const a = await buildAccountsApp(t, { label: 'admin-instances' });
  // Instance B on A's PostgreSQL database, with A's configuration and a connection pool of its own.
  const b = await buildAnotherInstance(t, a, { ownConnection: true });
  const onB = accountCalls(b.app);
  for (const [what, end] of [
    ['disabling', (s: MobileSession) => a.updateUser(a.admin.accessToken, s.userId, { disabled: true })],
    ['deleting', (s: MobileSession) => a.deleteUsers(a.admin.accessToken, [s.userId])],
    ['a role change', (s: MobileSession) => a.updateUser(a.admin.accessToken, s.userId, { role: 'admin' })],
  ] as const) {
    const s = await a.signUp();
    t.equal((await onB.current(s.accessToken)).statusCode, 200, `${what}: B accepts the token`);
    const ended = await end(s);
    t.equal(ended.statusCode, 200, `${what} on A`);
    const delay = await refusedWithin(() => onB.current(s.accessToken), Date.now());
    t.ok(delay <= 2_000, `${what}: B refuses the token within 2 s (${delay} ms)`);
  }
});
