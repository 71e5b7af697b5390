/**
 * Both SDKs in a real browser (Debian's Chromium, a default profile that blocks third-party
 * cookies), in a web app on another site (http://localhost:<port>) than the service
 * (http://127.0.0.1:<port>): sign-up, the emailed code, a session that survives a reload through the
 * `SameSite=None; Secure; Partitioned` refresh cookie, a call that needs a refresh, sign-out.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import { newEmail, PASSWORD } from './helpers/auth.ts';
import {
  type AppWindow,
  type BrowserUnderTest,
  browserSkip,
  cookieAttributes,
  crossSiteEnv,
  launchBrowser,
  openApp,
  reloadApp,
  screenshot,
  seen,
  startAppServer,
  startService,
  untilAccessTokenExpired,
  WAIT_MS,
  watchService,
  wireLines,
} from './helpers/browser.ts';

const skip = browserSkip();

/** An app page, the service that lists it in CORS_ORIGINS, and a browser on the page. */
async function crossSiteSetUp(t: Test, title: string) {
  const appServer = await startAppServer(t, title);
  const service = await startService(t, crossSiteEnv([appServer.origin]));
  appServer.serviceOrigin = service.origin;
  const browser = await launchBrowser(t);
  watchService(browser, service.origin);
  await openApp(browser.page, `${appServer.origin}/`);
  return { appServer, service, browser, page: browser.page };
}

/** The service's refresh cookies in the browser's jar (all partitions). */
const refreshCookiesKept = async (browser: BrowserUnderTest) =>
  (await browser.context.cookies()).filter((c) => c.name === 'refresh_token');

t.test('control: this browser blocks third-party cookies unless they are Partitioned', { skip }, async (t) => {
  // A bare server on the service's site setting both kinds of cookie to a page on the app's site.
  const other = createServer((req, res) => {
    const cors = {
      'access-control-allow-origin': req.headers.origin ?? '',
      'access-control-allow-credentials': 'true',
    };
    const set = ['plain=1; Path=/; SameSite=None; Secure', 'chips=1; Path=/; SameSite=None; Secure; Partitioned'];
    res.writeHead(200, req.url === '/set' ? { ...cors, 'set-cookie': set } : cors).end(req.headers.cookie ?? '');
  });
  await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    other.closeAllConnections();
    other.close();
  });
  const appServer = await startAppServer(t, 'Third-party cookie control');
  appServer.serviceOrigin = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
  const browser = await launchBrowser(t);
  await openApp(browser.page, `${appServer.origin}/`);
  const sentBack = await browser.page.evaluate(async () => {
    const w = globalThis as unknown as AppWindow;
    await w.fetch(`${w.SERVICE}/set`, { credentials: 'include' });
    return (await w.fetch(`${w.SERVICE}/get`, { credentials: 'include' })).text();
  });
  t.equal(sentBack, 'chips=1', 'only the Partitioned cookie comes back cross-site');
});

t.test("InsForge's SDK in browser mode, cross-site", { skip }, async (t) => {
  const { service, browser, page } = await crossSiteSetUp(t, "InsForge's SDK, browser mode");
  const email = newEmail('browser-insforge');

  const signUp = await page.evaluate(
    async ({ email, password }) => {
      const w = globalThis as unknown as AppWindow;
      const client = w.insforge.createClient({ baseUrl: w.SERVICE, fetch: w.recordingFetch });
      w.client = client;
      const { data, error } = await client.auth.signUp({ email, password, name: 'Browser Ada' });
      w.log(error ? `sign-up failed: ${error.statusCode} ${error.message}` : `signed up as ${email}`);
      return { requireEmailVerification: data?.requireEmailVerification, error: w.plain(error) };
    },
    { email, password: PASSWORD },
  );
  t.same(signUp, { requireEmailVerification: true, error: null }, 'auth.signUp: verification required');

  const [mail] = await service.smtp.waitFor(email, 1, WAIT_MS);
  t.match(mail?.code, /^\d{6}$/, 'the code arrived by email');
  const verified = await page.evaluate(
    async ({ email, otp }) => {
      const w = globalThis as unknown as AppWindow;
      const client = w.client as ReturnType<AppWindow['insforge']['createClient']>;
      const { data, error } = await client.auth.verifyEmail({ email, otp });
      w.log(error ? `verify failed: ${error.statusCode} ${error.message}` : `verified as ${data?.user.email}`);
      return {
        email: data?.user.email,
        hasAccessToken: typeof data?.accessToken === 'string',
        csrfInDocumentCookie: w.document.cookie.includes('insforge_csrf_token='),
        error: w.plain(error),
      };
    },
    { email, otp: mail?.code ?? '' },
  );
  t.same(
    verified,
    { email, hasAccessToken: true, csrfInDocumentCookie: true, error: null },
    'auth.verifyEmail: a session, the CSRF token kept in the app origin’s cookie',
  );

  const [verifyResponse] = await seen(browser, 'POST', '/api/auth/email/verify');
  // The line that sets the cookie (the others expire its variants under other settings).
  const refreshCookie = verifyResponse?.setCookie.find(
    (line) => line.startsWith('refresh_token=') && !line.startsWith('refresh_token=;'),
  );
  t.ok(refreshCookie, 'the verify answer sets the refresh cookie', { setCookie: verifyResponse?.setCookie });
  t.ok(
    verifyResponse?.setCookie.some((line) => /^(__Host-)?sign_up_binding=;/.test(line)),
    "the browser sent the sign-up's binding cookie with the verification (the answer clears it): the password is proven",
  );
  const attributes = cookieAttributes(refreshCookie ?? '');
  t.equal(attributes.get('samesite')?.toLowerCase(), 'none', 'SameSite=None');
  for (const flag of ['secure', 'partitioned', 'httponly']) t.ok(attributes.has(flag), `the cookie is ${flag}`);
  const kept = await refreshCookiesKept(browser);
  t.match(
    kept,
    [{ domain: '127.0.0.1', path: '/api/auth', partitionKey: 'http://localhost' }],
    'the browser kept it, partitioned under the app’s site',
  );

  // A reload forgets the SDK's in-memory session: it comes back through the cookie and the CSRF token.
  await reloadApp(page);
  const afterReload = await page.evaluate(async () => {
    const w = globalThis as unknown as AppWindow;
    const client = w.insforge.createClient({ baseUrl: w.SERVICE, fetch: w.recordingFetch });
    w.client = client;
    const { data, error } = await client.auth.getCurrentUser();
    w.log(
      error
        ? `after reload, getCurrentUser failed: ${error.statusCode} ${error.message}`
        : `after reload: ${data.user?.email}, refreshed through the cookie`,
    );
    return { email: data.user?.email, error: w.plain(error), wire: w.wire };
  });
  t.same(afterReload.error, null, 'auth.getCurrentUser after a reload: no error');
  t.equal(afterReload.email, email, 'the session came back');
  t.same(wireLines(afterReload.wire), ['POST /api/auth/refresh 200'], 'by one refresh');

  await untilAccessTokenExpired();
  const updated = await page.evaluate(async () => {
    const w = globalThis as unknown as AppWindow;
    const client = w.client as ReturnType<AppWindow['insforge']['createClient']>;
    const before = w.wire.length;
    const { data, error } = await client.auth.setProfile({ name: 'New name' });
    const current = await client
      .getHttpClient()
      .get<{ user: { profile: { name?: string | null } | null } }>('/api/auth/sessions/current')
      .catch((e: unknown) => ({ failed: w.plain(e) }));
    w.log(
      error ? `setProfile failed: ${error.statusCode} ${error.message}` : `profile name now "${data?.profile?.name}"`,
    );
    w.logWire(before);
    return { name: data?.profile?.name, error: w.plain(error), current, wire: w.wire.slice(before) };
  });
  t.same(updated.error, null, 'auth.setProfile with an expired access token: no error');
  t.equal(updated.name, 'New name', 'the profile changed');
  t.same(
    wireLines(updated.wire),
    [
      'PATCH /api/auth/profiles/current 401 AUTH_UNAUTHORIZED',
      'POST /api/auth/refresh 200',
      'PATCH /api/auth/profiles/current 200',
      'GET /api/auth/sessions/current 200',
    ],
    'through the SDK’s own refresh on 401 AUTH_UNAUTHORIZED',
  );
  t.match(updated.current, { user: { profile: { name: 'New name' } } }, 'GET /api/auth/sessions/current agrees');

  const signedOut = await page.evaluate(async () => {
    const w = globalThis as unknown as AppWindow;
    const client = w.client as ReturnType<AppWindow['insforge']['createClient']>;
    const before = w.wire.length;
    const { error } = await client.auth.signOut();
    const refresh = await client.auth.refreshSession();
    const refused = w.plain(refresh.error);
    w.log(`signed out; refresh now fails: ${refused?.statusCode} ${refused?.error}`);
    return {
      error: w.plain(error),
      refreshed: refresh.data !== null,
      refused,
      documentCookie: w.document.cookie,
      wire: w.wire.slice(before),
    };
  });
  t.same(signedOut.error, null, 'auth.signOut');
  t.equal(wireLines(signedOut.wire)[0], 'POST /api/auth/logout 204', 'the service ended the session');
  t.notOk(signedOut.refreshed, 'a refresh after sign-out gets no session');
  t.ok([401, 403].includes(signedOut.refused?.statusCode ?? 0), 'it is refused with 401 or 403', {
    got: signedOut.refused,
  });
  t.notMatch(signedOut.documentCookie, /insforge_csrf_token=/, 'the CSRF token is gone from document.cookie');
  t.same(await refreshCookiesKept(browser), [], 'the refresh cookie is gone from the browser');
  t.same(
    browser.errors.filter((e) => !/401|403|Failed to load resource/.test(e)),
    [],
    'no other page errors',
  );
  await screenshot(page, 'insforge-sdk-browser-mode');
});

t.test("the project's own SDK (clientType web), cross-site", { skip }, async (t) => {
  const { service, page } = await crossSiteSetUp(t, "The project's own SDK, clientType web");
  const email = newEmail('browser-own');

  const signUp = await page.evaluate(
    async ({ email, password }) => {
      const w = globalThis as unknown as AppWindow;
      const onTokens = (tokens: { csrfToken: string | undefined }) =>
        w.localStorage.setItem('csrfToken', tokens.csrfToken ?? '');
      const api = w.ownSdk.createClient({ baseUrl: w.SERVICE, clientType: 'web', fetch: w.recordingFetch, onTokens });
      w.api = api;
      const query = { client_type: 'web' as const };
      const res = await api.POST('/api/auth/users', { params: { query }, body: { email, password } });
      w.log(`sign-up: ${res.response.status}`);
      return res.response.status;
    },
    { email, password: PASSWORD },
  );
  t.equal(signUp, 202, 'POST /api/auth/users?client_type=web: 202, verification required');

  const [mail] = await service.smtp.waitFor(email, 1, WAIT_MS);
  const verified = await page.evaluate(
    async ({ email, otp }) => {
      const w = globalThis as unknown as AppWindow;
      const api = w.api as ReturnType<AppWindow['ownSdk']['createClient']>;
      const query = { client_type: 'web' as const };
      const res = await api.POST('/api/auth/email/verify', { params: { query }, body: { email, otp } });
      w.log(res.data ? `verified as ${res.data.user.email}` : `verify failed: ${res.response.status}`);
      return {
        status: res.response.status,
        kept: w.localStorage.getItem('csrfToken'),
        refreshToken: res.data?.refreshToken,
      };
    },
    { email, otp: mail?.code ?? '' },
  );
  t.equal(verified.status, 200, 'POST /api/auth/email/verify?client_type=web: 200');
  t.match(verified.kept, /^\S{16,}$/, 'onTokens kept the CSRF token in localStorage');
  t.equal(verified.refreshToken, null, 'no refresh token in the body (it is in the HttpOnly cookie)');

  await reloadApp(page);
  const refreshed = await page.evaluate(async () => {
    const w = globalThis as unknown as AppWindow;
    const csrfToken = w.localStorage.getItem('csrfToken') ?? '';
    const onTokens = (tokens: { csrfToken: string | undefined }) =>
      w.localStorage.setItem('csrfToken', tokens.csrfToken ?? '');
    const api = w.ownSdk.createClient({
      baseUrl: w.SERVICE,
      clientType: 'web',
      fetch: w.recordingFetch,
      onTokens,
      tokens: { csrfToken },
    });
    w.api = api;
    const ok = await api.refresh();
    w.log(`after reload: refresh() → ${ok}`);
    return ok;
  });
  t.equal(refreshed, true, 'after a reload, api.refresh() with the kept CSRF token: true');

  await untilAccessTokenExpired();
  const updated = await page.evaluate(async () => {
    const w = globalThis as unknown as AppWindow;
    const api = w.api as ReturnType<AppWindow['ownSdk']['createClient']>;
    const before = w.wire.length;
    const res = await api.PATCH('/api/auth/profiles/current', { body: { profile: { name: 'New name' } } });
    w.log(`PATCH /api/auth/profiles/current: ${res.response.status}, name "${res.data?.profile.name}"`);
    w.logWire(before);
    return { status: res.response.status, name: res.data?.profile.name, wire: w.wire.slice(before) };
  });
  t.equal(updated.status, 200, 'PATCH /api/auth/profiles/current with an expired access token: 200');
  t.equal(updated.name, 'New name');
  t.same(
    wireLines(updated.wire),
    [
      'PATCH /api/auth/profiles/current 401 AUTH_UNAUTHORIZED',
      'POST /api/auth/refresh 200',
      'PATCH /api/auth/profiles/current 200',
    ],
    'through the client’s automatic refresh',
  );

  const ended = await page.evaluate(async () => {
    const w = globalThis as unknown as AppWindow;
    const api = w.api as ReturnType<AppWindow['ownSdk']['createClient']>;
    const out = await api.logout();
    const again = await api.refresh();
    w.log(`logout: ${out.response.status}; refresh() now → ${again}`);
    return { logout: out.response.status, refresh: again };
  });
  t.same(ended, { logout: 204, refresh: false }, 'logout 204, then refresh() is false');
  await screenshot(page, 'own-sdk-web-client');
});
