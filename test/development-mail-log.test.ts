// Without SMTP_URL (development) every email goes to the development inbox and one log line, so a
// developer watches the log for codes. A request that sends no email (the per-address cooldown or
// daily cap, or no account that needs one) says so there in one line; the HTTP answer stays the
// same as for any address. With SMTP the line is never written.
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { loadConfig } from '../src/config.ts';
import { createMailer } from '../src/mail/mailer.ts';
import { buildAppCapturingLogs } from './helpers/app.ts';
import { newEmail, PASSWORD } from './helpers/auth.ts';

const noEmailLines = (lines: readonly string[], email: string) =>
  lines
    .map((l) => JSON.parse(l) as { msg: string; mail?: { to?: string } })
    .filter((l) => l.msg.startsWith(`No email to ${email}:`));

t.test('development: a send-verification inside the cooldown logs one line saying so', async (t) => {
  const { app, lines } = await buildAppCapturingLogs(t, 'info');
  const email = newEmail('cooldown');
  const signUp = await app.inject({ method: 'POST', url: '/api/auth/users', payload: { email, password: PASSWORD } });
  t.equal(signUp.statusCode, 202);
  t.ok(
    lines.some((l) => l.includes(`Email to ${email} NOT sent`)),
    'the sign-up email is logged',
  );
  t.same(noEmailLines(lines, email), [], 'nothing about a missing email yet');

  const again = await app.inject({ method: 'POST', url: '/api/auth/email/send-verification', payload: { email } });
  t.equal(again.statusCode, 202, 'the answer is the usual 202');
  const said = noEmailLines(lines, email);
  t.equal(said.length, 1, 'one line');
  t.match(said[0]?.msg, /less than 60 s ago/, 'naming the cooldown');
  t.match(said[0]?.msg, /development only/);

  const unknown = newEmail('unknown');
  const none = await app.inject({
    method: 'POST',
    url: '/api/auth/email/send-verification',
    payload: { email: unknown },
  });
  t.equal(none.statusCode, 202);
  t.equal(none.body, again.body, 'the same answer as for a known address');
  t.match(noEmailLines(lines, unknown)[0]?.msg, /no account awaits verification/, 'and the log says why');

  const otp = await app.inject({ method: 'POST', url: '/api/auth/email/send-otp', payload: { email } });
  t.equal(otp.statusCode, 202);
  t.equal(noEmailLines(lines, email).length, 2, 'send-otp inside the cooldown: one more line');
});

t.test('with SMTP the mailer never writes that line', async (t) => {
  const written: unknown[] = [];
  const log = { info: (...args: unknown[]) => written.push(args), warn: (...args: unknown[]) => written.push(args) };
  const config = loadConfig({ NODE_ENV: 'test', SMTP_URL: 'smtp://127.0.0.1:2525' });
  const mailer = createMailer(config, log as never);
  mailer.notSent('someone@example.com', 'a reason');
  mailer.close();
  t.same(written, []);
});

t.test('production without PUBLIC_URL: a warning that emailed links point at the local address', async (t) => {
  const production = {
    NODE_ENV: 'production',
    JWT_SECRET: randomBytes(48).toString('base64'),
    SMTP_URL: 'smtp://127.0.0.1:2525',
  };
  const without = await buildAppCapturingLogs(t, 'info', production);
  await without.app.ready();
  const warned = without.lines.filter((l) => l.includes('PUBLIC_URL is not set'));
  t.equal(warned.length, 1, 'one warning');
  t.match(JSON.parse(warned[0] ?? '{}'), {
    level: 40,
    msg: /emailed links point at http:\/\/127\.0\.0\.1:7130 .* set PUBLIC_URL to the address they use/,
  });
  const withUrl = await buildAppCapturingLogs(t, 'info', { ...production, PUBLIC_URL: 'https://auth.example.com' });
  await withUrl.app.ready();
  t.same(
    withUrl.lines.filter((l) => l.includes('PUBLIC_URL')),
    [],
    'none with PUBLIC_URL',
  );
  const development = await buildAppCapturingLogs(t, 'info');
  await development.app.ready();
  t.same(
    development.lines.filter((l) => l.includes('PUBLIC_URL is not set')),
    [],
    'none in development',
  );
});
