// ADMIN_EMAIL naming an account someone else already holds (a squatter who signed up first while
// verification was not required): promoting it ends every session it had and deletes its pending
// verifications, and says so in the log.
import t from 'tap';
import { buildAnotherInstance, buildTestApp } from './helpers/app.ts';
import { decodeClaims, newEmail, PASSWORD } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';

t.test('start-up promoting an existing account to administrator revokes what its holder had', async (t) => {
  const email = newEmail('ops');
  const first = await buildTestApp(t, {
    env: { REQUIRE_EMAIL_VERIFICATION: 'false', JWT_SECRET: 'k'.repeat(16) + 'x'.repeat(16) },
  });
  const signUp = await first.api.post('/api/auth/users', {
    query: { client_type: 'mobile' },
    body: { email, password: 'squatter password' },
  });
  t.equal(signUp.statusCode, 201, 'the squatter signed up without verification');
  const squatter = JSON.parse(signUp.body) as { accessToken: string; refreshToken: string };
  // A pending verification of the account (the squatter asked for a verification email).
  await first.api.post('/api/auth/email/send-verification', { body: { email } });

  // The operator restarts with ADMIN_EMAIL naming that address (same database, same signing key).
  const second = await buildAnotherInstance(t, first, {
    env: {
      REQUIRE_EMAIL_VERIFICATION: 'false',
      JWT_SECRET: 'k'.repeat(16) + 'x'.repeat(16),
      ADMIN_EMAIL: email,
      ADMIN_PASSWORD: PASSWORD,
    },
    logLevel: 'warn',
  });
  const { api, lines } = second;

  const refreshed = await api.post('/api/auth/refresh', {
    query: { client_type: 'mobile' },
    body: { refreshToken: squatter.refreshToken },
  });
  assertErrorBody(t, refreshed, 401, 'REFRESH_TOKEN_INVALID');
  const listed = await api.get('/api/auth/users', { headers: { authorization: `Bearer ${squatter.accessToken}` } });
  assertErrorBody(t, listed, 401, 'SESSION_REVOKED');
  const pending = await first.database.handle.db
    .selectFrom('one_time_codes')
    .innerJoin('users', 'users.id', 'one_time_codes.user_id')
    .select('user_id')
    .where('purpose', '=', 'verification')
    .where('users.email', '=', email)
    .execute();
  t.same(pending, [], 'the pending verification was deleted');
  const warning = lines
    .map((l) => JSON.parse(l) as { level: number; msg: string; revokedSessions?: number })
    .find((l) => l.level === 40 && /promoted/.test(l.msg));
  t.ok(warning, 'a warning names the promotion');
  t.equal(warning?.revokedSessions, 1, 'and what was revoked');

  const signIn = (password: string) =>
    api.post('/api/auth/sessions', { query: { client_type: 'mobile' }, body: { email, password } });
  const admin = await signIn(PASSWORD);
  t.equal(admin.statusCode, 200, 'the configured password signs in');
  const { accessToken } = admin.json();
  const asAdmin = await api.get('/api/auth/users', { headers: { authorization: `Bearer ${accessToken}` } });
  t.equal(asAdmin.statusCode, 200, "the administrator's own session lists users");
  assertErrorBody(t, await signIn('squatter password'), 401, 'INVALID_CREDENTIALS');
});

t.test(
  'a restart with the same ADMIN_PASSWORD keeps the password the administrator set since; a new one replaces it',
  async (t) => {
    const email = newEmail('admin-own');
    const env = (password: string) => ({
      JWT_SECRET: 'k'.repeat(16) + 'y'.repeat(16),
      ADMIN_EMAIL: email,
      ADMIN_PASSWORD: password,
    });
    const first = await buildTestApp(t, { env: env(PASSWORD) });
    const signIn = (api: typeof first.api, password: string) =>
      api.post('/api/auth/sessions', { query: { client_type: 'mobile' }, body: { email, password } });
    const session = JSON.parse((await signIn(first.api, PASSWORD)).body) as { accessToken: string };
    const own = 'the administrator’s own passphrase';
    const changed = await first.api.post('/api/auth/password', {
      headers: { authorization: `Bearer ${session.accessToken}` },
      body: { currentPassword: PASSWORD, newPassword: own },
    });
    t.equal(changed.statusCode, 204, 'the administrator changed their password');
    const kept = JSON.parse((await signIn(first.api, own)).body) as { accessToken: string };

    const restarted = await buildAnotherInstance(t, first, { env: env(PASSWORD), logLevel: 'info' });
    t.equal((await signIn(restarted.api, own)).statusCode, 200, 'their password still signs in after the restart');
    assertErrorBody(t, await signIn(restarted.api, PASSWORD), 401, 'INVALID_CREDENTIALS');
    const current = await restarted.api.get('/api/auth/sessions/current', {
      headers: { authorization: `Bearer ${kept.accessToken}` },
    });
    t.equal(current.statusCode, 200, 'and their sessions go on');
    t.ok(
      restarted.lines.some((l) => l.includes('the administrator has set another password since: theirs is kept')),
      'the log says why ADMIN_PASSWORD was not applied',
    );

    const rotated = 'a new passphrase from the environment';
    const third = await buildAnotherInstance(t, first, { env: env(rotated) });
    t.equal((await signIn(third.api, rotated)).statusCode, 200, 'a new ADMIN_PASSWORD replaces it');
    assertErrorBody(t, await signIn(third.api, own), 401, 'INVALID_CREDENTIALS');
    const ended = await third.api.get('/api/auth/sessions/current', {
      headers: { authorization: `Bearer ${kept.accessToken}` },
    });
    assertErrorBody(t, ended, 401, 'SESSION_REVOKED');
  },
);

t.test(
  'a restart with the ADMIN_PASSWORD applied before never makes a demoted or replaced account the administrator',
  async (t) => {
    const email = newEmail('admin-demoted');
    const env = (password: string) => ({
      JWT_SECRET: 'k'.repeat(16) + 'z'.repeat(16),
      ADMIN_EMAIL: email,
      ADMIN_PASSWORD: password,
    });
    const first = await buildTestApp(t, { env: env(PASSWORD) });
    const db = first.database.handle.db;
    const signIn = (api: typeof first.api, password: string) =>
      api.post('/api/auth/sessions', { query: { client_type: 'mobile' }, body: { email, password } });
    const account = () =>
      db.selectFrom('users').select(['id', 'role']).where('email', '=', email).executeTakeFirstOrThrow();
    const { id } = await account();

    // Demoted (as after a leak of the environment file); then restarted with that same file.
    await db.updateTable('users').set({ role: 'user' }).where('id', '=', id).execute();
    const restarted = await buildAnotherInstance(t, first, { env: env(PASSWORD), logLevel: 'warn' });
    t.same(await account(), { id, role: 'user' }, 'still demoted');
    t.ok(
      restarted.lines.some(
        (l) => l.includes('which is no longer that administrator') && l.includes('nothing was done'),
      ),
      'the log says why',
    );
    const asUser = JSON.parse((await signIn(restarted.api, PASSWORD)).body) as { accessToken: string };
    t.equal(
      decodeClaims(asUser.accessToken).role,
      'user',
      'whoever knows the old password signs in as a plain user at most',
    );

    // Deleted, and the address signed up for again by someone else.
    await db.deleteFrom('users').where('id', '=', id).execute();
    const squatter = await restarted.api.post('/api/auth/users', {
      query: { client_type: 'mobile' },
      body: { email, password: 'the squatter password' },
    });
    t.ok([201, 202].includes(squatter.statusCode), 'someone signs up with the address');
    await buildAnotherInstance(t, first, { env: env(PASSWORD) });
    const replaced = await account();
    t.not(replaced.id, id, 'another account');
    t.equal(replaced.role, 'user', 'not made the administrator by the old ADMIN_PASSWORD');

    // A new ADMIN_PASSWORD is the operator's decision: applied.
    const rotated = 'the operator chose a new one';
    const fourth = await buildAnotherInstance(t, first, { env: env(rotated) });
    t.equal((await account()).role, 'admin', 'a new ADMIN_PASSWORD makes the account the administrator');
    t.equal((await signIn(fourth.api, rotated)).statusCode, 200);
    assertErrorBody(t, await signIn(fourth.api, 'the squatter password'), 401, 'INVALID_CREDENTIALS');
  },
);
