/**
 * OAuth sign-in in a real browser (Debian's Chromium, a default profile), with InsForge's SDK in
 * browser mode, unchanged: the app page calls signInWithOAuth, which sends the browser to the
 * provider (a real OpenID Provider on loopback, its own login and consent pages filled in as a
 * person would); the provider returns to the service, which redirects to the app with
 * `insforge_code`; the SDK created on that page exchanges the code with the verifier it kept, and
 * the app is signed in (refresh cookie included: a reload keeps the session).
 */
import t from 'tap';
import { freePort } from '../scripts/lib/service-process.ts';
import {
  type AppWindow,
  browserSkip,
  crossSiteEnv,
  launchBrowser,
  openApp,
  screenshot,
  seen,
  startAppServer,
  startService,
  WAIT_MS,
  watchService,
  wireLines,
} from './helpers/browser.ts';
import { SERVICE_CLIENT, startOidcProvider } from './helpers/oidc-provider.ts';

const skip = browserSkip();

t.test('signInWithOAuth in Chromium: the provider, the callback, the SDK’s own exchange', { skip }, async (t) => {
  const appServer = await startAppServer(t, 'Web app: sign in with a provider');
  const port = await freePort();
  const serviceOrigin = `http://127.0.0.1:${port}`;
  const idp = await startOidcProvider({
    clients: [{ ...SERVICE_CLIENT, redirectUris: [`${serviceOrigin}/api/auth/oauth/corp-sso/callback`] }],
  });
  t.teardown(() => idp.close());
  idp.accounts.set('ada', { email: 'ada@example.test', email_verified: true, name: 'Ada Lovelace' });
  const service = await startService(
    t,
    {
      ...crossSiteEnv([appServer.origin]),
      PUBLIC_URL: serviceOrigin,
      AUTH_REDIRECT_ALLOWLIST: `${appServer.origin}/auth/`,
      OAUTH_PROVIDERS: 'corp-sso',
      OAUTH_CORP_SSO_CLIENT_ID: SERVICE_CLIENT.clientId,
      OAUTH_CORP_SSO_CLIENT_SECRET: SERVICE_CLIENT.clientSecret,
      OAUTH_CORP_SSO_ISSUER: idp.issuer,
    },
    port,
  );
  appServer.serviceOrigin = service.origin;
  const browser = await launchBrowser(t);
  watchService(browser, service.origin);
  const { page } = browser;
  await openApp(page, `${appServer.origin}/`);

  // The app's "Sign in with Corp SSO" button: the SDK sends the browser away.
  const leaving = page.waitForURL((url) => url.href.startsWith(idp.issuer), { timeout: WAIT_MS });
  await page.evaluate(async () => {
    const w = globalThis as unknown as AppWindow;
    const client = w.insforge.createClient({ baseUrl: w.SERVICE, fetch: w.recordingFetch });
    w.log('signing in with corp-sso');
    await client.auth.signInWithOAuth({ provider: 'corp-sso', redirectTo: `${w.location.origin}/auth/callback` });
  });
  await leaving;

  // The provider's login page, then its consent page, as a person fills them in.
  await page.locator('input[name=login]').fill('ada');
  await page.locator('input[name=password]').fill('any password');
  await screenshot(page, 'oauth-provider-login');
  await page.locator('button[type=submit]').click();
  await page.waitForURL((url) => url.pathname.startsWith('/interaction/') && url.href.startsWith(idp.issuer));
  const landing = page.waitForURL((url) => url.href.startsWith(`${appServer.origin}/auth/callback`), {
    timeout: WAIT_MS,
  });
  await page.locator('button[type=submit]').click();
  await landing;
  // What the provider's own pages logged (they ask for fonts and icons off the machine) is theirs.
  browser.errors.length = 0;
  await page.waitForFunction(() => (globalThis as unknown as Partial<AppWindow>).insforge !== undefined);
  t.match(page.url(), /\/auth\/callback\?insforge_code=[A-Za-z0-9_-]{43}$/, 'back on the app with a one-time code');

  // The page's SDK, created as the app starts, finds insforge_code and exchanges it by itself.
  const signedIn = await page.evaluate(async () => {
    const w = globalThis as unknown as AppWindow;
    const client = w.insforge.createClient({ baseUrl: w.SERVICE, fetch: w.recordingFetch });
    const me = await client.auth.getCurrentUser();
    w.log(me.error ? `no session: ${me.error.message}` : `signed in as ${me.data.user?.email}`);
    return {
      email: me.data.user?.email,
      providers: me.data.user?.providers,
      error: w.plain(me.error),
      url: w.location.href,
      wire: w.wire,
    };
  });
  t.equal(signedIn.error, null);
  t.equal(signedIn.email, 'ada@example.test', 'the app is signed in');
  t.same(signedIn.providers, ['corp-sso']);
  t.equal(signedIn.url, `${appServer.origin}/auth/callback`, 'the SDK removed the code from the address bar');
  t.same(wireLines(signedIn.wire), ['POST /api/auth/oauth/exchange 200'], 'one exchange, as a web client');
  const [exchange] = await seen(browser, 'POST', '/api/auth/oauth/exchange');
  t.ok(
    exchange?.setCookie.some((line) => /^refresh_token=[^;]+;.*Partitioned/i.test(line)),
    'the exchange set the partitioned refresh cookie',
  );

  // A reload: the session comes back through the refresh cookie.
  await openApp(page, `${appServer.origin}/`);
  const after = await page.evaluate(async () => {
    const w = globalThis as unknown as AppWindow;
    const client = w.insforge.createClient({ baseUrl: w.SERVICE });
    const me = await client.auth.getCurrentUser();
    w.log(me.error ? `after reload, no session: ${me.error.message}` : `after reload, still ${me.data.user?.email}`);
    return { email: me.data.user?.email, error: w.plain(me.error) };
  });
  t.same(after, { email: 'ada@example.test', error: null }, 'a reload keeps the session (refresh cookie)');
  t.same(browser.errors, [], 'no console errors on the app’s pages');
  await screenshot(page, 'oauth-app-signed-in');
});
