// Flows that lock an account's row and then end its sessions (a reset, a password change, an
// administrator's action) and flows that hold a session and then write a row of the account (a
// passkey registration challenge, whose foreign key locks the account's row) must take the two in
// one order, the account first: the other way round, each held a row the other waited for until
// PostgreSQL failed one of them (SQLSTATE 40P01, a 503). PostgreSQL only: row locks between
// connections. The test holds the account's row so that both flows start, the one that ends the
// sessions queued first; then lets go.
import { sql } from 'kysely';
import t, { type Test } from 'tap';
import { type AuthTestApp, buildAuthTestApp, PASSWORD, toSession } from './helpers/auth.ts';
import { heldTransaction, lockWaiters, usingPostgres } from './helpers/database.ts';
import { assertErrorBody } from './helpers/error-body.ts';

const only = { skip: !usingPostgres && 'PostgreSQL only (row locks between connections)' };

async function setup(t: Test) {
  const s = await buildAuthTestApp(t, { label: 'account-lock-order', env: { PUBLIC_URL: 'http://localhost:7130' } });
  const waiters = await lockWaiters(t, s.database.url);
  const post = (url: string, payload: Record<string, unknown>, accessToken?: string) =>
    s.app.inject({
      method: 'POST',
      url,
      payload,
      headers: accessToken === undefined ? {} : { authorization: `Bearer ${accessToken}` },
    });
  const signIn = async (email: string) =>
    toSession(await post('/api/auth/sessions?client_type=mobile', { method: 'password', email, password: PASSWORD }))
      .accessToken;
  /** Holds the account's row until `commit()`. */
  const holdAccount = async (email: string) => {
    const held = heldTransaction(s.database.handle.db, (trx) =>
      sql`select id from users where email = ${email} for update`.execute(trx),
    );
    await held.held;
    return held;
  };
  return { ...s, waiters, post, signIn, holdAccount };
}

/** Asks for passkey registration options with `accessToken` while `endsSessions` waits for the account. */
async function crossWithRegistration(
  t: Test,
  s: Awaited<ReturnType<typeof setup>>,
  email: string,
  accessToken: string,
  endsSessions: () => ReturnType<AuthTestApp['verify']>,
) {
  const account = await s.holdAccount(email);
  const ending = endsSessions();
  t.ok(await s.waiters(1), 'the flow that ends the sessions waits for the account');
  const options = s.post('/api/auth/passkeys/registration/options', {}, accessToken);
  t.ok(await s.waiters(2), 'the registration options wait for the account');
  await account.commit();
  const [ended, asked] = await Promise.all([ending, options]);
  // The session ended meanwhile: the answer of a revoked session, not a 503.
  assertErrorBody(t, asked, 401, 'SESSION_REVOKED');
  return ended;
}

t.test('passkey registration options while a reset by link ends the sessions', only, async (t) => {
  const s = await setup(t);
  const email = await s.verifiedAccount('registration-and-reset');
  s.clock.advance(61);
  t.equal((await s.post('/api/auth/email/send-reset-password', { email })).statusCode, 202);
  const reset = await s.nthMail(email, 2);
  const accessToken = await s.signIn(email);
  const ended = await crossWithRegistration(t, s, email, accessToken, () =>
    s.post('/api/auth/email/reset-password', { otp: reset.token, newPassword: 'a new passphrase after all' }),
  );
  t.equal(ended.statusCode, 200, ended.body);
});

t.test('passkey registration options while a password change on another session ends them', only, async (t) => {
  const s = await setup(t);
  const email = await s.verifiedAccount('registration-and-change');
  const changer = await s.signIn(email);
  const accessToken = await s.signIn(email);
  const ended = await crossWithRegistration(t, s, email, accessToken, () =>
    s.post('/api/auth/password', { currentPassword: PASSWORD, newPassword: 'a changed passphrase indeed' }, changer),
  );
  t.equal(ended.statusCode, 204, ended.body);
});
