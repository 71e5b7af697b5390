/**
 * Acceptance by the real client: InsForge's JavaScript SDK (`@insforge/sdk` 1.5.2, unchanged) drives
 * the service over real HTTP on loopback, and reads its codes and links from a real SMTP capture.
 * Every response is checked against openapi.yaml (buildAuthTestApp), and every result the SDK hands
 * back must have `error: null` and the shape its own types promise: it is parsed with the zod
 * schemas of `@insforge/shared-schemas`, the package those types come from.
 *
 * Server mode (`isServerMode: true`: tokens in bodies, `client_type=mobile`) runs the whole account
 * lifecycle; browser mode (cookies, CSRF) signs in, refreshes and signs out. Where the seed contract
 * and the SDK's schemas disagree, the seed wins and the check says where (seedNulls below).
 */
import type { AddressInfo } from 'node:net';
import { createClient, type InsForgeClient } from '@insforge/sdk';
import * as shapes from '@insforge/shared-schemas';
import t, { type Test } from 'tap';
import { buildAuthTestApp, newEmail, PASSWORD } from './helpers/auth.ts';
import { startFakeUpstream } from './helpers/fake-embeddings-upstream.ts';

const APP = 'https://app.example.com';
const UPSTREAM_MODEL = 'text-embedding-3-small';
const NEW_PASSWORD = 'a brand new passphrase 1';
const NEWER_PASSWORD = 'and a newer passphrase 2';
const PER_IP = '100000';

const fake = await startFakeUpstream();
t.teardown(() => fake.close());

const { app, nthMail, smtp, clock } = await buildAuthTestApp(t, {
  label: 'insforge-sdk',
  env: {
    AUTH_REDIRECT_URL: `${APP}/done`,
    COOKIE_SECURE: 'false',
    EMBEDDINGS_BASE_URL: fake.baseUrl,
    EMBEDDINGS_API_KEY: 'sk-insforge-sdk-test',
    // Everything comes from 127.0.0.1: the per-IP limits are raised, as in the other tests.
    RATE_LIMIT_VERIFY: PER_IP,
    RATE_LIMIT_SIGN_IN: PER_IP,
    RATE_LIMIT_SIGN_UP: PER_IP,
    RATE_LIMIT_SEND_VERIFICATION: PER_IP,
    RATE_LIMIT_REFRESH: PER_IP,
  },
});
await app.listen({ port: 0, host: '127.0.0.1' });
const baseUrl = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;

/** A server-mode client, as a Node back end uses the SDK. */
const serverClient = () => createClient({ baseUrl, isServerMode: true, retryCount: 0 });

/**
 * An address gets one email per 60 s and, from one requester (all of this test is 127.0.0.1), 3 a
 * day: the test clock moves past both before each email the test asks for.
 */
const nextEmailWindow = () => clock.advance(86_401);

/** How many emails each address has had, so that the next one is known by number. */
const mailsSeen = new Map<string, number>();
async function nextMail(email: string) {
  const n = (mailsSeen.get(email) ?? 0) + 1;
  mailsSeen.set(email, n);
  return nthMail(email, n);
}

/** A plain HTTP call beside the SDK, to see what the service now says about a token. */
async function raw(path: string, init: { method?: string; token?: string; body?: object } = {}) {
  const res = await fetch(`${baseUrl}${path}`, {
    method: init.method ?? 'GET',
    headers: {
      ...(init.token === undefined ? {} : { authorization: `Bearer ${init.token}` }),
      ...(init.body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) }),
  });
  const text = await res.text();
  return { status: res.status, body: text === '' ? undefined : (JSON.parse(text) as Record<string, unknown>) };
}

interface SdkResult<T> {
  data: T | null;
  error: { error?: string; message: string; statusCode?: number } | null;
}

/** Asserts the SDK call ended with `error: null` and data, and returns the data. */
function succeeded<T>(t: Test, what: string, result: SdkResult<T>): T | undefined {
  t.equal(result.error, null, `${what}: error is null`, result.error ? { got: { ...result.error } } : {});
  t.ok(result.data, `${what}: data`);
  return result.data ?? undefined;
}

/** Asserts the SDK call failed with this status and code. */
function refused(t: Test, what: string, result: SdkResult<unknown>, status: number, code: string) {
  t.equal(result.error?.statusCode, status, `${what}: ${status}`);
  t.equal(result.error?.error, code, `${what}: ${code}`);
}

/**
 * Where the seed contract and the SDK's schemas disagree, the seed wins: a Session result always
 * carries `refreshToken` and `csrfToken`, null when the client type has none (shared-schemas:
 * optional strings), and a profile always carries `name` and `avatar_url`, null when unset
 * (shared-schemas: optional strings). These nulls are taken out before the SDK's schema parses the
 * rest, and each kind met is recorded here.
 */
const seedNullsMet = new Set<string>();
function withoutSeedNulls(value: unknown, path = ''): unknown {
  if (Array.isArray(value)) return value.map((v, i) => withoutSeedNulls(v, `${path}[${i}]`));
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  const inProfile = /(^|\.)profile$/.test(path);
  for (const [key, v] of Object.entries(value)) {
    const seedNull =
      v === null &&
      (((key === 'refreshToken' || key === 'csrfToken') && !inProfile) ||
        (inProfile && (key === 'name' || key === 'avatar_url')));
    if (seedNull) {
      seedNullsMet.add(inProfile ? `profile.${key}` : key);
      continue;
    }
    out[key] = withoutSeedNulls(v, path === '' ? key : `${path}.${key}`);
  }
  return out;
}

interface ZodLike {
  safeParse(value: unknown): { success: boolean; error?: { issues: unknown[] } };
}

/** Asserts that `data` has the shape the SDK's own schema for this answer promises. */
function promised(t: Test, what: string, schema: ZodLike, data: unknown) {
  const parsed = schema.safeParse(withoutSeedNulls(data));
  t.ok(parsed.success, `${what}: the shape @insforge/shared-schemas promises`, {
    issues: parsed.error?.issues,
    data,
  });
}

const accessTokenOf = (session: unknown) => (session as { accessToken?: string } | undefined)?.accessToken;

/** The state the server-mode journey carries from step to step. */
const ada = { email: newEmail('sdk-ada'), password: PASSWORD, userId: '', accessToken: '', refreshToken: '' };
/** What the SDK sent, as it went on the wire (the main server-mode client records its requests). */
/** The binding of Ada's sign-up, sent back with her verification. */
let adaBinding = '';
const sent: { method: string; url: string; authorization: string | null; body: string | null }[] = [];
const sdk = createClient({
  baseUrl,
  isServerMode: true,
  retryCount: 0,
  fetch: async (input: Parameters<typeof fetch>[0], init?: RequestInit) => {
    const request = new Request(input, init);
    const body = request.body === null ? null : await request.clone().text();
    sent.push({ method: request.method, url: request.url, authorization: request.headers.get('authorization'), body });
    return fetch(request);
  },
});
const lastSent = () => sent[sent.length - 1];
/** A second account's client (signed in by its verification link), to read Ada's profile. */
const reader = serverClient();

t.test('server mode: the account lifecycle through @insforge/sdk', async (t) => {
  t.test('auth.signUp with redirectTo: verification required', async (t) => {
    const result = await sdk.auth.signUp({
      email: ada.email,
      password: ada.password,
      name: 'Ada',
      redirectTo: `${APP}/welcome`,
    });
    const data = succeeded(t, 'signUp', result);
    // The sign-up's binding comes back in data (the SDK returns the whole answer); passed along
    // with the verification, it proves Ada chose the password (see docs/accounts-and-sessions.md).
    adaBinding = (data as { signUpBinding?: string } | undefined)?.signUpBinding ?? '';
    t.match(adaBinding, /^[A-Za-z0-9_-]{43}$/, 'signUpBinding in the data');
    t.equal(data?.requireEmailVerification, true, 'requireEmailVerification');
    t.equal(data?.accessToken, null, 'accessToken: null (no session yet)');
    promised(t, 'signUp', shapes.createUserResponseSchema, data);
    const mail = await nextMail(ada.email);
    t.match(mail.code, /^\d{6}$/, 'the email has a code');
    t.ok(mail.text.includes(`&redirect_to=${encodeURIComponent(`${APP}/welcome`)}`), 'its link carries redirectTo');

    const other = serverClient();
    const offOrigin = await other.auth.signUp({
      email: newEmail('sdk-off'),
      password: PASSWORD,
      redirectTo: 'https://evil.example.com/',
    });
    refused(t, 'redirectTo off the allowed origin', offOrigin, 400, 'INVALID_INPUT');
    const autoConfirm = await other.auth.signUp({ email: newEmail('sdk-auto'), password: PASSWORD, autoConfirm: true });
    refused(t, 'autoConfirm: a client cannot skip verification', autoConfirm, 400, 'INVALID_INPUT');
  });

  t.test('auth.resendVerificationEmail, then auth.verifyEmail with the code', async (t) => {
    nextEmailWindow();
    const resent = succeeded(
      t,
      'resendVerificationEmail',
      await sdk.auth.resendVerificationEmail({ email: ada.email, redirectTo: `${APP}/welcome` }),
    );
    t.equal(resent?.success, true, 'success: true');
    t.type(resent?.message, 'string', 'a message');
    const mail = await nextMail(ada.email);
    // Server mode keeps no cookies: the binding goes in the request, which the SDK posts as it is.
    const request = { email: ada.email, otp: mail.code ?? '', signUpBinding: adaBinding };
    const data = succeeded(t, 'verifyEmail', await sdk.auth.verifyEmail(request));
    promised(t, 'verifyEmail', shapes.verifyEmailResponseSchema, data);
    t.equal(data?.user.email, ada.email);
    t.equal(data?.user.emailVerified, true, 'the address is verified');
    t.equal(data?.user.profile?.name, 'Ada', 'the sign-up name is the profile name');
    t.ok(data?.refreshToken, 'server mode: the refresh token comes in the body');
    ada.userId = data?.user.id ?? '';
  });

  t.test('auth.verifyEmail with the link token (sent without email, as the seed requires)', async (t) => {
    const email = newEmail('sdk-link');
    const client = reader;
    succeeded(t, 'signUp', await client.auth.signUp({ email, password: PASSWORD }));
    const mail = await nextMail(email);
    t.match(mail.token, /^[0-9a-f]{64}$/);
    // The SDK's type wants email; with a link token the seed contract refuses it (400 INVALID_INPUT).
    const withEmail = await client.auth.verifyEmail({ email, otp: mail.token ?? '' });
    refused(t, 'a link token with email', withEmail, 400, 'INVALID_INPUT');
    const data = succeeded(
      t,
      'verifyEmail (link)',
      await client.auth.verifyEmail({ otp: mail.token } as unknown as { email: string; otp: string }),
    );
    promised(t, 'verifyEmail (link)', shapes.verifyEmailResponseSchema, data);
    t.equal(data?.user.emailVerified, true);
  });

  t.test('auth.signInWithPassword (with and without method: "password")', async (t) => {
    const plain = succeeded(
      t,
      'signInWithPassword',
      await sdk.auth.signInWithPassword({ email: ada.email, password: ada.password }),
    );
    promised(t, 'signInWithPassword', shapes.createSessionResponseSchema, plain);
    const data = succeeded(
      t,
      'signInWithPassword (method)',
      await sdk.auth.signInWithPassword({ email: ada.email, password: ada.password, method: 'password' }),
    );
    promised(t, 'signInWithPassword (method)', shapes.createSessionResponseSchema, data);
    t.equal(data?.user.id, ada.userId, 'the same account');
    ada.accessToken = data?.accessToken ?? '';
    ada.refreshToken = data?.refreshToken ?? '';
  });

  t.test('auth.getCurrentUser (after client.setAccessToken, as server mode needs)', async (t) => {
    const none = await serverClient().auth.getCurrentUser();
    t.same(none, { data: { user: null }, error: null }, 'without a token: no user, and no request');
    sdk.setAccessToken(ada.accessToken);
    const data = succeeded(t, 'getCurrentUser', await sdk.auth.getCurrentUser());
    promised(t, 'getCurrentUser', shapes.getCurrentSessionResponseSchema, data);
    t.equal(data?.user?.email, ada.email);
  });

  t.test('auth.setProfile and auth.getProfile', async (t) => {
    const set = succeeded(
      t,
      'setProfile',
      await sdk.auth.setProfile({
        name: 'Ada Lovelace',
        avatar_url: 'https://cdn.example.com/ada.png',
        bio: 'Analyst',
      }),
    );
    promised(t, 'setProfile', shapes.getProfileResponseSchema, set);
    t.equal(set?.id, ada.userId);
    t.match(set?.profile, { name: 'Ada Lovelace', avatar_url: 'https://cdn.example.com/ada.png', bio: 'Analyst' });
    const merged = succeeded(t, 'setProfile (merge)', await sdk.auth.setProfile({ nickname: 'ada' }));
    t.match(merged?.profile, { name: 'Ada Lovelace', bio: 'Analyst', nickname: 'ada' }, 'merged into the profile');

    // Any signed-in user reads it.
    const read = succeeded(t, 'getProfile', await reader.auth.getProfile(ada.userId));
    promised(t, 'getProfile', shapes.getProfileResponseSchema, read);
    t.match(read?.profile, { name: 'Ada Lovelace', bio: 'Analyst', nickname: 'ada' });
    t.notOk(read && 'email' in read, 'no email address in a public profile');
    const anonymous = await serverClient().auth.getProfile(ada.userId);
    refused(t, 'getProfile without a signed-in caller', anonymous, 401, 'UNAUTHORIZED');
  });

  t.test('auth.signInWithOtp + auth.verifyOtp for an existing account', async (t) => {
    nextEmailWindow();
    const sent = succeeded(t, 'signInWithOtp', await sdk.auth.signInWithOtp({ email: ada.email }));
    t.equal(sent?.success, true, 'success: true');
    t.type(sent?.message, 'string');
    const mail = await nextMail(ada.email);
    t.match(mail.code, /^\d{6}$/, 'a code by email');
    const data = succeeded(t, 'verifyOtp', await sdk.auth.verifyOtp({ email: ada.email, otp: mail.code ?? '' }));
    promised(t, 'verifyOtp', shapes.createSessionResponseSchema, data);
    t.equal(data?.user.id, ada.userId, 'signs the existing account in');
    const again = await sdk.auth.verifyOtp({ email: ada.email, otp: mail.code ?? '' });
    t.ok(again.error, 'a code works once');
    const password = await serverClient().auth.signInWithPassword({ email: ada.email, password: ada.password });
    t.equal(password.error, null, "Ada's proven password survives her sign-in by code");
  });

  t.test('auth.signInWithOtp + auth.verifyOtp for a new address: a verified account', async (t) => {
    const email = newEmail('sdk-grace');
    const client = serverClient();
    const sent = succeeded(t, 'signInWithOtp', await client.auth.signInWithOtp({ email }));
    t.equal(sent?.success, true);
    const mail = await nextMail(email);
    const data = succeeded(t, 'verifyOtp', await client.auth.verifyOtp({ email, otp: mail.code ?? '', name: 'Grace' }));
    promised(t, 'verifyOtp (new)', shapes.createSessionResponseSchema, data);
    t.equal(data?.user.email, email);
    t.equal(data?.user.emailVerified, true, 'verified: the mailbox was proven');
    t.equal(data?.user.profile?.name, 'Grace', 'name applies to the new account');
    const noPassword = await client.auth.signInWithPassword({ email, password: PASSWORD });
    refused(t, 'no password was set', noPassword, 401, 'INVALID_CREDENTIALS');
  });

  t.test('ai.embeddings.create through the provider and the local model', async (t) => {
    fake.reset();
    const upstream = await sdk.ai.embeddings.create({ model: UPSTREAM_MODEL, input: ['hello world', 'bye'] });
    t.equal(upstream.object, 'list');
    t.equal(upstream.model, UPSTREAM_MODEL);
    t.equal(upstream.data.length, 2);
    t.same(
      upstream.data.map((d: { object: string; index: number; embedding: unknown }) => [
        d.object,
        d.index,
        Array.isArray(d.embedding) && d.embedding.length,
      ]),
      [
        ['embedding', 0, 8],
        ['embedding', 1, 8],
      ],
    );
    t.ok(upstream.usage.prompt_tokens > 0 && upstream.usage.total_tokens > 0, 'usage, as the SDK maps it');
    t.equal(fake.requests.length, 1, 'one request reached the provider');
    t.equal(fake.requests[0]?.body.model, UPSTREAM_MODEL);

    const local = await sdk.ai.embeddings.create({ model: 'local/lexical-v1', input: 'hello', dimensions: 4 });
    t.equal(local.model, 'local/lexical-v1');
    t.equal((local.data[0]?.embedding as number[] | undefined)?.length, 4);
    t.same(local.usage, { prompt_tokens: 1, total_tokens: 1 });

    // The wire answer itself, as the SDK's schema describes it.
    const wire = await raw('/api/ai/embeddings', {
      method: 'POST',
      token: ada.accessToken,
      body: { model: 'local/lexical-v1', input: ['a', 'b'], dimensions: 2 },
    });
    promised(t, 'createEmbeddings', shapes.embeddingsResponseSchema, wire.body);

    const thrown = await sdk.ai.embeddings
      .create({ model: 'local/lexical-v1', input: '' })
      .catch((err: unknown) => err);
    t.match(thrown, { name: 'InsForgeError', error: 'INVALID_INPUT', statusCode: 400 }, 'a refusal is thrown');
  });

  t.test('auth.getPublicAuthConfig', async (t) => {
    const data = succeeded(t, 'getPublicAuthConfig', await serverClient().auth.getPublicAuthConfig());
    promised(t, 'getPublicAuthConfig', shapes.getPublicAuthConfigResponseSchema, data);
    t.match(data, {
      oAuthProviders: [],
      customOAuthProviders: [],
      requireEmailVerification: true,
      passwordMinLength: 8,
      disableSignup: false,
    });
  });

  t.test('auth.refreshSession({refreshToken}) posts refresh_token and rotates it', async (t) => {
    const data = succeeded(t, 'refreshSession', await sdk.auth.refreshSession({ refreshToken: ada.refreshToken }));
    t.match(lastSent(), { method: 'POST', url: `${baseUrl}/api/auth/refresh?client_type=mobile` });
    t.same(JSON.parse(lastSent()?.body ?? 'null'), { refresh_token: ada.refreshToken }, 'the SDK sent refresh_token');
    promised(t, 'refreshSession', shapes.refreshSessionResponseSchema, data);
    t.equal(data?.user.id, ada.userId);
    t.ok(data?.refreshToken && data.refreshToken !== ada.refreshToken, 'a new refresh token');
    // (The access token may be the same string: same claims, signed within the same second.)
    ada.accessToken = data?.accessToken ?? ada.accessToken;
    ada.refreshToken = data?.refreshToken ?? ada.refreshToken;
    const me = await raw('/api/auth/sessions/current', { token: ada.accessToken });
    t.equal(me.status, 200, 'the new access token works');
  });

  t.test('auth.signOut (no body, only the Bearer token) ends the session on the server', async (t) => {
    const { error } = await sdk.auth.signOut();
    t.equal(error, null, 'signOut: error is null');
    t.match(
      lastSent(),
      {
        method: 'POST',
        url: `${baseUrl}/api/auth/logout?client_type=mobile`,
        authorization: `Bearer ${ada.accessToken}`,
        body: null,
      },
      'the SDK sent no body, only the Bearer access token',
    );
    const me = await raw('/api/auth/sessions/current', { token: ada.accessToken });
    t.equal(me.status, 401, 'the access token is refused');
    t.equal(me.body?.error, 'SESSION_REVOKED');
    const refresh = await serverClient().auth.refreshSession({ refreshToken: ada.refreshToken });
    refused(t, 'the refresh token is dead', refresh, 401, 'REFRESH_TOKEN_INVALID');
    const after = await sdk.auth.getCurrentUser();
    t.same(after, { data: { user: null }, error: null }, 'the client forgot the session');
  });

  t.test('password reset by code: send, exchange, reset', async (t) => {
    const holder = serverClient();
    const before = accessTokenOf(
      succeeded(
        t,
        'a session to end',
        await holder.auth.signInWithPassword({ email: ada.email, password: ada.password }),
      ),
    );

    nextEmailWindow();
    const sent = succeeded(t, 'sendResetPasswordEmail', await sdk.auth.sendResetPasswordEmail({ email: ada.email }));
    t.equal(sent?.success, true, 'success: true');
    t.type(sent?.message, 'string');
    const mail = await nextMail(ada.email);
    t.match(mail.code, /^\d{6}$/, 'a code');
    t.match(mail.token, /^[0-9a-f]{64}$/, 'and an independent link token');

    const exchanged = succeeded(
      t,
      'exchangeResetPasswordToken',
      await sdk.auth.exchangeResetPasswordToken({ email: ada.email, code: mail.code ?? '' }),
    );
    promised(t, 'exchangeResetPasswordToken', shapes.exchangeResetPasswordTokenResponseSchema, exchanged);
    t.ok(Date.parse(exchanged?.expiresAt ?? '') > clock.now().getTime(), 'expiresAt is ahead');

    const reset = succeeded(
      t,
      'resetPassword',
      await sdk.auth.resetPassword({ newPassword: NEW_PASSWORD, otp: exchanged?.token ?? '' }),
    );
    promised(t, 'resetPassword', shapes.resetPasswordResponseSchema, reset);
    const reused = await sdk.auth.resetPassword({ newPassword: NEWER_PASSWORD, otp: exchanged?.token ?? '' });
    t.ok(reused.error, 'the reset token works once');

    const old = await raw('/api/auth/sessions/current', { token: before ?? '' });
    t.equal(old.body?.error, 'SESSION_REVOKED', 'the reset ended the account’s sessions');
    const signedIn = succeeded(
      t,
      'sign-in with the new password',
      await sdk.auth.signInWithPassword({ email: ada.email, password: NEW_PASSWORD }),
    );
    t.equal(signedIn?.user.id, ada.userId);
    const refusedOld = await sdk.auth.signInWithPassword({ email: ada.email, password: ada.password });
    refused(t, 'the old password', refusedOld, 401, 'INVALID_CREDENTIALS');
    ada.password = NEW_PASSWORD;
  });

  t.test('password reset by the link token', async (t) => {
    nextEmailWindow();
    succeeded(t, 'sendResetPasswordEmail', await sdk.auth.sendResetPasswordEmail({ email: ada.email }));
    const mail = await nextMail(ada.email);
    t.match(mail.link, /\/auth\/reset-password\?token=[0-9a-f]{64}$/, 'a link to the reset page');
    if (mail.link !== undefined) {
      // The link opens a page; opening it spends nothing (mail scanners follow links).
      const page = await fetch(mail.link.replace(/^https?:\/\/[^/]+/, baseUrl));
      t.equal(page.status, 200, 'the link opens the reset page');
      t.match(page.headers.get('content-type') ?? '', /text\/html/);
    }
    const reset = succeeded(
      t,
      'resetPassword (link)',
      await sdk.auth.resetPassword({ newPassword: NEWER_PASSWORD, otp: mail.token ?? '' }),
    );
    promised(t, 'resetPassword (link)', shapes.resetPasswordResponseSchema, reset);
    succeeded(
      t,
      'sign-in with the newer password',
      await sdk.auth.signInWithPassword({ email: ada.email, password: NEWER_PASSWORD }),
    );
    refused(
      t,
      'the password before',
      await sdk.auth.signInWithPassword({ email: ada.email, password: NEW_PASSWORD }),
      401,
      'INVALID_CREDENTIALS',
    );
    ada.password = NEWER_PASSWORD;
  });
});

/** A fetch that keeps cookies, as a browser does for the service's refresh cookie. */
function cookieKeepingFetch() {
  const jar = new Map<string, string>();
  const fetchWithJar = async (input: Parameters<typeof fetch>[0], init?: RequestInit): Promise<Response> => {
    const request = new Request(input, init);
    const headers = new Headers(request.headers);
    if (jar.size > 0) headers.set('cookie', [...jar].map(([k, v]) => `${k}=${v}`).join('; '));
    const response = await fetch(new Request(request, { headers }));
    for (const line of response.headers.getSetCookie()) {
      const pair = line.split(';')[0] ?? '';
      const eq = pair.indexOf('=');
      const name = pair.slice(0, eq);
      const value = pair.slice(eq + 1);
      if (value === '' || /max-age=0|expires=thu, 01 jan 1970/i.test(line)) jar.delete(name);
      else jar.set(name, value);
    }
    return response;
  };
  return { fetch: fetchWithJar, jar };
}

t.test('browser mode: cookie, CSRF token, refresh and sign-out', async (t) => {
  // The SDK keeps the CSRF token in document.cookie; `window` stays undefined (no OAuth redirects).
  const globals = globalThis as { document?: { cookie: string } };
  globals.document = { cookie: '' };
  t.teardown(() => {
    delete globals.document;
  });

  t.test('with a cookie jar: refresh and sign-out by cookie and X-CSRF-Token', async (t) => {
    const { fetch: jarFetch, jar } = cookieKeepingFetch();
    const browser: InsForgeClient = createClient({ baseUrl, retryCount: 0, fetch: jarFetch });
    const events: string[] = [];
    browser.auth.onAuthStateChange((event) => events.push(event));
    const signedIn = succeeded(
      t,
      'signInWithPassword',
      await browser.auth.signInWithPassword({ email: ada.email, password: ada.password }),
    );
    promised(t, 'signInWithPassword (browser)', shapes.createSessionResponseSchema, signedIn);
    t.ok(signedIn?.csrfToken, 'a CSRF token');
    t.equal(signedIn?.refreshToken, null, 'no refresh token in the body');
    t.ok(jar.has('refresh_token'), 'the refresh cookie is kept');
    t.match(globals.document?.cookie, /insforge_csrf_token=/, 'the SDK stored the CSRF token');

    const me = succeeded(t, 'getCurrentUser', await browser.auth.getCurrentUser());
    t.equal(me?.user?.email, ada.email, 'the signed-in user');

    const cookieBefore = jar.get('refresh_token');
    const refreshed = succeeded(t, 'refreshSession', await browser.auth.refreshSession());
    promised(t, 'refreshSession (browser)', shapes.refreshSessionResponseSchema, refreshed);
    t.ok(jar.get('refresh_token') && jar.get('refresh_token') !== cookieBefore, 'the refresh cookie rotated');

    const embedded = await browser.ai.embeddings.create({ model: 'local/lexical-v1', input: 'hi', dimensions: 2 });
    t.equal(embedded.data.length, 1, 'the refreshed token is used');

    const { error } = await browser.auth.signOut();
    t.equal(error, null, 'signOut');
    t.notOk(jar.has('refresh_token'), 'the cookie is cleared');
    // (tokenRefreshed fires only when the access token string changes: not within the second it was signed.)
    t.same([events[0], events.at(-1)], ['signedIn', 'signedOut'], 'onAuthStateChange: signed in, then out');
    const after = await raw('/api/auth/sessions/current', { token: refreshed?.accessToken ?? '' });
    t.equal(after.body?.error, 'SESSION_REVOKED', 'the session ended on the server');
  });

  t.test('without a cookie jar (Node’s fetch): sign-out still ends the session, by its access token', async (t) => {
    const browser = createClient({ baseUrl, retryCount: 0 });
    const signedIn = succeeded(
      t,
      'signInWithPassword',
      await browser.auth.signInWithPassword({ email: ada.email, password: ada.password }),
    );
    const refresh = await browser.auth.refreshSession();
    refused(t, 'refresh without the cookie', refresh, 401, 'REFRESH_TOKEN_INVALID');
    const { error } = await browser.auth.signOut();
    t.equal(error, null, 'signOut');
    const after = await raw('/api/auth/sessions/current', { token: accessTokenOf(signedIn) ?? '' });
    t.equal(after.body?.error, 'SESSION_REVOKED', 'the session ended on the server');
  });
});

// The whole OAuth flows, with a real OpenID Provider: test/oauth.test.ts (Node) and test/browser-oauth.test.ts.
t.test('the OAuth methods on a service without providers: clear refusals', async (t) => {
  const client = serverClient();
  const oauth = await client.auth.signInWithOAuth('google', { redirectTo: `${APP}/done`, skipBrowserRedirect: true });
  refused(t, 'signInWithOAuth', oauth, 404, 'NOT_FOUND');
  refused(
    t,
    'exchangeOAuthCode',
    await client.auth.exchangeOAuthCode('code', 'v'.repeat(43)),
    400,
    'OAUTH_CODE_INVALID',
  );
  refused(
    t,
    'signInWithIdToken',
    await client.auth.signInWithIdToken({ provider: 'google', token: 'id-token' }),
    400,
    'INVALID_INPUT',
  );
});

t.test('what the seed changes about the SDK’s schemas', async (t) => {
  // Recorded by withoutSeedNulls: the only differences between answers and the SDK's schemas.
  t.ok(
    [...seedNullsMet].every((k) => ['refreshToken', 'csrfToken', 'profile.name', 'profile.avatar_url'].includes(k)),
    `seed nulls met: ${[...seedNullsMet].sort().join(', ') || 'none'}`,
  );
  t.ok(smtp.messages.length > 0, 'mail went through the SMTP capture');
});
