/**
 * The pages a person sees in development, in a real browser (Debian's Chromium): the development
 * inbox with its code and link, the verification link's page before and after, the reset link's page
 * (the form, done, and the same link opened again). Screenshots of each go to .tap/screenshots/.
 */
import { sql } from 'kysely';
import t from 'tap';
import { freePort } from '../scripts/lib/service-process.ts';
import { newEmail, PASSWORD } from './helpers/auth.ts';
import { browserSkip, launchBrowser, screenshot, startService } from './helpers/browser.ts';

const skip = browserSkip();

t.test('the development inbox, and the pages its links open', { skip }, async (t) => {
  const port = await freePort();
  // SMTP_URL empty is "not set": development mail goes to the inbox. Links point at this service.
  const service = await startService(
    t,
    {
      SMTP_URL: '',
      PUBLIC_URL: `http://127.0.0.1:${port}`,
      APP_NAME: 'Acme',
      AUTH_REDIRECT_URL: 'https://app.example.com/',
    },
    port,
  );
  const { page } = await launchBrowser(t);
  const email = newEmail('pages');
  const signUp = await service.app.inject({
    method: 'POST',
    url: '/api/auth/users',
    payload: { email, password: PASSWORD },
  });
  t.equal(signUp.statusCode, 202);

  await page.goto(`${service.origin}/dev/inbox`);
  const mail = page.locator('article.mail').first();
  await mail.waitFor();
  t.equal(await page.locator('h1').textContent(), 'Development inbox');
  t.equal(await mail.locator('h2').textContent(), 'Confirm your email address');
  const code = (await mail.locator('.code').textContent()) ?? '';
  t.match(code, /^\d{6}$/, 'the code, as text');
  t.match(await mail.locator('.link').textContent(), /\/auth\/verify-email\?token=[0-9a-f]{64}$/, 'the link, as text');
  await screenshot(page, 'dev-inbox');

  await mail.getByRole('link', { name: 'Open the link' }).click();
  await page.locator('form').waitFor();
  t.equal(await page.locator('h1').textContent(), 'Confirm your email address', 'the link opens its page');
  t.equal(await page.locator('.app').textContent(), 'Acme', 'under APP_NAME');
  await screenshot(page, 'verify-email-page');
  await page.getByRole('button', { name: 'Confirm my email' }).click();
  await page.getByRole('status').waitFor();
  t.equal(await page.locator('h1').textContent(), 'Email address confirmed', 'the heading says it is done');
  t.match(await page.getByRole('status').textContent(), /Your email address is confirmed/);
  await screenshot(page, 'verify-email-confirmed');

  // One email per address per minute: the verification email's minute is made to have passed.
  await sql`update email_send_log set last_sent_at = last_sent_at - interval '2 minutes'`.execute(
    service.database.handle.db,
  );
  const reset = await service.app.inject({
    method: 'POST',
    url: '/api/auth/email/send-reset-password',
    payload: { email },
  });
  t.equal(reset.statusCode, 202);
  await page.goto(`${service.origin}/dev/inbox?to=${encodeURIComponent(email)}`);
  const resetMail = page.locator('article.mail', { hasText: 'Reset your password' });
  await resetMail.waitFor();
  const resetLink = (await resetMail.locator('.link').textContent()) ?? '';
  await resetMail.getByRole('link', { name: 'Open the link' }).click();
  await page.locator('input[name="newPassword"]').waitFor();
  await screenshot(page, 'reset-password-page');
  await page.locator('input[name="newPassword"]').fill('a new passphrase for acme');
  await page.locator('input[name="confirmPassword"]').fill('a new passphrase for acme');
  await page.getByRole('button', { name: 'Set the new password' }).click();
  await page.getByRole('status').waitFor();
  t.equal(await page.locator('h1').textContent(), 'Password changed');
  await screenshot(page, 'reset-password-done');

  await page.goto(resetLink);
  await page.getByRole('alert').waitFor();
  t.match(
    await page.getByRole('alert').textContent(),
    /invalid, has expired or was already used/,
    'the used link says so',
  );
  t.equal(await page.locator('form').count(), 0, 'before any password is typed');
  t.equal(await page.locator('h1').textContent(), 'This link cannot be used', 'and its heading says so');
  await screenshot(page, 'reset-password-used-link');
});
