/**
 * Provider identities against a real OpenID Provider (oidc-provider on loopback), configured under
 * three names: `testidp`, `second` and `strict` (OAUTH_STRICT_LINK_BY_EMAIL=false). The attack the
 * linking rule now refuses (a second issuer asserting the administrator's address), linking by
 * address turned off, the list, unlinking (never the last way in; another account's identity is
 * unknown), linking from a session whatever address the provider gives, and the audit rows.
 */
import { execFileSync } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import type { LightMyRequestResponse } from 'fastify';
import t from 'tap';
import { freePort } from '../scripts/lib/service-process.ts';
import { ADMIN_PASSWORD, bearer } from './helpers/accounts.ts';
import { buildAuthTestApp, decodeClaims, PASSWORD } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { followAuthorization } from './helpers/oauth-browser.ts';
import { SERVICE_CLIENT, startOidcProvider } from './helpers/oidc-provider.ts';

const APP = 'https://app.example.com';
const REDIRECT = `${APP}/auth/callback`;
const SETTINGS = `${APP}/settings/identities`;
const ADMIN_EMAIL = 'admin@example.test';
const PROVIDERS = ['testidp', 'second', 'strict'] as const;
const port = await freePort();
const base = `http://127.0.0.1:${port}`;
const callbackOf = (name: string) => `${base}/api/auth/oauth/${name}/callback`;

const idp = await startOidcProvider({ clients: [{ ...SERVICE_CLIENT, redirectUris: PROVIDERS.map(callbackOf) }] });
t.teardown(() => idp.close());

const providerEnv: Record<string, string> = { OAUTH_PROVIDERS: PROVIDERS.join(',') };
for (const name of PROVIDERS) {
  const prefix = `OAUTH_${name.toUpperCase()}_`;
  providerEnv[`${prefix}CLIENT_ID`] = SERVICE_CLIENT.clientId;
  providerEnv[`${prefix}CLIENT_SECRET`] = SERVICE_CLIENT.clientSecret;
  providerEnv[`${prefix}ISSUER`] = idp.issuer;
}

const { app, database, clock, verifiedAccount } = await buildAuthTestApp(t, {
  label: 'identities',
  env: {
    PUBLIC_URL: base,
    COOKIE_SECURE: 'false',
    AUTH_REDIRECT_ALLOWLIST: `${APP}/`,
    ADMIN_EMAIL,
    ADMIN_PASSWORD,
    ...providerEnv,
    OAUTH_STRICT_LINK_BY_EMAIL: 'false',
  },
});
await app.listen({ port, host: '127.0.0.1' });
const db = database.handle.db;

interface Session {
  accessToken: string;
  refreshToken: string;
  userId: string;
  sessionId: string;
}

function toSession(res: LightMyRequestResponse): Session {
  if (res.statusCode !== 200) throw new Error(`expected a session, got ${res.statusCode} ${res.body}`);
  const body = res.json() as { accessToken: string; refreshToken: string; user: { id: string } };
  return {
    accessToken: body.accessToken,
    refreshToken: body.refreshToken,
    userId: body.user.id,
    sessionId: String(decodeClaims(body.accessToken).sid),
  };
}

const passwordSignIn = async (email: string, password = PASSWORD) =>
  toSession(
    await app.inject({ method: 'POST', url: '/api/auth/sessions?client_type=mobile', payload: { email, password } }),
  );

const VERIFIER = 'identities-test-verifier-0123456789-abcdefghijkl';
const CHALLENGE = createHash('sha256').update(VERIFIER).digest('base64url');

/** A sign-in with a provider as `login`, through its pages: the URL the browser lands on at the app. */
async function signInAtProvider(provider: string, login: string): Promise<URL> {
  const started = await app.inject({
    url: `/api/auth/oauth/custom/${provider}?redirect_uri=${encodeURIComponent(REDIRECT)}&code_challenge=${CHALLENGE}`,
  });
  if (started.statusCode !== 200) throw new Error(`start: ${started.statusCode} ${started.body}`);
  const { finalUrl } = await followAuthorization(started.json().authUrl, {
    login,
    stopAt: (url) => url.origin === APP,
  });
  return finalUrl;
}

/** A whole provider sign-in: the session, or the error the app was sent. */
async function signInWith(provider: string, login: string): Promise<Session | { error: string | null }> {
  const landed = await signInAtProvider(provider, login);
  const code = landed.searchParams.get('insforge_code');
  if (code === null) return { error: landed.searchParams.get('error') };
  return toSession(
    await app.inject({
      method: 'POST',
      url: '/api/auth/oauth/exchange?client_type=mobile',
      payload: { code, code_verifier: VERIFIER },
    }),
  );
}

const startLink = (session: Pick<Session, 'accessToken'>, payload: Record<string, unknown>) =>
  app.inject({ method: 'POST', url: '/api/auth/identities', headers: bearer(session.accessToken), payload });

/** A link from `session` to `provider` as `login`, through the provider's pages: the URL the browser lands on. */
async function linkAtProvider(session: Session, provider: string, login: string): Promise<URL> {
  const started = await startLink(session, { provider, redirect_uri: SETTINGS });
  if (started.statusCode !== 200) throw new Error(`link: ${started.statusCode} ${started.body}`);
  const { finalUrl } = await followAuthorization(started.json().authUrl, {
    login,
    stopAt: (url) => url.origin === APP,
  });
  return finalUrl;
}

const listIdentities = (session: Pick<Session, 'accessToken'>) =>
  app.inject({ url: '/api/auth/identities', headers: bearer(session.accessToken) });
const unlink = (session: Pick<Session, 'accessToken'>, identityId: string) =>
  app.inject({ method: 'DELETE', url: `/api/auth/identities/${identityId}`, headers: bearer(session.accessToken) });

/** The account's identities as the database has them (provider and subject). */
const storedIdentities = (userId: string) =>
  db
    .selectFrom('user_providers')
    .select(['provider', 'provider_account_id as subject'])
    .where('user_id', '=', userId)
    .where('provider', '<>', 'email')
    .orderBy('provider')
    .execute();

const auditRows = (userId: string, types: readonly string[]) =>
  db
    .selectFrom('audit_log')
    .select(['type', 'method', 'session_id', 'details', 'ip'])
    .where('user_id', '=', userId)
    .where('type', 'in', types)
    .orderBy('id')
    .execute();

const adminId = async () =>
  (await db.selectFrom('users').select('id').where('email', '=', ADMIN_EMAIL).executeTakeFirstOrThrow()).id;

t.test('a second issuer asserting the administrator’s address gets no session', async (t) => {
  const admin = await adminId();
  const sessionsBefore = await db.selectFrom('sessions').select('id').where('user_id', '=', admin).execute();
  idp.accounts.set('mallory', { email: ADMIN_EMAIL, email_verified: true });

  const landed = await signInAtProvider('second', 'mallory');
  t.equal(landed.searchParams.get('error'), 'OAUTH_LINK_REQUIRED', 'the redirect flow is refused');
  t.equal(landed.searchParams.get('insforge_code'), null, 'with no one-time code');

  const token = await idp.issueIdToken({ clientId: SERVICE_CLIENT.clientId, login: 'mallory' });
  const byToken = await app.inject({
    method: 'POST',
    url: '/api/auth/id-token?client_type=mobile',
    payload: { provider: 'second', token },
  });
  assertErrorBody(t, byToken, 409, 'OAUTH_LINK_REQUIRED');

  t.same(await storedIdentities(admin), [], 'nothing is linked to the administrator');
  const sessionsAfter = await db.selectFrom('sessions').select('id').where('user_id', '=', admin).execute();
  t.same(sessionsAfter, sessionsBefore, 'and no session was opened for it');
});

t.test('the administrator links a provider from a session, and then signs in with it', async (t) => {
  const admin = await passwordSignIn(ADMIN_EMAIL, ADMIN_PASSWORD);
  idp.accounts.set('root-at-idp', { email: 'root@elsewhere.test', email_verified: true });
  const landed = await linkAtProvider(admin, 'second', 'root-at-idp');
  t.equal(landed.origin + landed.pathname, SETTINGS);
  t.same([...landed.searchParams], [['linked', 'second']]);
  const signedIn = await signInWith('second', 'root-at-idp');
  t.equal('userId' in signedIn ? signedIn.userId : signedIn.error, admin.userId, 'the linked identity signs in');
});

t.test('OAUTH_<NAME>_LINK_BY_EMAIL=false: an existing account’s address is not linked', async (t) => {
  const email = await verifiedAccount('strict');
  const owner = await passwordSignIn(email);
  idp.accounts.set('strict-claimer', { email, email_verified: true });
  const refused = await signInWith('strict', 'strict-claimer');
  t.same(refused, { error: 'OAUTH_LINK_REQUIRED' });
  t.same(await storedIdentities(owner.userId), [], 'no link');
  const accounts = await db.selectFrom('users').select('id').where('email', '=', email).execute();
  t.equal(accounts.length, 1, 'and no second account');
  const linked = await signInWith('testidp', 'strict-claimer');
  t.equal('userId' in linked && linked.userId, owner.userId, 'a provider that links by address still does');

  const fresh = await signInWith('strict', 'strict-newcomer');
  t.ok('userId' in fresh, 'an address without an account signs up as before');
});

t.test('the list, and unlinking while a password remains', async (t) => {
  const email = await verifiedAccount('lister');
  idp.accounts.set('lister', { email, email_verified: true });
  const viaProvider = await signInWith('testidp', 'lister');
  if (!('userId' in viaProvider)) throw new Error(`sign-in refused: ${viaProvider.error}`);
  const session = await passwordSignIn(email);
  t.equal(viaProvider.userId, session.userId, 'linked by address');

  const listed = await listIdentities(session);
  t.equal(listed.statusCode, 200);
  const [identity, ...rest] = listed.json().identities;
  t.same(rest, []);
  t.match(identity, { provider: 'testidp', subject: 'lister', email, linkedAt: String });
  t.equal(Number.isNaN(Date.parse(identity.linkedAt)), false);

  const removed = await unlink(session, identity.id);
  t.equal(removed.statusCode, 204);
  t.equal(removed.body, '');
  t.same((await listIdentities(session)).json().identities, []);
  const again = await signInWith('testidp', 'lister');
  t.same(again, { error: 'OAUTH_LINK_REQUIRED' }, 'the identity no longer signs in, nor is linked again by address');
  t.same(await storedIdentities(session.userId), []);
  t.equal((await passwordSignIn(email)).userId, session.userId, 'the password still signs in');

  const rows = await auditRows(session.userId, ['identity_linked', 'identity_unlinked']);
  t.same(
    rows.map(({ ip, ...row }) => row),
    [
      {
        type: 'identity_linked',
        method: 'testidp',
        session_id: null,
        details: { provider: 'testidp', identityId: identity.id },
      },
      {
        type: 'identity_unlinked',
        method: 'testidp',
        session_id: session.sessionId,
        details: { provider: 'testidp', identityId: identity.id },
      },
    ],
    'both are in the audit log',
  );
  t.ok(rows[0]?.ip !== null && rows[1]?.ip !== null, 'with the client address');

  const relinked = await linkAtProvider(session, 'testidp', 'lister');
  t.equal(relinked.searchParams.get('linked'), 'testidp', 'linking from the session still works');
  const back = await signInWith('testidp', 'lister');
  t.equal('userId' in back && back.userId, session.userId, 'and the identity signs in again');
});

t.test('unlinking the last way in is refused; another account’s identity is unknown', async (t) => {
  idp.accounts.set('only-idp', { email: 'only-idp@example.test', email_verified: true });
  const session = await signInWith('testidp', 'only-idp');
  if (!('userId' in session)) throw new Error(`sign-in refused: ${session.error}`);
  const [identity] = (await listIdentities(session)).json().identities;
  const refused = await unlink(session, identity.id);
  const body = assertErrorBody(t, refused, 409, 'LAST_SIGN_IN_METHOD');
  t.match(body.message, /last way to sign in/);
  t.same(await storedIdentities(session.userId), [{ provider: 'testidp', subject: 'only-idp' }], 'nothing changed');

  // Another account's identity and an unknown id: the same answer.
  const stranger = await passwordSignIn(await verifiedAccount('stranger'));
  const foreign = await unlink(stranger, identity.id);
  const unknown = await unlink(stranger, randomUUID());
  assertErrorBody(t, foreign, 404, 'NOT_FOUND');
  t.equal(foreign.body, unknown.body, 'the same body as an unknown id');
  t.equal(unknown.statusCode, 404);
  t.equal((await unlink(stranger, 'not-a-uuid')).body, unknown.body, 'and as an id that is not one');
  t.same(await storedIdentities(session.userId), [{ provider: 'testidp', subject: 'only-idp' }]);

  // With a second identity, the first may go.
  const linked = await linkAtProvider(session, 'second', 'only-idp-second');
  t.equal(linked.searchParams.get('linked'), 'second');
  t.equal((await unlink(session, identity.id)).statusCode, 204);
  t.same(await storedIdentities(session.userId), [{ provider: 'second', subject: 'only-idp-second' }]);
});

t.test('two unlinks at once: the account keeps one way in', async (t) => {
  idp.accounts.set('racer', { email: 'racer@example.test', email_verified: true });
  const session = await signInWith('testidp', 'racer');
  if (!('userId' in session)) throw new Error(`sign-in refused: ${session.error}`);
  t.equal((await linkAtProvider(session, 'second', 'racer-second')).searchParams.get('linked'), 'second');
  const ids = (await listIdentities(session)).json().identities.map((i: { id: string }) => i.id);
  t.equal(ids.length, 2);
  const answers = await Promise.all(ids.map((id: string) => unlink(session, id)));
  t.same(answers.map((a) => a.statusCode).sort(), [204, 409], 'one passes, the other is refused');
  t.equal((await storedIdentities(session.userId)).length, 1, 'one identity is left');
});

t.test('linking from a session', async (t) => {
  const email = await verifiedAccount('linker');
  const session = await passwordSignIn(email);
  idp.accounts.set('linker-elsewhere', { email: 'someone-else@example.test', email_verified: true });
  const landed = await linkAtProvider(session, 'second', 'linker-elsewhere');
  t.same([...landed.searchParams], [['linked', 'second']], 'another address is linked from a session');
  const [identity] = (await listIdentities(session)).json().identities;
  t.match(identity, { provider: 'second', subject: 'linker-elsewhere', email: 'someone-else@example.test' });
  const signedIn = await signInWith('second', 'linker-elsewhere');
  t.equal('userId' in signedIn && signedIn.userId, session.userId, 'the identity signs in to the account');
  t.same(
    (await auditRows(session.userId, ['identity_linked'])).map(({ ip, ...row }) => row),
    [
      {
        type: 'identity_linked',
        method: 'second',
        session_id: session.sessionId,
        details: { provider: 'second', identityId: identity.id },
      },
    ],
  );

  idp.accounts.set('linker-unverified', { email: 'unverified@example.test', email_verified: false });
  const other = await passwordSignIn(await verifiedAccount('linker-2'));
  t.equal((await linkAtProvider(other, 'strict', 'linker-unverified')).searchParams.get('linked'), 'strict');
  t.match(
    (await listIdentities(other)).json().identities,
    [{ provider: 'strict', email: null }],
    'an unvouched address is not kept',
  );

  // An identity linked to another account is not moved.
  const taken = await linkAtProvider(other, 'second', 'linker-elsewhere');
  t.same([...taken.searchParams], [['error', 'IDENTITY_ALREADY_LINKED']]);
  t.same(await storedIdentities(other.userId), [{ provider: 'strict', subject: 'linker-unverified' }]);
  t.equal((await storedIdentities(session.userId)).length, 1, 'it stays with its account');

  // One identity per provider: unlink the one there is first.
  assertErrorBody(
    t,
    await startLink(other, { provider: 'strict', redirect_uri: SETTINGS }),
    409,
    'IDENTITY_ALREADY_LINKED',
  );
});

t.test('a link whose session ended before the provider answered is refused', async (t) => {
  const email = await verifiedAccount('ended');
  const session = await passwordSignIn(email);
  const started = await startLink(session, { provider: 'testidp', redirect_uri: SETTINGS });
  t.equal(started.statusCode, 200);
  const atCallback = await followAuthorization(started.json().authUrl, {
    login: 'ended-idp',
    stopAt: callbackOf('testidp'),
  });
  const logout = await app.inject({
    method: 'POST',
    url: '/api/auth/logout?client_type=mobile',
    payload: { refreshToken: session.refreshToken },
  });
  t.equal(logout.statusCode, 204);
  const callback = await app.inject({ url: atCallback.finalUrl.pathname + atCallback.finalUrl.search });
  t.equal(callback.statusCode, 302);
  const location = new URL(String(callback.headers.location));
  t.equal(location.origin + location.pathname, SETTINGS);
  t.same([...location.searchParams], [['error', 'SESSION_REVOKED']]);
  t.same(await storedIdentities(session.userId), [], 'nothing was linked');
  const idpSignIn = await signInWith('testidp', 'ended-idp');
  t.not('userId' in idpSignIn && idpSignIn.userId, session.userId, 'the identity does not sign in to the account');
});

t.test('an account with a second factor links and unlinks only from an aal2 session', async (t) => {
  const email = await verifiedAccount('mfa');
  const first = await passwordSignIn(email);
  const created = await app.inject({
    method: 'POST',
    url: '/api/auth/factors',
    headers: bearer(first.accessToken),
    payload: { type: 'totp' },
  });
  t.equal(created.statusCode, 201);
  const { id: factorId, totp } = created.json() as { id: string; totp: { secret: string } };
  const at = Math.floor(clock.now().getTime() / 1000);
  const code = execFileSync('oathtool', ['--totp', '-b', '--now', `@${at}`, totp.secret], { encoding: 'utf8' }).trim();
  const raised = toSession(
    await app.inject({
      method: 'POST',
      url: '/api/auth/mfa/verify?client_type=mobile',
      headers: bearer(first.accessToken),
      payload: { factorId, code },
    }),
  );
  const pending = await passwordSignIn(email);
  t.equal(decodeClaims(pending.accessToken).next_aal, 'aal2', 'a password sign-in owes the second step');
  assertErrorBody(t, await startLink(pending, { provider: 'testidp', redirect_uri: SETTINGS }), 403, 'MFA_REQUIRED');
  assertErrorBody(t, await listIdentities(pending), 403, 'MFA_REQUIRED');
  const linked = await linkAtProvider(raised, 'testidp', 'mfa-idp');
  t.equal(linked.searchParams.get('linked'), 'testidp', 'the aal2 session links');
  const [identity] = (await listIdentities(raised)).json().identities;
  assertErrorBody(t, await unlink(pending, identity.id), 403, 'MFA_REQUIRED');
  t.equal((await unlink(raised, identity.id)).statusCode, 204, 'and unlinks');
});

t.test('starting a link: the rules of the request', async (t) => {
  const email = await verifiedAccount('starter');
  const session = await passwordSignIn(email);
  const noToken = await app.inject({
    method: 'POST',
    url: '/api/auth/identities',
    payload: { provider: 'testidp', redirect_uri: SETTINGS },
  });
  assertErrorBody(t, noToken, 401, 'UNAUTHORIZED');
  assertErrorBody(t, await listIdentities({ accessToken: 'nope' }), 401);
  const unknown = assertErrorBody(
    t,
    await startLink(session, { provider: 'nobody', redirect_uri: SETTINGS }),
    400,
    'INVALID_INPUT',
  );
  t.match(unknown.message, /body\.provider/);
  const offList = assertErrorBody(
    t,
    await startLink(session, { provider: 'testidp', redirect_uri: 'https://evil.example.com/x' }),
    400,
    'INVALID_INPUT',
  );
  t.match(offList.message, /body\.redirect_uri/);

  // A proof older than 10 minutes: a refreshed token still carries the sign-in's time.
  clock.advance(11 * 60);
  const refreshed = toSession(
    await app.inject({
      method: 'POST',
      url: '/api/auth/refresh?client_type=mobile',
      payload: { refreshToken: session.refreshToken },
    }),
  );
  assertErrorBody(
    t,
    await startLink(refreshed, { provider: 'testidp', redirect_uri: SETTINGS }),
    403,
    'REAUTHENTICATION_REQUIRED',
  );
  assertErrorBody(t, await unlink(refreshed, randomUUID()), 403, 'REAUTHENTICATION_REQUIRED');
  t.equal((await listIdentities(refreshed)).statusCode, 200, 'the list needs no recent proof');
});
