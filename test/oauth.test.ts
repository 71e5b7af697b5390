/**
 * Sign-in with OAuth 2 / OpenID Connect against a real OpenID Provider (oidc-provider, on loopback),
 * driven by InsForge's SDK in server mode: signInWithOAuth gives the provider's URL and the PKCE
 * verifier, a scripted browser signs in at the provider and lands on the app's redirect URI with
 * `insforge_code`, and exchangeOAuthCode opens the session. The same provider serves under a
 * built-in name (`google`, its issuer pointed here) and a custom one (`testidp`); GitHub is a
 * loopback fake of its three endpoints. Then every refusal: a wrong verifier, a reused or expired
 * code, a redirect URI off the allow-list, a forged or replayed callback, ID tokens for another
 * audience, expired, with the wrong nonce or a forged signature, and the linking rule's refusals.
 */
import { createHash } from 'node:crypto';
import { createClient } from '@insforge/sdk';
import t from 'tap';
import { freePort } from '../scripts/lib/service-process.ts';
import { createClient as createTypedClient } from '../src/client/index.ts';
import { buildAppCapturingLogs } from './helpers/app.ts';
import { buildAuthTestApp, decodeClaims, PASSWORD } from './helpers/auth.ts';
import { startGithubFake } from './helpers/github-fake.ts';
import { followAuthorization } from './helpers/oauth-browser.ts';
import { OTHER_CLIENT, SERVICE_CLIENT, startOidcProvider } from './helpers/oidc-provider.ts';

const APP = 'https://app.example.com';
const REDIRECT = `${APP}/auth/callback`;
const port = await freePort();
const base = `http://127.0.0.1:${port}`;
const callbackOf = (name: string) => `${base}/api/auth/oauth/${name}/callback`;

const idp = await startOidcProvider({
  clients: [{ ...SERVICE_CLIENT, redirectUris: [callbackOf('testidp'), callbackOf('google')] }],
});
t.teardown(() => idp.close());
const github = await startGithubFake();
t.teardown(() => github.close());

const { app, clock, signUp, verify, nthMail } = await buildAuthTestApp(t, {
  label: 'oauth',
  env: {
    PUBLIC_URL: base,
    COOKIE_SECURE: 'false',
    AUTH_REDIRECT_ALLOWLIST: `${APP}/auth/, com.example.app:/oauth`,
    OAUTH_PROVIDERS: 'google,testidp,github',
    OAUTH_GOOGLE_CLIENT_ID: SERVICE_CLIENT.clientId,
    OAUTH_GOOGLE_CLIENT_SECRET: SERVICE_CLIENT.clientSecret,
    OAUTH_GOOGLE_ISSUER: idp.issuer,
    OAUTH_TESTIDP_CLIENT_ID: SERVICE_CLIENT.clientId,
    OAUTH_TESTIDP_CLIENT_SECRET: SERVICE_CLIENT.clientSecret,
    OAUTH_TESTIDP_ISSUER: idp.issuer,
    OAUTH_GITHUB_CLIENT_ID: github.clientId,
    OAUTH_GITHUB_CLIENT_SECRET: github.clientSecret,
    OAUTH_GITHUB_BASE_URL: github.url,
    OAUTH_GITHUB_API_URL: github.url,
  },
});
await app.listen({ port, host: '127.0.0.1' });

const sdk = () => createClient({ baseUrl: base, isServerMode: true, retryCount: 0 });

/** signInWithOAuth, then the provider's pages as a browser: the URL the browser lands on, and what it took. */
async function signInAtProvider(
  provider: string,
  login: string,
  options: { deny?: boolean; redirectTo?: string } = {},
) {
  const client = sdk();
  const started = await client.auth.signInWithOAuth({
    provider,
    redirectTo: options.redirectTo ?? REDIRECT,
    skipBrowserRedirect: true,
  });
  if (started.error !== null || started.data.url === undefined) {
    throw new Error(`signInWithOAuth failed: ${JSON.stringify(started.error)}`);
  }
  const landed = await followAuthorization(started.data.url, {
    login,
    stopAt: (url) => url.origin === new URL(options.redirectTo ?? REDIRECT).origin,
    ...(options.deny ? { deny: true } : {}),
  });
  return { client, verifier: String(started.data.codeVerifier), ...landed };
}

/** A whole sign-in: the SDK's session result. */
async function signInWith(provider: string, login: string) {
  const { client, verifier, finalUrl } = await signInAtProvider(provider, login);
  const code = finalUrl.searchParams.get('insforge_code');
  if (code === null) throw new Error(`no insforge_code: ${finalUrl.href}`);
  const exchanged = await client.auth.exchangeOAuthCode(code, verifier);
  if (exchanged.error !== null || exchanged.data === null) {
    throw new Error(`exchangeOAuthCode failed: ${JSON.stringify(exchanged.error)}`);
  }
  return exchanged.data;
}

const exchange = (payload: Record<string, unknown>) =>
  app.inject({ method: 'POST', url: '/api/auth/oauth/exchange?client_type=mobile', payload });
const idTokenSignIn = (payload: Record<string, unknown>) =>
  app.inject({ method: 'POST', url: '/api/auth/id-token?client_type=mobile', payload });

t.test('the public configuration lists the providers by route', async (t) => {
  const res = await app.inject({ method: 'GET', url: '/api/auth/public-config' });
  t.same(res.json().oAuthProviders, ['google', 'github']);
  t.same(res.json().customOAuthProviders, ['testidp']);
});

t.test('InsForge SDK, custom provider: signInWithOAuth, the provider, exchangeOAuthCode', async (t) => {
  const started = performance.now();
  const { client, verifier, finalUrl, requests, steps } = await signInAtProvider('testidp', 'alice');
  t.equal(finalUrl.origin + finalUrl.pathname, REDIRECT, 'the browser lands on the redirect URI');
  const code = finalUrl.searchParams.get('insforge_code');
  t.match(code, /^[A-Za-z0-9_-]{43}$/, 'with a one-time code');
  t.same([...finalUrl.searchParams.keys()], ['insforge_code'], 'and nothing else: no provider token');
  const { data, error } = await client.auth.exchangeOAuthCode(String(code), verifier);
  const ms = performance.now() - started;
  t.equal(error, null);
  t.equal(data?.user.email, 'alice@example.test');
  t.equal(data?.user.emailVerified, true);
  t.same(data?.user.providers, ['testidp']);
  t.match(data?.refreshToken, /\S{20,}/, 'server mode: the refresh token in the body');
  t.equal(decodeClaims(String(data?.accessToken)).sub, data?.user.id);
  // The browser's requests, plus the SDK's two (the authorization URL and the exchange).
  t.comment(`one complete sign-in: ${requests + 2} HTTP requests (${requests} by the browser) in ${Math.round(ms)} ms`);
  t.comment(steps.join('\n'));
  client.setAccessToken(String(data?.accessToken)); // server mode keeps no session by itself
  const current = await client.auth.getCurrentUser();
  t.equal(current.data?.user?.email, 'alice@example.test', 'the session works with the SDK');

  const again = await signInWith('testidp', 'alice');
  t.equal(again.user.id, data?.user.id, 'the same identity signs in to the same account');
});

t.test('InsForge SDK, built-in name: google (its issuer pointed at the test provider)', async (t) => {
  const session = await signInWith('google', 'gina');
  t.equal(session.user.email, 'gina@example.test');
  t.same(session.user.providers, ['google']);
  const byOther = await signInWith('testidp', 'gina');
  t.equal(byOther.user.id, session.user.id, 'a second provider with the same verified address links to the account');
  t.same(byOther.user.providers, ['google', 'testidp']);
});

t.test('GitHub: OAuth 2 and its user API (a loopback fake)', async (t) => {
  github.user = {
    id: 4242,
    login: 'octo',
    name: 'Octo Cat',
    emails: [
      { email: 'octo-other@example.test', primary: false, verified: true },
      { email: 'Octo@Example.test', primary: true, verified: true },
    ],
  };
  const session = await signInWith('github', 'octo');
  t.equal(session.user.email, 'octo@example.test', "GitHub's verified primary address, in lower case");
  t.same(session.user.providers, ['github']);
  t.equal(session.user.profile?.name, 'Octo Cat');
  t.ok(github.tokens.length > 0, 'GitHub issued an access token to the service');
  for (const token of github.tokens) {
    t.notOk(JSON.stringify(session).includes(token), "GitHub's access token is not in the app's session result");
  }

  github.user = {
    id: 4343,
    login: 'unverified',
    name: null,
    emails: [{ email: 'u@example.test', primary: true, verified: false }],
  };
  const refused = await signInAtProvider('github', 'unverified');
  t.equal(
    refused.finalUrl.searchParams.get('error'),
    'OAUTH_EMAIL_UNVERIFIED',
    'an unverified primary address is refused',
  );
});

t.test('linking: a verified account is linked, an unverified one is not', async (t) => {
  // Bob signed up with a password and verified his address: the provider's verified address links.
  const bob = 'bob@example.test';
  t.equal((await signUp(bob)).statusCode, 202);
  const verified = await verify({ email: bob, otp: (await nthMail(bob, 1)).code });
  t.equal(verified.statusCode, 200);
  const bobId = verified.json().user.id;
  const linked = await signInWith('testidp', 'bob');
  t.equal(linked.user.id, bobId, 'the provider identity signs in to the existing account');
  t.same(linked.user.providers, ['email', 'testidp']);

  // Carol's address was signed up for but never verified: whoever did that may not be Carol.
  const carol = 'carol@example.test';
  t.equal((await signUp(carol)).statusCode, 202);
  const refused = await signInAtProvider('testidp', 'carol');
  t.equal(refused.finalUrl.searchParams.get('error'), 'OAUTH_ACCOUNT_UNVERIFIED');
  t.equal(refused.finalUrl.searchParams.get('insforge_code'), null);

  // The provider does not vouch for the address: no account is made or linked.
  idp.accounts.set('dave', { email: 'dave@example.test', email_verified: false });
  const unverified = await signInAtProvider('testidp', 'dave');
  t.equal(unverified.finalUrl.searchParams.get('error'), 'OAUTH_EMAIL_UNVERIFIED');
});

t.test('a squatted address: the owner follows the refusal’s advice, and the squatter’s password is gone', async (t) => {
  // Someone signs up the owner's address with a password of their own and never verifies it.
  const victim = 'victim@example.test';
  t.equal((await signUp(victim)).statusCode, 202);
  const first = await signInAtProvider('testidp', 'victim');
  t.equal(first.finalUrl.searchParams.get('error'), 'OAUTH_ACCOUNT_UNVERIFIED');

  // The owner signs in with an emailed code, as the refusal says, then with the provider again.
  clock.advance(61); // past the sign-up email's cooldown
  const sent = await app.inject({ method: 'POST', url: '/api/auth/email/send-otp', payload: { email: victim } });
  t.equal(sent.statusCode, 202);
  const code = (await nthMail(victim, 2)).code;
  const byCode = await app.inject({
    method: 'POST',
    url: '/api/auth/sessions?client_type=mobile',
    payload: { method: 'otp', email: victim, otp: code },
  });
  t.equal(byCode.statusCode, 200, 'the code signs the owner in');
  const linked = await signInWith('testidp', 'victim');
  t.equal(linked.user.id, byCode.json().user.id, 'then the provider identity is linked');

  const squatter = await app.inject({
    method: 'POST',
    url: '/api/auth/sessions?client_type=mobile',
    payload: { email: victim, password: PASSWORD },
  });
  t.equal(squatter.statusCode, 401, 'the password the squatter chose opens nothing');
});

t.test('the person refuses at the provider: ?error=ACCESS_DENIED', async (t) => {
  const { finalUrl } = await signInAtProvider('testidp', 'erin', { deny: true });
  t.equal(finalUrl.searchParams.get('error'), 'ACCESS_DENIED');
  t.equal(finalUrl.searchParams.get('insforge_code'), null);
});

t.test('the one-time code: bound to the verifier, single use, 60 seconds', async (t) => {
  const wrong = await signInAtProvider('testidp', 'frank');
  const code = String(wrong.finalUrl.searchParams.get('insforge_code'));
  const otherVerifier = 'x'.repeat(43);
  const refused = await exchange({ code, code_verifier: otherVerifier });
  t.equal(refused.statusCode, 400);
  t.equal(refused.json().error, 'OAUTH_CODE_INVALID', 'a wrong verifier is refused');
  const after = await exchange({ code, code_verifier: wrong.verifier });
  t.equal(after.json().error, 'OAUTH_CODE_INVALID', 'and it used the code up');

  const once = await signInAtProvider('testidp', 'frank');
  const onceCode = String(once.finalUrl.searchParams.get('insforge_code'));
  t.equal((await exchange({ code: onceCode, code_verifier: once.verifier })).statusCode, 200);
  const reused = await exchange({ code: onceCode, code_verifier: once.verifier });
  t.equal(reused.json().error, 'OAUTH_CODE_INVALID', 'a used code is refused');

  const late = await signInAtProvider('testidp', 'frank');
  clock.advance(61);
  const expired = await exchange({
    code: String(late.finalUrl.searchParams.get('insforge_code')),
    code_verifier: late.verifier,
  });
  t.equal(expired.json().error, 'OAUTH_CODE_INVALID', 'a code older than 60 s is refused');
  t.equal((await exchange({ code: 'nope', code_verifier: late.verifier })).json().error, 'OAUTH_CODE_INVALID');
});

t.test('redirect_uri must match the allow-list', async (t) => {
  const challenge = 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM';
  for (const uri of [
    'https://evil.example.com/auth/callback',
    `${APP}/elsewhere`,
    `${APP}.evil.test/auth/`,
    'javascript:alert(1)',
  ]) {
    const res = await app.inject({
      method: 'GET',
      url: `/api/auth/oauth/custom/testidp?redirect_uri=${encodeURIComponent(uri)}&code_challenge=${challenge}`,
    });
    t.equal(res.statusCode, 400, uri);
    t.equal(res.json().error, 'INVALID_INPUT');
  }
  for (const uri of [
    `${APP}/auth/callback#top`,
    `${APP}/auth/..%2fevil`,
    `${APP}/auth/%2e%2e/evil`,
    `${APP}/auth/..%5Cevil`,
  ]) {
    const res = await app.inject({
      method: 'GET',
      url: `/api/auth/oauth/custom/testidp?redirect_uri=${encodeURIComponent(uri)}&code_challenge=${challenge}`,
    });
    t.equal(res.statusCode, 400, `refused: ${uri}`);
  }
  const native = await app.inject({
    method: 'GET',
    url: `/api/auth/oauth/custom/testidp?redirect_uri=${encodeURIComponent('com.example.app:/oauth/done')}&code_challenge=${challenge}`,
  });
  t.equal(native.statusCode, 200, "a native app's scheme on the list is accepted");
  const wrongRoute = await app.inject({
    method: 'GET',
    url: `/api/auth/oauth/google?redirect_uri=${encodeURIComponent(REDIRECT)}&code_challenge=${challenge}`,
  });
  t.equal(wrongRoute.statusCode, 200);
  for (const url of [
    `/api/auth/oauth/testidp?redirect_uri=${encodeURIComponent(REDIRECT)}&code_challenge=${challenge}`,
    `/api/auth/oauth/custom/google?redirect_uri=${encodeURIComponent(REDIRECT)}&code_challenge=${challenge}`,
    `/api/auth/oauth/discord?redirect_uri=${encodeURIComponent(REDIRECT)}&code_challenge=${challenge}`,
  ]) {
    const res = await app.inject({ method: 'GET', url });
    t.equal(res.statusCode, url.includes('/testidp?') ? 400 : 404, `${url.split('?')[0]}: not this route`);
  }
});

t.test('values planted in the redirect URI do not survive the callback', async (t) => {
  const planted = `${REDIRECT}?insforge_code=planted&error=planted&keep=1`;
  const { finalUrl } = await signInAtProvider('testidp', 'kim', { redirectTo: planted });
  t.same([...finalUrl.searchParams.keys()].sort(), ['insforge_code', 'keep'], 'the app’s own parameter stays');
  t.not(finalUrl.searchParams.get('insforge_code'), 'planted');
  const denied = await signInAtProvider('testidp', 'kim', { redirectTo: planted, deny: true });
  t.same([...denied.finalUrl.searchParams.keys()].sort(), ['error', 'keep']);
  t.equal(denied.finalUrl.searchParams.get('error'), 'ACCESS_DENIED');
});

t.test(
  'odd identities: unusable addresses are no addresses, odd names are tidied, the browser always goes back',
  async (t) => {
    idp.accounts.set('kelvin', { email: '\u212Aate@example.test', email_verified: true });
    const kelvin = await signInAtProvider('testidp', 'kelvin');
    t.equal(
      kelvin.finalUrl.searchParams.get('error'),
      'OAUTH_EMAIL_UNVERIFIED',
      'a non-ASCII address is not lower-cased into an ASCII one',
    );
    idp.accounts.set('notmail', { email: 'not an address', email_verified: true });
    // Microsoft's way of vouching, the optional claim xms_edov instead of email_verified, from another issuer.
    const [, body] = (await idp.issueIdToken({ clientId: SERVICE_CLIENT.clientId, login: 'mslike' })).split('.');
    const msClaims = JSON.parse(Buffer.from(String(body), 'base64url').toString());
    const { email_verified: _dropped, ...withoutVerified } = msClaims;
    const msToken = await idp.signIdToken({ ...withoutVerified, email: 'ms@example.test', xms_edov: true });
    t.equal(
      (await idTokenSignIn({ provider: 'testidp', token: msToken })).json().error,
      'OAUTH_EMAIL_UNVERIFIED',
      'xms_edov vouches only from Microsoft (test/oauth-claims-and-names.test.ts), and testidp is not Microsoft',
    );
    const unvouched = await idp.signIdToken({ ...withoutVerified, sub: 'ms-2', email: 'ms2@example.test' });
    t.equal(
      (await idTokenSignIn({ provider: 'testidp', token: unvouched })).json().error,
      'OAUTH_EMAIL_UNVERIFIED',
      'nothing vouches',
    );
    t.equal(
      (await signInAtProvider('testidp', 'notmail')).finalUrl.searchParams.get('error'),
      'OAUTH_EMAIL_UNVERIFIED',
    );
    idp.accounts.set('emoji', {
      email: 'emoji@example.test',
      email_verified: true,
      name: `${'a'.repeat(99)}😀 and\u0000 more`,
    });
    const emoji = await signInWith('testidp', 'emoji');
    t.equal(emoji.user.profile?.name, `${'a'.repeat(99)}😀`, 'a name is cut at 100 characters, never inside one');
  },
);

t.test('the callback: a forged state and a replayed callback are refused', async (t) => {
  const forged = await app.inject({ method: 'GET', url: '/api/auth/oauth/testidp/callback?code=abc&state=forged' });
  t.equal(forged.statusCode, 400);
  t.equal(forged.json().error, 'OAUTH_STATE_INVALID');
  t.equal(forged.headers.location, undefined, 'no redirect');

  // The browser is stopped at the service's callback, which is then requested twice.
  const client = sdk();
  const started = await client.auth.signInWithOAuth({
    provider: 'testidp',
    redirectTo: REDIRECT,
    skipBrowserRedirect: true,
  });
  const atCallback = await followAuthorization(String(started.data.url), {
    login: 'grace',
    stopAt: callbackOf('testidp'),
  });
  const path = atCallback.finalUrl.pathname + atCallback.finalUrl.search;
  const first = await app.inject({ method: 'GET', url: path });
  t.equal(first.statusCode, 302);
  t.match(first.headers.location, /^https:\/\/app\.example\.com\/auth\/callback\?insforge_code=/);
  const replayed = await app.inject({ method: 'GET', url: path });
  t.equal(replayed.statusCode, 400);
  t.equal(replayed.json().error, 'OAUTH_STATE_INVALID', 'the state works once');

  // A state issued for one provider does not finish at another.
  const other = await client.auth.signInWithOAuth({
    provider: 'testidp',
    redirectTo: REDIRECT,
    skipBrowserRedirect: true,
  });
  const atOther = await followAuthorization(String(other.data.url), { login: 'grace', stopAt: callbackOf('testidp') });
  const crossed = await app.inject({ method: 'GET', url: `/api/auth/oauth/google/callback${atOther.finalUrl.search}` });
  t.equal(crossed.json().error, 'OAUTH_STATE_INVALID');

  // A state that waited more than 10 minutes is void.
  const slow = await client.auth.signInWithOAuth({
    provider: 'testidp',
    redirectTo: REDIRECT,
    skipBrowserRedirect: true,
  });
  const atSlow = await followAuthorization(String(slow.data.url), { login: 'grace', stopAt: callbackOf('testidp') });
  clock.advance(601);
  const expired = await app.inject({ method: 'GET', url: atSlow.finalUrl.pathname + atSlow.finalUrl.search });
  t.equal(expired.json().error, 'OAUTH_STATE_INVALID');
});

t.test("the project's typed client: the authorization URL, the exchange, and the session it keeps", async (t) => {
  const api = createTypedClient({ baseUrl: base, clientType: 'mobile' });
  const verifier = 'typed-client-verifier-0123456789-abcdefghijklmnop';
  const challenge = createHash('sha256').update(verifier).digest('base64url');
  const started = await api.GET('/api/auth/oauth/custom/{provider}', {
    params: { path: { provider: 'testidp' }, query: { redirect_uri: REDIRECT, code_challenge: challenge } },
  });
  t.equal(started.response.status, 200);
  const { finalUrl } = await followAuthorization(String(started.data?.authUrl), { login: 'judy', stopAt: REDIRECT });
  const exchanged = await api.POST('/api/auth/oauth/exchange', {
    params: { query: { client_type: 'mobile' } },
    body: { code: String(finalUrl.searchParams.get('insforge_code')), code_verifier: verifier },
  });
  t.equal(exchanged.data?.user.email, 'judy@example.test');
  t.equal(api.tokens().accessToken, exchanged.data?.accessToken, 'the client keeps the session');
  t.equal(api.tokens().refreshToken, exchanged.data?.refreshToken ?? undefined);
  const current = await api.GET('/api/auth/sessions/current');
  t.equal(current.data?.user.email, 'judy@example.test', 'and uses it');
});

t.test('web clients: the exchange sets the refresh cookie', async (t) => {
  const { verifier, finalUrl } = await signInAtProvider('testidp', 'ivan');
  const res = await app.inject({
    method: 'POST',
    url: '/api/auth/oauth/exchange',
    payload: { code: finalUrl.searchParams.get('insforge_code'), code_verifier: verifier },
  });
  t.equal(res.statusCode, 200);
  t.equal(res.json().refreshToken, null);
  t.match(res.json().csrfToken, /^[0-9a-f]{64}$/);
  t.match(String(res.headers['set-cookie']), /refresh_token=[^;]+; .*HttpOnly/);
});

t.test('signInWithIdToken: tokens of the provider for this service, and nothing else', async (t) => {
  const token = await idp.issueIdToken({ clientId: SERVICE_CLIENT.clientId, login: 'heidi' });
  // The SDK's type names only 'google'; it sends any name as it is.
  const { data, error } = await sdk().auth.signInWithIdToken({ provider: 'testidp' as 'google', token });
  t.equal(error, null);
  t.equal(data?.user.email, 'heidi@example.test');
  t.same(data?.user.providers, ['testidp']);

  const withNonce = await idp.issueIdToken({ clientId: SERVICE_CLIENT.clientId, login: 'heidi', nonce: 'n-123' });
  t.equal((await idTokenSignIn({ provider: 'testidp', token: withNonce, nonce: 'n-123' })).statusCode, 200);
  const wrongNonce = await idTokenSignIn({ provider: 'testidp', token: withNonce, nonce: 'n-456' });
  t.equal(wrongNonce.json().error, 'ID_TOKEN_INVALID', 'the nonce must match when one is sent');

  const otherAudience = await idp.issueIdToken({ clientId: OTHER_CLIENT.clientId, login: 'heidi' });
  const refused = await idTokenSignIn({ provider: 'testidp', token: otherAudience });
  t.equal(refused.statusCode, 401);
  t.equal(refused.json().error, 'ID_TOKEN_INVALID', 'a token for another audience is refused');

  const [head, payload] = token.split('.');
  const claims = JSON.parse(Buffer.from(String(payload), 'base64url').toString());
  const tampered = `${head}.${Buffer.from(JSON.stringify({ ...claims, email: 'admin@example.test' })).toString('base64url')}.${token.split('.')[2]}`;
  t.equal(
    (await idTokenSignIn({ provider: 'testidp', token: tampered })).json().error,
    'ID_TOKEN_INVALID',
    'a changed token',
  );
  const unsigned = `${Buffer.from('{"alg":"none"}').toString('base64url')}.${payload}.`;
  t.equal(
    (await idTokenSignIn({ provider: 'testidp', token: unsigned })).json().error,
    'INVALID_INPUT',
    'alg none without a signature: not a signed JWT, by the schema',
  );
  t.equal(
    (await idTokenSignIn({ provider: 'testidp', token: `${unsigned}c2ln` })).json().error,
    'ID_TOKEN_INVALID',
    'alg none with a signature part',
  );
  const wrongIssuer = await idp.signIdToken({ ...claims, iss: 'https://elsewhere.example.com' });
  t.equal(
    (await idTokenSignIn({ provider: 'testidp', token: wrongIssuer })).json().error,
    'ID_TOKEN_INVALID',
    'another issuer',
  );
  const shared = await idp.signIdToken({ ...claims, aud: [SERVICE_CLIENT.clientId, 'other-app'], azp: 'other-app' });
  t.equal(
    (await idTokenSignIn({ provider: 'testidp', token: shared })).json().error,
    'ID_TOKEN_INVALID',
    'several audiences, issued to another party (azp)',
  );
  const sharedOurs = await idp.signIdToken({
    ...claims,
    aud: [SERVICE_CLIENT.clientId, 'other-app'],
    azp: SERVICE_CLIENT.clientId,
  });
  t.equal(
    (await idTokenSignIn({ provider: 'testidp', token: sharedOurs })).statusCode,
    200,
    'several audiences, issued to us',
  );
  const now = Math.floor(clock.now().getTime() / 1000);
  const fromTheFuture = await idp.signIdToken({ ...claims, iat: now + 365 * 86400, exp: now + 730 * 86400 });
  t.equal(
    (await idTokenSignIn({ provider: 'testidp', token: fromTheFuture })).json().error,
    'ID_TOKEN_INVALID',
    'issued in the future',
  );
  const ancient = await idp.signIdToken({ ...claims, iat: now - 2 * 86400, exp: now + 3600 });
  t.equal(
    (await idTokenSignIn({ provider: 'testidp', token: ancient })).json().error,
    'ID_TOKEN_INVALID',
    'issued days ago',
  );
  const github = await idTokenSignIn({ provider: 'github', token });
  t.equal(github.json().error, 'INVALID_INPUT', 'GitHub has no ID tokens');
  t.equal((await idTokenSignIn({ provider: 'nobody', token })).json().error, 'INVALID_INPUT');

  clock.advance(3600 + 60);
  const expired = await idTokenSignIn({ provider: 'testidp', token });
  t.equal(expired.json().error, 'ID_TOKEN_INVALID', 'an expired token is refused');
});

t.test("the log never holds a provider's code or state, nor the one-time code", async (t) => {
  const logged = await buildAppCapturingLogs(t, 'info');
  await logged.app.inject({
    method: 'GET',
    url: '/api/auth/oauth/testidp/callback?code=PROVIDER-CODE-1&state=STATE-VALUE-2&iss=x',
  });
  await logged.app.inject({ method: 'GET', url: `${REDIRECT.replace(APP, '')}?insforge_code=ONE-TIME-3` });
  const log = logged.lines.join('');
  t.match(log, /oauth\/testidp\/callback\?code=\[redacted\]&state=\[redacted\]/, 'the request is logged');
  for (const secret of ['PROVIDER-CODE-1', 'STATE-VALUE-2', 'ONE-TIME-3']) t.notOk(log.includes(secret), secret);
});
