/**
 * /docs in a real browser (Debian's Chromium): Swagger UI renders under the service's CSP without a
 * single violation, and "Authorize" + "Try it out" + "Execute" call the service and show its 200.
 */
import t from 'tap';
import { ADMIN_PASSWORD } from './helpers/accounts.ts';
import { newEmail } from './helpers/auth.ts';
import { browserSkip, launchBrowser, screenshot, signInFromNode, startService } from './helpers/browser.ts';

const skip = browserSkip();

t.test('/docs: Swagger UI renders under its CSP and "Try it out" works', { skip }, async (t) => {
  const adminEmail = newEmail('browser-docs-admin');
  const service = await startService(t, { ADMIN_EMAIL: adminEmail, ADMIN_PASSWORD });
  const accessToken = await signInFromNode(service.app, adminEmail, ADMIN_PASSWORD);
  const browser = await launchBrowser(t);
  const { page } = browser;
  const cspViolations: string[] = [];
  page.on('console', (message) => {
    if (/Content Security Policy/i.test(message.text())) cspViolations.push(message.text());
  });
  // What each violation was (directive, source, position), for the message when there is one.
  await page.addInitScript(() => {
    const w = globalThis as unknown as {
      cspEvents: string[];
      document: { addEventListener(type: string, listener: (event: Record<string, unknown>) => void): void };
    };
    w.cspEvents = [];
    w.document.addEventListener('securitypolicyviolation', (e) =>
      w.cspEvents.push(`${e.violatedDirective} ${e.blockedURI} at ${e.sourceFile}:${e.lineNumber}:${e.columnNumber}`),
    );
  });

  const docs = await page.goto(`${service.origin}/docs`);
  t.equal(docs?.status(), 200, 'GET /docs');
  await page.locator('.swagger-ui .information-container').waitFor();
  await page.locator('.swagger-ui .opblock').first().waitFor();
  t.ok(await page.locator('.swagger-ui .opblock').count(), 'the operations are listed');
  const title = (await page.locator('.swagger-ui .information-container .title').textContent()) ?? '';
  t.ok(title.length > 0, `the spec's title is shown: ${title}`);
  // Authorize and the first operation on the first screen, without scrolling (the description's
  // conventions are a link away, not 300 lines above them).
  const viewport = page.viewportSize()?.height ?? 0;
  for (const [what, selector] of [
    ['Authorize', '.swagger-ui .auth-wrapper .authorize'],
    ['the first operation', '.swagger-ui .opblock'],
  ] as const) {
    const box = await page.locator(selector).first().boundingBox();
    t.ok(
      box !== null && box.y + box.height <= viewport,
      `${what} is on the first screen (${box?.y} of ${viewport} px)`,
    );
  }
  await screenshot(page, 'docs-first-screen', false);

  // Authorize with the administrator's access token (bearerAuth).
  await page.locator('.swagger-ui .auth-wrapper .authorize').click();
  const dialog = page.locator('.swagger-ui .dialog-ux .modal-ux');
  await dialog.waitFor();
  // The spec has two schemes (bearerAuth, metricsToken): the access token goes to bearerAuth.
  const bearerForm = dialog.locator('form').filter({ hasText: 'bearerAuth' });
  await bearerForm.locator('input').first().fill(accessToken);
  await bearerForm.locator('button.authorize').click();
  await bearerForm.getByText('Authorized', { exact: true }).waitFor();
  await bearerForm.locator('button.btn-done').click();
  await dialog.waitFor({ state: 'detached' });
  t.ok(await page.locator('.swagger-ui .auth-wrapper .authorize.locked').count(), 'the lock shows authorized');

  // GET /api/realtime/permissions: expand, Try it out, Execute.
  const operation = page.locator('#operations-realtime-getRealtimePermissions');
  await operation.scrollIntoViewIfNeeded();
  await operation.locator('.opblock-summary').click();
  const tryItOut = operation.locator('button.try-out__btn');
  if ((await tryItOut.count()) > 0 && /try it out/i.test((await tryItOut.textContent()) ?? '')) await tryItOut.click();
  const executed = page.waitForResponse(
    (r) => new URL(r.url()).pathname === '/api/realtime/permissions' && r.request().method() === 'GET',
  );
  await operation.locator('button.execute').click();
  const response = await executed;
  t.equal(response.status(), 200, 'the browser got 200 from GET /api/realtime/permissions');
  t.equal(response.request().headers().authorization, `Bearer ${accessToken}`, 'with the token from "Authorize"');
  const status = operation.locator('.responses-wrapper .live-responses-table tr.response .response-col_status');
  await status.waitFor();
  t.match((await status.textContent())?.trim(), /^200/, 'Swagger UI shows the 200');
  const shownBody =
    (await operation.locator('.responses-wrapper .live-responses-table .microlight').first().textContent()) ?? '';
  t.match(shownBody, /subscribe/, 'and the answer body', { shownBody: shownBody.slice(0, 200) });
  await operation.locator('.request-url').evaluate((el) => el.scrollIntoView({ block: 'start' }));

  const cspEvents = await page.evaluate(() => (globalThis as unknown as { cspEvents: string[] }).cspEvents);
  t.same(cspViolations, [], 'no Content Security Policy violation in the console', { cspEvents });
  t.same(
    browser.errors.filter((e) => !/Content Security Policy/i.test(e)),
    [],
    'no other console errors, no uncaught page errors',
  );
  await screenshot(page, 'swagger-ui-try-it-out', false);
});
