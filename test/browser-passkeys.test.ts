/**
 * Passkeys in a real browser: Debian's Chromium with its virtual authenticator (CDP WebAuthn: ctap2,
 * internal transport, resident keys, user verification), an app page using @simplewebauthn/browser
 * and this project's SDK. The page is served as http://localhost:<port> (a secure context; the
 * relying party is `localhost`), the service is on 127.0.0.1. What the service must refuse is shown
 * with genuine assertions of that authenticator, made to miss one rule each.
 */
import type { CDPSession, Page } from 'playwright-core';
import t, { type Test } from 'tap';
import { revokeUserSessions } from '../src/db/repositories/sessions.ts';
import { decodeClaims, newEmail, PASSWORD } from './helpers/auth.ts';
import {
  type AppWindow,
  browserSkip,
  bundle,
  crossSiteEnv,
  launchBrowser,
  openApp,
  reloadApp,
  type ServiceUnderTest,
  screenshot,
  signInFromNode,
  startAppServer,
  startService,
  WAIT_MS,
} from './helpers/browser.ts';
import { heldTransaction, lockWaits, usingPostgres } from './helpers/database.ts';

const skip = browserSkip();

/** @simplewebauthn/browser as `window.webauthn`, bundled once. */
let webauthnBundle: Promise<string> | undefined;
const webauthnScript = () =>
  (webauthnBundle ??= bundle(`import { startAuthentication, startRegistration } from '@simplewebauthn/browser';
    (window as any).webauthn = { startAuthentication, startRegistration };`));

type Json = Record<string, unknown>;
interface PasskeyWindow extends AppWindow {
  webauthn: {
    startRegistration(options: { optionsJSON: unknown }): Promise<Json>;
    startAuthentication(options: { optionsJSON: unknown }): Promise<Json>;
  };
}

/** Opens (or reloads) the app page at `url` with @simplewebauthn/browser loaded. */
async function openPasskeyApp(page: Page, url?: string) {
  if (url === undefined) await reloadApp(page);
  else await openApp(page, url);
  await page.addScriptTag({ content: await webauthnScript() });
}

/** Chromium's virtual authenticator: a platform authenticator with resident keys and user verification. */
async function virtualAuthenticator(page: Page): Promise<{ cdp: CDPSession; authenticatorId: string }> {
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('WebAuthn.enable', { enableUI: false });
  const { authenticatorId } = await cdp.send('WebAuthn.addVirtualAuthenticator', {
    options: {
      protocol: 'ctap2',
      transport: 'internal',
      hasResidentKey: true,
      hasUserVerification: true,
      isUserVerified: true,
      automaticPresenceSimulation: true,
    },
  });
  return { cdp, authenticatorId };
}

/** A call to the service from the page, with an optional access token: status and body. */
async function call(page: Page, method: string, path: string, body?: unknown, token?: string) {
  return page.evaluate(
    async ({ method, path, body, token }) => {
      const w = globalThis as unknown as AppWindow;
      const headers: Record<string, string> = {};
      if (body !== undefined) headers['content-type'] = 'application/json';
      if (token !== undefined) headers.authorization = `Bearer ${token}`;
      const res = await w.fetch(`${w.SERVICE}${path}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        credentials: 'include',
      } as never);
      const text = await res.text();
      return { status: res.status, body: (text === '' ? null : JSON.parse(text)) as Json };
    },
    { method, path, body, token },
  );
}

/** An assertion by the page's authenticator for `options` (changed by `tweak` first). */
async function assertion(page: Page, options: unknown, tweak: Json = {}) {
  return page.evaluate(
    async ({ options, tweak }) => {
      const w = globalThis as unknown as PasskeyWindow;
      return w.webauthn.startAuthentication({ optionsJSON: { ...(options as Json), ...tweak } });
    },
    { options, tweak },
  );
}

/** A passkey sign-in from the page: options (with `token`, bound to its session), assertion, verify. */
async function passkeySignIn(page: Page, token?: string, tweak: Json = {}) {
  const options = await call(page, 'POST', '/api/auth/passkeys/authentication/options', {}, token);
  const response = await assertion(page, options.body.options, tweak);
  return call(
    page,
    'POST',
    '/api/auth/passkeys/authentication/verify?client_type=mobile',
    { challengeId: options.body.challengeId, response },
    token,
  );
}

/** Registers a passkey for the session of `token` from the page; the registered passkey's answer. */
async function register(page: Page, token: string, friendlyName = 'This laptop') {
  const options = await call(page, 'POST', '/api/auth/passkeys/registration/options', undefined, token);
  if (options.status !== 200)
    throw new Error(`registration options: ${options.status} ${JSON.stringify(options.body)}`);
  const response = await page.evaluate(async (optionsJSON) => {
    const w = globalThis as unknown as PasskeyWindow;
    return w.webauthn.startRegistration({ optionsJSON });
  }, options.body);
  return call(page, 'POST', '/api/auth/passkeys/registration/verify', { response, friendlyName }, token);
}

/**
 * The app server (http://localhost:<port>), the service (relying party `localhost`, WebAuthn origins
 * that page and http://app.localhost:<port>), and a browser with a virtual authenticator on the page.
 */
async function setUp(t: Test) {
  const appServer = await startAppServer(t, 'Passkeys');
  // The same page on another port: an origin the service allows (CORS) but does not list for WebAuthn.
  const elsewhere = await startAppServer(t, 'Passkeys elsewhere');
  const port = new URL(appServer.origin).port;
  const subdomain = `http://app.localhost:${port}`;
  const service = await startService(t, {
    ...crossSiteEnv([appServer.origin, subdomain, elsewhere.origin]),
    WEBAUTHN_RP_ID: 'localhost',
    WEBAUTHN_ORIGINS: `${appServer.origin},${subdomain}`,
    WEBAUTHN_RP_NAME: 'Passkey test',
  });
  appServer.serviceOrigin = service.origin;
  elsewhere.serviceOrigin = service.origin;
  const browser = await launchBrowser(t);
  await openPasskeyApp(browser.page, `${appServer.origin}/`);
  const authenticator = await virtualAuthenticator(browser.page);
  return { appServer, elsewhere, subdomain, service, browser, page: browser.page, ...authenticator };
}

/** A verified account (made from Node), signed in with its password: its access token. */
async function account(service: ServiceUnderTest, label: string) {
  const email = newEmail(label);
  const signUp = await service.app.inject({
    method: 'POST',
    url: '/api/auth/users?client_type=mobile',
    payload: { email, password: PASSWORD },
  });
  if (signUp.statusCode !== 202) throw new Error(`sign-up: ${signUp.statusCode} ${signUp.body}`);
  const [mail] = await service.smtp.waitFor(email, 1, WAIT_MS);
  const verified = await service.app.inject({
    method: 'POST',
    url: '/api/auth/email/verify?client_type=mobile',
    payload: { email, otp: mail?.code, signUpBinding: signUp.json().signUpBinding },
  });
  if (verified.statusCode !== 200) throw new Error(`verify: ${verified.statusCode} ${verified.body}`);
  return { email, token: verified.json().accessToken as string };
}

t.test('sign up, register a passkey, sign in with it alone, stay signed in, rename, delete', { skip }, async (t) => {
  const { service, page } = await setUp(t);
  const email = newEmail('passkey-flow');

  // Sign-up and the emailed code, in the page, with the project's SDK (web client).
  const signUp = await page.evaluate(
    async ({ email, password }) => {
      const w = globalThis as unknown as AppWindow;
      const onTokens = (tokens: { csrfToken: string | undefined }) =>
        w.localStorage.setItem('csrfToken', tokens.csrfToken ?? '');
      const api = w.ownSdk.createClient({ baseUrl: w.SERVICE, clientType: 'web', fetch: w.recordingFetch, onTokens });
      w.api = api;
      const res = await api.POST('/api/auth/users', {
        params: { query: { client_type: 'web' } },
        body: { email, password },
      });
      w.log(`sign-up: ${res.response.status}`);
      return res.response.status;
    },
    { email, password: PASSWORD },
  );
  t.equal(signUp, 202, 'signed up');
  const [mail] = await service.smtp.waitFor(email, 1, WAIT_MS);
  const verified = await page.evaluate(
    async ({ email, otp }) => {
      const w = globalThis as unknown as AppWindow;
      const api = w.api as ReturnType<AppWindow['ownSdk']['createClient']>;
      const res = await api.POST('/api/auth/email/verify', {
        params: { query: { client_type: 'web' } },
        body: { email, otp },
      });
      w.log(`verified: ${res.response.status}`);
      return res.response.status;
    },
    { email, otp: mail?.code ?? '' },
  );
  t.equal(verified, 200, 'the address is verified (a session opens)');

  // Registration: options → navigator.credentials.create() → verify, timed in the page.
  const registered = await page.evaluate(async () => {
    const w = globalThis as unknown as PasskeyWindow;
    const api = w.api as ReturnType<AppWindow['ownSdk']['createClient']>;
    const before = (await api.GET('/api/auth/sessions/current')).data?.aal;
    const started = performance.now();
    const options = await api.POST('/api/auth/passkeys/registration/options');
    const response = await w.webauthn.startRegistration({ optionsJSON: options.data });
    const res = await api.POST('/api/auth/passkeys/registration/verify', {
      body: { response: response as never, friendlyName: 'This laptop' },
    });
    const ms = performance.now() - started;
    w.log(`passkey registered: ${res.response.status} in ${ms.toFixed(0)} ms`);
    const after = (await api.GET('/api/auth/sessions/current')).data?.aal;
    return {
      status: res.response.status,
      ms,
      passkey: res.data,
      levels: [before, after],
      selection: (options.data as { authenticatorSelection?: unknown } | undefined)?.authenticatorSelection,
    };
  });
  t.equal(registered.status, 201, 'the passkey is registered');
  t.same(registered.selection, { residentKey: 'required', requireResidentKey: true, userVerification: 'required' });
  t.equal(registered.passkey?.friendlyName, 'This laptop');
  t.equal(registered.passkey?.recoveryCodes?.length, 10, 'the account’s first factor brings its recovery codes');
  const raised = decodeClaims(registered.passkey?.session?.accessToken ?? '');
  t.equal(raised.aal, 'aal2', 'and the session that made it, raised to aal2');
  t.same((raised.amr as { method: string }[]).map((m) => m.method).slice(-1), ['passkey']);
  t.same(registered.levels, ['aal1', 'aal2'], 'the SDK keeps the raised session');
  t.comment(`registration, options → verified: ${registered.ms.toFixed(0)} ms`);

  const signedOut = await page.evaluate(async () => {
    const w = globalThis as unknown as AppWindow;
    const api = w.api as ReturnType<AppWindow['ownSdk']['createClient']>;
    return (await api.logout()).response.status;
  });
  t.equal(signedOut, 204, 'signed out');

  // Sign-in with the passkey alone: no address typed (discoverable credential).
  const signedIn = await page.evaluate(async () => {
    const w = globalThis as unknown as PasskeyWindow;
    const api = w.api as ReturnType<AppWindow['ownSdk']['createClient']>;
    const started = performance.now();
    const options = await api.POST('/api/auth/passkeys/authentication/options', { body: {} });
    const response = await w.webauthn.startAuthentication({ optionsJSON: options.data?.options });
    const res = await api.POST('/api/auth/passkeys/authentication/verify', {
      params: { query: { client_type: 'web' } },
      body: { challengeId: options.data?.challengeId ?? '', response: response as never },
    });
    const ms = performance.now() - started;
    w.log(`signed in with the passkey: ${res.response.status} in ${ms.toFixed(0)} ms`);
    return {
      status: res.response.status,
      ms,
      token: res.data?.accessToken,
      allow: options.data?.options.allowCredentials,
    };
  });
  t.equal(signedIn.status, 200, 'signed in with the passkey alone');
  t.same(signedIn.allow, [], 'no address: an empty allowCredentials');
  const claims = decodeClaims(signedIn.token ?? '');
  t.equal(claims.aal, 'aal2', 'the session is aal2');
  t.equal(claims.next_aal, undefined, 'and owes no further step');
  t.same(
    (claims.amr as { method: string }[]).map((m) => m.method),
    ['passkey'],
  );
  t.comment(`sign-in, options → verified: ${signedIn.ms.toFixed(0)} ms`);

  await openPasskeyApp(page);
  const afterReload = await page.evaluate(async () => {
    const w = globalThis as unknown as AppWindow;
    const csrfToken = w.localStorage.getItem('csrfToken') ?? '';
    const api = w.ownSdk.createClient({
      baseUrl: w.SERVICE,
      clientType: 'web',
      fetch: w.recordingFetch,
      tokens: { csrfToken },
    });
    w.api = api;
    const refreshed = await api.refresh();
    const current = await api.GET('/api/auth/sessions/current');
    w.log(`after a reload: refresh ${refreshed}, ${current.data?.user.email} at ${current.data?.aal}`);
    return { refreshed, email: current.data?.user.email, aal: current.data?.aal };
  });
  t.same(afterReload, { refreshed: true, email, aal: 'aal2' }, 'after a reload, still signed in at aal2');

  const managed = await page.evaluate(async () => {
    const w = globalThis as unknown as AppWindow;
    const api = w.api as ReturnType<AppWindow['ownSdk']['createClient']>;
    const list = await api.GET('/api/auth/passkeys');
    const id = list.data?.passkeys[0]?.id ?? '';
    const renamed = await api.PATCH('/api/auth/passkeys/{passkeyId}', {
      params: { path: { passkeyId: id } },
      body: { friendlyName: 'Work laptop' },
    });
    const factors = await api.GET('/api/auth/factors');
    const removed = await api.DELETE('/api/auth/passkeys/{passkeyId}', { params: { path: { passkeyId: id } } });
    w.log(
      `listed ${list.data?.passkeys.length}, renamed to ${renamed.data?.friendlyName}, deleted: ${removed.response.status}`,
    );
    return {
      listed: list.data?.passkeys.map((p) => p.friendlyName),
      renamed: renamed.data?.friendlyName,
      factorTypes: factors.data?.factors.map((f) => f.type),
      removed: removed.response.status,
    };
  });
  t.same(managed.listed, ['This laptop'], 'listed');
  t.equal(managed.renamed, 'Work laptop', 'renamed');
  t.same(managed.factorTypes, ['passkey'], 'and among the second factors');
  t.equal(managed.removed, 204, 'deleted');

  const afterDeletion = await passkeySignIn(page);
  t.equal(afterDeletion.status, 401, 'a deleted passkey no longer signs in');
  t.equal(afterDeletion.body.error, 'PASSKEY_REFUSED', JSON.stringify(afterDeletion.body));
  // The audit log has the passkey's life: added (raising the session that registered it), the
  // sign-in it opened, removed.
  const audited = await service.database.handle.db
    .selectFrom('audit_log')
    .innerJoin('users', 'users.id', 'audit_log.user_id')
    .select(['audit_log.type', 'audit_log.outcome', 'audit_log.method'])
    .where('users.email', '=', email)
    .where('audit_log.method', '=', 'passkey')
    .orderBy('audit_log.id')
    .execute();
  t.same(
    audited.map((r) => `${r.type}:${r.outcome}`),
    ['passkey_added:success', 'mfa_verified:success', 'sign_in:success', 'passkey_removed:success'],
    'the audit log: the passkey added, the session it raised, its sign-in, its removal',
  );
  await screenshot(page, 'passkeys-flow');
});

t.test('what the service refuses, each with a genuine assertion that misses one rule', { skip }, async (t) => {
  const { service, page, cdp, authenticatorId, subdomain, elsewhere, appServer } = await setUp(t);
  const owner = await account(service, 'passkey-owner');
  t.equal((await register(page, owner.token)).status, 201, 'a passkey is registered');
  const db = service.database.handle.db;

  // User verification is the service's rule, not only the browser's.
  await cdp.send('WebAuthn.setUserVerified', { authenticatorId, isUserVerified: false });
  const withoutUv = await passkeySignIn(page, undefined, { userVerification: 'discouraged' });
  t.equal(withoutUv.status, 401, 'an assertion without user verification does not sign in');
  t.equal(withoutUv.body.error, 'PASSKEY_REFUSED');
  await cdp.send('WebAuthn.setUserVerified', { authenticatorId, isUserVerified: true });

  // One challenge, two genuine assertions: the first signs in, the second and a replay do not.
  const options = await call(page, 'POST', '/api/auth/passkeys/authentication/options', {});
  const first = await assertion(page, options.body.options);
  const second = await assertion(page, options.body.options);
  const verify = (response: unknown, challengeId = options.body.challengeId, token?: string) =>
    call(page, 'POST', '/api/auth/passkeys/authentication/verify?client_type=mobile', { challengeId, response }, token);
  t.equal((await verify(first)).status, 200, 'the first assertion for a challenge signs in');
  t.equal((await verify(second)).status, 401, 'a second assertion for the same challenge does not');
  t.equal((await verify(first)).status, 401, 'nor the first one replayed');

  // An expired challenge.
  const late = await call(page, 'POST', '/api/auth/passkeys/authentication/options', {});
  const lateAssertion = await assertion(page, late.body.options);
  await db
    .updateTable('one_time_codes')
    .set({ code_expires_at: new Date(Date.now() - 1000), token_expires_at: new Date(Date.now() - 1000) })
    .where('purpose', '=', 'passkey_authentication')
    .execute();
  t.equal((await verify(lateAssertion, late.body.challengeId)).status, 401, 'an expired challenge');

  // Another session's challenge; a session's challenge used without it, and the other way round.
  const other = await account(service, 'passkey-other');
  const bound = await call(page, 'POST', '/api/auth/passkeys/authentication/options', {}, other.token);
  const boundAssertion = await assertion(page, bound.body.options);
  const ownerPassword = await signInFromNode(service.app, owner.email, PASSWORD);
  t.equal(
    (await verify(boundAssertion, bound.body.challengeId, ownerPassword)).status,
    401,
    'a challenge of another session',
  );
  const bound2 = await call(page, 'POST', '/api/auth/passkeys/authentication/options', {}, other.token);
  t.equal(
    (await verify(await assertion(page, bound2.body.options), bound2.body.challengeId)).status,
    401,
    'a session’s challenge without the session',
  );
  // Another account's passkey, offered to the other account's session.
  const foreign = await passkeySignIn(page, other.token);
  t.equal(foreign.status, 401, 'another account’s passkey does not raise a session');

  // A counter that goes backwards (the stored one raised past the authenticator's).
  await db.updateTable('passkeys').set({ counter: 1_000_000 }).execute();
  t.equal((await passkeySignIn(page)).status, 401, 'a counter that does not move forward: a possible clone');
  const { counter } = await db.selectFrom('passkeys').select('counter').executeTakeFirstOrThrow();
  t.equal(Number(counter), 1_000_000, 'the stored counter is unchanged');
  await db.updateTable('passkeys').set({ counter: 0 }).execute();

  // An origin not in WEBAUTHN_ORIGINS: the same page on another port (the RP ID fits it).
  await openPasskeyApp(page, `${elsewhere.origin}/`);
  const otherOrigin = await passkeySignIn(page);
  t.equal(otherOrigin.status, 401, 'an assertion made on an origin the service does not list');

  // An RP ID that is not the service's: the credential copied (same key and id) to app.localhost,
  // used from http://app.localhost:<port>, a listed origin.
  await openPasskeyApp(page, `${subdomain}/`);
  const { credentials } = await cdp.send('WebAuthn.getCredentials', { authenticatorId });
  const original = credentials.find((c) => c.rpId === 'localhost');
  if (original === undefined) throw new Error('no credential for localhost in the authenticator');
  // One id per authenticator: the original steps aside while its copy signs.
  await cdp.send('WebAuthn.removeCredential', { authenticatorId, credentialId: original.credentialId });
  await cdp.send('WebAuthn.addCredential', {
    authenticatorId,
    credential: { ...original, rpId: 'app.localhost', signCount: original.signCount + 10 },
  });
  const otherRp = await passkeySignIn(page, undefined, { rpId: 'app.localhost' });
  t.equal(otherRp.status, 401, 'an assertion for another RP ID');
  await cdp.send('WebAuthn.removeCredential', { authenticatorId, credentialId: original.credentialId });
  await cdp.send('WebAuthn.addCredential', {
    authenticatorId,
    credential: { ...original, signCount: original.signCount + 20 },
  });
  await openPasskeyApp(page, `${appServer.origin}/`);
  t.equal((await passkeySignIn(page)).status, 200, 'while the genuine one still signs in');

  // Registration from a first-factor session of an account with a second factor.
  const aal1 = await signInFromNode(service.app, owner.email, PASSWORD);
  t.equal(decodeClaims(aal1).next_aal, 'aal2');
  const refused = await call(page, 'POST', '/api/auth/passkeys/registration/options', undefined, aal1);
  t.equal(refused.status, 403, 'registering from aal1 once the account has a factor');
  t.equal(refused.body.error, 'MFA_REQUIRED');
  await screenshot(page, 'passkeys-refusals');
});

t.test(
  'a password sign-in owes the second step; a passkey assertion on that session raises it',
  { skip },
  async (t) => {
    const { service, page } = await setUp(t);
    const owner = await account(service, 'passkey-mfa');
    t.equal((await register(page, owner.token)).status, 201);
    const aal1 = await signInFromNode(service.app, owner.email, PASSWORD);
    t.equal(decodeClaims(aal1).aal, 'aal1', 'a password sign-in: aal1');
    t.equal(decodeClaims(aal1).next_aal, 'aal2', 'owing the second step');
    const raised = await passkeySignIn(page, aal1);
    t.equal(raised.status, 200, 'the passkey assertion with that session’s token');
    const claims = decodeClaims(raised.body.accessToken as string);
    t.equal(claims.aal, 'aal2', 'raises it to aal2');
    t.same(
      (claims.amr as { method: string }[]).map((m) => m.method),
      ['password', 'passkey'],
    );
    const old = await call(page, 'GET', '/api/auth/sessions/current', undefined, aal1);
    t.equal(old.status, 401, 'the aal1 session has ended');
    await screenshot(page, 'passkeys-second-step');
  },
);

t.test(
  'a passkey sign-in racing an administrator\u2019s disabling opens no session',
  { skip: skip || (!usingPostgres && 'PostgreSQL only (row locks between connections)') },
  async (t) => {
    const { service, page } = await setUp(t);
    const owner = await account(service, 'passkey-disabled');
    t.equal((await register(page, owner.token)).status, 201);
    const userId = decodeClaims(owner.token).sub as string;
    const options = await call(page, 'POST', '/api/auth/passkeys/authentication/options', {});
    const response = await assertion(page, options.body.options);
    const waitingOn = await lockWaits(t, service.database.url);
    const db = service.database.handle.db;

    // The administrator's disabling (its statements), held open before its commit.
    const disabling = heldTransaction(db, async (trx) => {
      await trx.selectFrom('users').select('id').where('id', '=', userId).forUpdate().execute();
      await trx.updateTable('users').set({ disabled_at: new Date() }).where('id', '=', userId).execute();
      await revokeUserSessions(trx, userId, new Date());
    });
    await disabling.held;
    const signingIn = service.app.inject({
      method: 'POST',
      url: '/api/auth/passkeys/authentication/verify?client_type=mobile',
      payload: { challengeId: options.body.challengeId, response },
    });
    t.ok(
      await waitingOn('select % from "users" %for update', 'insert into "sessions"%'),
      'the sign-in waits for the account',
    );
    await disabling.commit();
    const answer = await signingIn;
    t.equal(answer.statusCode, 401, `the disabled account gets no session: ${answer.body}`);
    const live = await db
      .selectFrom('sessions')
      .select('id')
      .where('user_id', '=', userId)
      .where('revoked_at', 'is', null)
      .execute();
    t.same(live, [], 'and has no live session');
  },
);
