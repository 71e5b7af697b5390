// Requests that meet the account's first second factor being verified. The verification's
// transaction (the service's own repository steps, held open here before its commit) marks the
// account as having a factor and ends its sessions below aal2.
// - A sign-in that read the account before that commit and inserted its session after it would
//   keep a session that owes nothing: the insert reads the account's row FOR SHARE, so it waits
//   and then sees the factor.
// - A request of a session that the verification ends, waiting for the account's lock meanwhile,
//   must not change the factors once it has the lock (removing the factor just verified).
import t from 'tap';
import * as mfa from '../src/db/repositories/mfa.ts';
import * as sessions from '../src/db/repositories/sessions.ts';
import { buildAuthTestApp, decodeClaims, PASSWORD } from './helpers/auth.ts';
import { heldTransaction, lockWaits, usingPostgres } from './helpers/database.ts';
import { assertErrorBody } from './helpers/error-body.ts';

t.test(
  'a sign-in racing the first factor’s verification owes the second step',
  { skip: !usingPostgres && 'PostgreSQL only (row locks between connections)' },
  async (t) => {
    const s = await buildAuthTestApp(t, { label: 'mfa-race', env: { DATABASE_POOL_MAX: '10' } });
    const { app, clock } = s;
    const signIn = () =>
      app.inject({
        method: 'POST',
        url: '/api/auth/sessions?client_type=mobile',
        payload: { email, password: PASSWORD },
      });
    const email = await s.verifiedAccount('mfa-race');
    const first = (await signIn()).json().accessToken as string;
    const userId = decodeClaims(first).sub as string;
    const enrolled = await app.inject({
      method: 'POST',
      url: '/api/auth/factors',
      headers: { authorization: `Bearer ${first}` },
      payload: { type: 'totp' },
    });
    t.equal(enrolled.statusCode, 201, 'a factor is enrolled');
    const factorId = enrolled.json().id as string;

    const waitingOn = await lockWaits(t, s.database.url);

    // The verification's steps, as src/auth/mfa/second-step.ts takes them, held before the commit.
    const now = clock.now();
    const verification = heldTransaction(s.database.handle.db, async (trx) => {
      await mfa.lockAccountMfa(trx, userId);
      await mfa.acceptTotpStep(trx, userId, factorId, Math.floor(now.getTime() / 30_000), now);
      t.equal(await mfa.refreshMfaEnabled(trx, userId), true);
      await sessions.revokeUserSessionsBelowAal2(trx, userId, now);
    });
    await verification.held;
    const signingIn = signIn();
    t.ok(await waitingOn('insert into "sessions"%'), 'the sign-in’s session waits for the account’s row');
    await verification.commit();
    const answer = await signingIn;
    t.equal(answer.statusCode, 200, 'the password sign-in succeeds');
    const token = answer.json().accessToken as string;
    t.equal(decodeClaims(token).next_aal, 'aal2', 'its session owes the second step');
    assertErrorBody(
      t,
      await app.inject({
        method: 'GET',
        url: `/api/auth/profiles/${userId}`,
        headers: { authorization: `Bearer ${token}` },
      }),
      403,
      'MFA_REQUIRED',
    );
    assertErrorBody(
      t,
      await app.inject({
        method: 'GET',
        url: '/api/auth/sessions/current',
        headers: { authorization: `Bearer ${first}` },
      }),
      401,
      'SESSION_REVOKED',
    );
  },
);

t.test(
  'a session ended by the first factor\u2019s verification cannot remove that factor',
  { skip: !usingPostgres && 'PostgreSQL only (row locks between connections)' },
  async (t) => {
    const s = await buildAuthTestApp(t, { label: 'mfa-race-remove', env: { DATABASE_POOL_MAX: '10' } });
    const { app, clock } = s;
    const email = await s.verifiedAccount('mfa-race-remove');
    const signIn = async () =>
      (
        await app.inject({
          method: 'POST',
          url: '/api/auth/sessions?client_type=mobile',
          payload: { email, password: PASSWORD },
        })
      ).json().accessToken as string;
    const owner = await signIn();
    const other = await signIn(); // someone else with the password
    const userId = decodeClaims(owner).sub as string;
    const enrolled = await app.inject({
      method: 'POST',
      url: '/api/auth/factors',
      headers: { authorization: `Bearer ${owner}` },
      payload: { type: 'totp' },
    });
    const factorId = enrolled.json().id as string;

    const waitingOn = await lockWaits(t, s.database.url);
    const now = clock.now();
    const verification = heldTransaction(
      s.database.handle.db,
      (trx) => mfa.lockAccountMfa(trx, userId),
      async (trx) => {
        await mfa.acceptTotpStep(trx, userId, factorId, Math.floor(now.getTime() / 30_000), now);
        await mfa.refreshMfaEnabled(trx, userId);
        await sessions.revokeUserSessionsBelowAal2(trx, userId, now);
      },
    );
    await verification.held;
    const removing = app.inject({
      method: 'DELETE',
      url: `/api/auth/factors/${factorId}`,
      headers: { authorization: `Bearer ${other}` },
    });
    t.ok(await waitingOn('select % from "users" %for update'), 'the removal waits for the account');
    await verification.commit();
    assertErrorBody(t, await removing, 401, 'SESSION_REVOKED');
    const factors = await s.database.handle.db
      .selectFrom('mfa_factors')
      .select('status')
      .where('id', '=', factorId)
      .execute();
    t.same(factors, [{ status: 'verified' }], 'the factor just verified stays');
  },
);
