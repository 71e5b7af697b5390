/**
 * An origin that is not in CORS_ORIGINS, in a real browser (Debian's Chromium): the same app page,
 * served from a second port on localhost, cannot call the service with either SDK or with fetch,
 * and its state-changing calls never reach the service's handlers (the preflight stops them). The
 * listed origin, in the same browser, can: the refusal is the origin's, not the service's state.
 */
import t from 'tap';
import { ADMIN_PASSWORD } from './helpers/accounts.ts';
import { newEmail, PASSWORD, QUIET_MS } from './helpers/auth.ts';
import {
  type AppWindow,
  browserSkip,
  crossSiteEnv,
  launchBrowser,
  openApp,
  screenshot,
  signInFromNode,
  startAppServer,
  startService,
} from './helpers/browser.ts';

const skip = browserSkip();

t.test('an origin not in CORS_ORIGINS cannot call the service', { skip }, async (t) => {
  const listed = await startAppServer(t, 'Listed app origin');
  const unlisted = await startAppServer(t, 'Unlisted app origin (not in CORS_ORIGINS)');
  const adminEmail = newEmail('admin');
  const service = await startService(t, { ...crossSiteEnv([listed.origin]), ADMIN_EMAIL: adminEmail, ADMIN_PASSWORD });
  listed.serviceOrigin = service.origin;
  unlisted.serviceOrigin = service.origin;
  const browser = await launchBrowser(t);
  const { page } = browser;
  const emails = { insforge: newEmail('cors-insforge'), own: newEmail('cors-own'), simple: newEmail('cors-simple') };

  await openApp(page, `${unlisted.origin}/`);
  const tried = await page.evaluate(
    async ({ emails, password }) => {
      const w = globalThis as unknown as AppWindow;
      const client = w.insforge.createClient({ baseUrl: w.SERVICE });
      const signUp = await client.auth.signUp({ email: emails.insforge, password });
      w.log(`InsForge signUp: ${signUp.error?.statusCode} ${signUp.error?.error}`);
      const signIn = await client.auth.signInWithPassword({ email: emails.insforge, password });
      w.log(`InsForge signInWithPassword: ${signIn.error?.statusCode} ${signIn.error?.error}`);
      const plain = await w
        .fetch(`${w.SERVICE}/api/auth/sessions`, {
          method: 'POST',
          credentials: 'include',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ email: emails.insforge, password }),
        })
        .then(
          (res) => ({ resolved: res.status }),
          (e: unknown) => ({ rejected: w.plain(e) }),
        );
      w.log(`fetch POST /api/auth/sessions: ${JSON.stringify(plain)}`);
      const api = w.ownSdk.createClient({ baseUrl: w.SERVICE, clientType: 'web' });
      const own = await api
        .POST('/api/auth/users', {
          params: { query: { client_type: 'web' } },
          body: { email: emails.own, password },
        })
        .then(
          (res) => ({ resolved: res.response.status }),
          (e: unknown) => ({ rejected: w.plain(e) }),
        );
      w.log(`own SDK POST /api/auth/users: ${JSON.stringify(own)}`);
      // A "simple" request needs no preflight: it is sent, and only its answer is hidden from the page.
      const simple = await w
        .fetch(`${w.SERVICE}/api/auth/users`, {
          method: 'POST',
          mode: 'no-cors',
          credentials: 'include',
          headers: { 'content-type': 'text/plain' },
          body: JSON.stringify({ email: emails.simple, password }),
        })
        .then(
          (res) => ({ type: res.type, status: res.status }),
          (e: unknown) => ({ rejected: w.plain(e) }),
        );
      w.log(`no-cors text/plain POST /api/auth/users: ${JSON.stringify(simple)} (its answer is hidden from the page)`);
      return { signUp: w.plain(signUp.error), signIn: w.plain(signIn.error), plain, own, simple };
    },
    { emails, password: PASSWORD },
  );
  t.match(tried.signUp, { statusCode: 0, error: 'NETWORK_ERROR' }, 'InsForge auth.signUp: a network error');
  t.match(tried.signIn, { statusCode: 0, error: 'NETWORK_ERROR' }, 'InsForge auth.signInWithPassword: the same');
  t.match(tried.plain, { rejected: { name: 'TypeError' } }, 'fetch(…, { credentials: "include" }) rejects (TypeError)');
  t.match(tried.own, { rejected: { name: 'TypeError' } }, 'the project’s SDK: its call rejects (TypeError)');

  // The answer stays hidden: opaque, or (Cross-Origin-Resource-Policy: same-origin) a network error.
  t.ok(
    !('status' in tried.simple) || tried.simple.status === 0,
    'a no-cors text/plain POST: its answer is hidden from the page',
    { got: tried.simple },
  );

  // What reached the service from that origin: the preflights, none of them allowed, and the one
  // simple request, which the service must refuse (it is not JSON).
  const fromUnlisted = service.arrived.filter((a) => a.origin === unlisted.origin);
  t.ok(fromUnlisted.length > 0, 'the browser did ask the service (preflights)');
  const simpleArrivals = fromUnlisted.filter((a) => a.method !== 'OPTIONS');
  t.same(
    simpleArrivals.map((a) => `${a.method} ${a.url}`),
    ['POST /api/auth/users'],
    'no preflighted POST from that origin reached the service; only the simple one',
  );
  t.ok(
    simpleArrivals.every((a) => (a.status ?? 0) >= 400),
    `the service refused the simple text/plain POST: ${simpleArrivals.map((a) => a.status).join(', ')}`,
  );
  t.same(
    fromUnlisted.filter((a) => a.allowOrigin !== undefined),
    [],
    'no preflight answer allowed the origin',
    { preflights: fromUnlisted.map((a) => `${a.method} ${a.url} ${a.status}`) },
  );
  t.comment(
    `preflights from ${unlisted.origin}: ${fromUnlisted.map((a) => `${a.method} ${a.url} → ${a.status}`).join(', ')}`,
  );

  // Nothing was processed: no mail, no account.
  await new Promise((resolve) => setTimeout(resolve, QUIET_MS));
  t.same(
    Object.values(emails).flatMap((email) => service.smtp.to(email)),
    [],
    'no email was sent',
  );
  const admin = await signInFromNode(service.app, adminEmail, ADMIN_PASSWORD);
  const users = await service.app.inject({
    url: '/api/auth/users?search=cors-',
    headers: { authorization: `Bearer ${admin}` },
  });
  t.equal(users.statusCode, 200, 'the administrator lists the cors-* accounts');
  t.same(
    (users.json() as { data: { email: string }[] }).data.map((u) => u.email),
    [],
    'no account was made',
  );
  await screenshot(page, 'cors-unlisted-origin');

  // The listed origin, same browser, same call: the service answers it (401, readable by the page).
  await openApp(page, `${listed.origin}/`);
  const control = await page.evaluate(async (email) => {
    const w = globalThis as unknown as AppWindow;
    const res = await w.fetch(`${w.SERVICE}/api/auth/sessions`, {
      method: 'POST',
      credentials: 'include',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email, password: 'not the password' }),
    });
    const body = (await res.json()) as { error?: string };
    w.log(`listed origin, fetch POST /api/auth/sessions: ${res.status} ${body.error}`);
    return { status: res.status, error: body.error };
  }, emails.insforge);
  t.same(control, { status: 401, error: 'INVALID_CREDENTIALS' }, 'from the listed origin the answer is readable');
});
