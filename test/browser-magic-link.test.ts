/**
 * Verification links in a real browser (Debian's Chromium, a default profile):
 *   - a web app's own verify page (EMAIL_VERIFY_URL on the app's site, another site than the
 *     service's) spends the link's token with InsForge's SDK and keeps the session it gets;
 *   - without EMAIL_VERIFY_URL, the service's built-in page confirms the address, keeps no session,
 *     and offers the way on to AUTH_REDIRECT_URL when one is set.
 */
import t, { type Test } from 'tap';
import { newEmail, PASSWORD } from './helpers/auth.ts';
import {
  type AppWindow,
  browserSkip,
  crossSiteEnv,
  launchBrowser,
  openApp,
  reloadApp,
  screenshot,
  startAppServer,
  startService,
  WAIT_MS,
  watchService,
  wireLines,
} from './helpers/browser.ts';

const skip = browserSkip();

t.test('a magic link to the web app’s own verify page (InsForge’s SDK)', { skip }, async (t) => {
  const appServer = await startAppServer(t, 'Web app: verify by link');
  const service = await startService(t, {
    ...crossSiteEnv([appServer.origin]),
    EMAIL_VERIFY_URL: `${appServer.origin}/verify`,
    AUTH_REDIRECT_URL: appServer.origin,
  });
  appServer.serviceOrigin = service.origin;
  const browser = await launchBrowser(t);
  watchService(browser, service.origin);
  const { page } = browser;
  await openApp(page, `${appServer.origin}/`);
  const email = newEmail('browser-link');

  const signUp = await page.evaluate(
    async ({ email, password }) => {
      const w = globalThis as unknown as AppWindow;
      const client = w.insforge.createClient({ baseUrl: w.SERVICE, fetch: w.recordingFetch });
      const { data, error } = await client.auth.signUp({ email, password });
      w.log(error ? `sign-up failed: ${error.statusCode} ${error.message}` : `signed up as ${email}; check your email`);
      return { requireEmailVerification: data?.requireEmailVerification, error: w.plain(error) };
    },
    { email, password: PASSWORD },
  );
  t.same(signUp, { requireEmailVerification: true, error: null }, 'auth.signUp: verification required');

  // The sign-up email carries both a code and the link; the link opens the app's page.
  const [mail] = await service.smtp.waitFor(email, 1, WAIT_MS);
  const link = mail?.link ?? '';
  t.ok(link.startsWith(`${appServer.origin}/verify?token=`), 'the link opens the app’s verify page', { link });
  await openApp(page, link);

  // What the app's verify page does on load: the token from its URL, as the verify operation's otp.
  const verified = await page.evaluate(async () => {
    const w = globalThis as unknown as AppWindow;
    const token = new URLSearchParams(w.location.search).get('token') ?? '';
    const client = w.insforge.createClient({ baseUrl: w.SERVICE, fetch: w.recordingFetch });
    // InsForge's type wants email; a link token is sent without one.
    const { data, error } = await client.auth.verifyEmail({ otp: token } as { email: string; otp: string });
    w.log(error ? `link refused: ${error.statusCode} ${error.message}` : `verified by the link as ${data?.user.email}`);
    return { email: data?.user.email, verified: data?.user.emailVerified, error: w.plain(error) };
  });
  t.same(verified, { email, verified: true, error: null }, 'auth.verifyEmail({ otp: token }): a session');

  // The session is the app's: it survives a reload (refresh cookie) and Bearer calls work.
  await reloadApp(page);
  const session = await page.evaluate(async () => {
    const w = globalThis as unknown as AppWindow;
    const client = w.insforge.createClient({ baseUrl: w.SERVICE, fetch: w.recordingFetch });
    const me = await client.auth.getCurrentUser();
    const current = await client
      .getHttpClient()
      .get<{ user: { email: string } }>('/api/auth/sessions/current')
      .catch((e: unknown) => ({ failed: w.plain(e) }));
    w.log(
      me.error
        ? `after reload, no session: ${me.error.statusCode} ${me.error.message}`
        : `after reload, still signed in as ${me.data.user?.email}; GET /api/auth/sessions/current works`,
    );
    return { user: me.data.user?.email, error: w.plain(me.error), current, wire: w.wire };
  });
  t.same(session.error, null, 'getCurrentUser after a reload: no error');
  t.equal(session.user, email, 'the app is signed in');
  t.match(session.current, { user: { email } }, 'a Bearer call succeeds');
  t.same(
    wireLines(session.wire),
    ['POST /api/auth/refresh 200', 'GET /api/auth/sessions/current 200'],
    'through the refresh cookie, then the Bearer token',
  );
  await screenshot(page, 'magic-link-app-verify-page');
});

/** The service's own page for a fresh sign-up's link, confirmed by pressing its button. */
async function confirmOnBuiltInPage(t: Test, env: Record<string, string>, screenshotName: string) {
  const service = await startService(t, env);
  const email = newEmail('browser-page');
  const signUp = await service.app.inject({
    method: 'POST',
    url: '/api/auth/users',
    payload: { email, password: PASSWORD },
  });
  t.equal(signUp.statusCode, 202, 'signed up (from Node): verification required');
  const [mail] = await service.smtp.waitFor(email, 1, WAIT_MS);
  const link = new URL(mail?.link ?? 'http://invalid/');
  t.equal(link.pathname, '/auth/verify-email', 'the link opens the service’s page', { link: mail?.link });
  // The link names PUBLIC_URL (its default port, 7130); the test's service listens elsewhere.
  const url = `${service.origin}${link.pathname}${link.search}`;

  const browser = await launchBrowser(t);
  const { page } = browser;
  await page.goto(url);
  const requests: string[] = [];
  page.on('request', (r) => requests.push(`${r.method()} ${new URL(r.url()).pathname}`));
  await Promise.all([
    page.waitForURL(`${service.origin}/auth/verify-email`),
    page.getByRole('button', { name: 'Confirm my email' }).click(),
  ]);
  const result = page.locator('[role=status]');
  const text = (await result.textContent()) ?? '';
  t.match(text, /confirmed/i, 'the page says the address is confirmed', { text });
  const body = await page.locator('body').innerText();
  t.notMatch(body, /signed in/i, 'and does not say "signed in"', { body });
  t.same(browser.errors, [], 'no console errors (CSP included)');
  t.same(
    requests.filter((r) => r.includes('/api/')),
    [],
    'the page called no API: the form posted back to it opened no session',
  );
  const cookies = (await browser.context.cookies()).filter((c) => c.name === 'refresh_token');
  t.same(cookies, [], 'the page left no refresh cookie in the browser');
  await screenshot(page, screenshotName);

  // The address is verified: the account signs in with its password.
  const signIn = await service.app.inject({
    method: 'POST',
    url: '/api/auth/sessions?client_type=mobile',
    payload: { email, password: PASSWORD },
  });
  t.equal(signIn.statusCode, 200, 'the account signs in with its password');
  return page;
}

t.test('the service’s built-in verify page (no EMAIL_VERIFY_URL)', { skip }, async (t) => {
  t.test('with AUTH_REDIRECT_URL: confirmed, and a link on to it', async (t) => {
    const redirect = 'http://localhost:5173/welcome';
    const page = await confirmOnBuiltInPage(t, { AUTH_REDIRECT_URL: redirect }, 'verify-email-page-with-redirect');
    const next = page.locator(`a[href="${redirect}"]`);
    t.equal(await next.count(), 1, 'a link to AUTH_REDIRECT_URL');
    t.ok(await next.first().isVisible(), 'and it is shown');
  });

  t.test('without AUTH_REDIRECT_URL: confirmed, no link on', async (t) => {
    const page = await confirmOnBuiltInPage(t, {}, 'verify-email-page');
    t.equal(await page.locator('a[href]:visible').count(), 0, 'no link is offered');
  });
});
