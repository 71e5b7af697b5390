// The development inbox: without SMTP_URL the emails the service would send are kept (the last
// 100) and shown at GET /dev/inbox and /dev/inbox.json, to this machine only; one log line per
// email names its code and link. With SMTP_URL there is no inbox.
import t from 'tap';
import { DevInbox, INBOX_CAPACITY, type InboxMessage } from '../src/mail/dev-inbox.ts';
import { buildAppCapturingLogs, buildTestApp } from './helpers/app.ts';
import { newEmail, PASSWORD } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';

interface InboxJson {
  messages: InboxMessage[];
}

/** The inbox's emails to `to`, once `count` have arrived (mail goes out after the answer). */
async function inboxOf(app: Awaited<ReturnType<typeof buildTestApp>>['app'], to: string, count = 1) {
  for (let i = 0; i < 200; i++) {
    const res = await app.inject({ url: `/dev/inbox.json?to=${encodeURIComponent(to)}` });
    const body = res.json() as InboxJson;
    if (body.messages.length >= count) return { res, messages: body.messages };
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`fewer than ${count} emails to ${to}`);
}

t.test('a sign-up email: its code and link in the JSON, on the page, and in one log line', async (t) => {
  const { app, lines } = await buildAppCapturingLogs(t, 'info', { APP_NAME: 'Acme <Dev>' });
  await app.ready();
  const email = newEmail('inbox');
  const signUp = await app.inject({ method: 'POST', url: '/api/auth/users', payload: { email, password: PASSWORD } });
  t.equal(signUp.statusCode, 202);

  const { res, messages } = await inboxOf(app, email);
  t.equal(res.statusCode, 200);
  t.match(String(res.headers['content-type']), /^application\/json/);
  t.equal(res.headers['cache-control'], 'no-store', 'never cached');
  t.equal(messages.length, 1);
  const mail = messages[0];
  t.match(mail, { id: Number, to: email, subject: 'Confirm your email address', code: /^\d{6}$/ });
  t.match(mail?.link, /^http:\/\/127\.0\.0\.1:7130\/auth\/verify-email\?token=[0-9a-f]{64}$/);
  t.ok(mail?.text.startsWith('Acme <Dev>\n\n'), 'the email begins with APP_NAME');
  t.ok(
    mail?.text.includes(`Your code: ${mail.code}`) && mail.text.includes(mail.link ?? '?'),
    'the code and link are the email’s',
  );
  t.ok(Date.parse(mail?.receivedAt ?? '') > Date.now() - 60_000, 'receivedAt is a recent time');

  // The code verifies the address: the inbox holds what was really sent.
  const verify = await app.inject({
    method: 'POST',
    url: '/api/auth/email/verify?client_type=mobile',
    payload: { email, otp: mail?.code },
  });
  t.equal(verify.statusCode, 200, 'the code from the inbox verifies');

  const logged = lines.filter((l) => l.includes(`Email to ${email}`));
  t.equal(logged.length, 1, 'one log line');
  const line = JSON.parse(logged[0] ?? '{}') as { msg: string; level: number; mail: unknown };
  t.equal(
    line.msg,
    `Email to ${email} NOT sent (no SMTP_URL, development only): "Confirm your email address", code ${mail?.code}, link ${mail?.link}; see http://127.0.0.1:7130/dev/inbox`,
  );
  t.same(line.mail, { id: mail?.id, to: email }, 'the email itself is not in the log record');

  const page = await app.inject({ url: '/dev/inbox' });
  t.equal(page.statusCode, 200);
  t.match(String(page.headers['content-type']), /^text\/html/);
  t.match(String(page.headers['content-security-policy']), /default-src 'none'/);
  t.match(page.body, /<p class="app">Acme &lt;Dev&gt;<\/p>/, 'APP_NAME, escaped');
  t.match(page.body, new RegExp(`<span class="code">${mail?.code}</span>`), 'the code as text to copy');
  t.match(
    page.body,
    new RegExp(`<a href="${mail?.link?.replace(/[?]/g, '\\?')}">Open the link</a>`),
    'the link to click',
  );
  t.match(page.body, new RegExp(`<p class="link">${mail?.link?.replace(/[?]/g, '\\?')}</p>`), 'and as text');
  t.notMatch(page.body, /<script/i, 'no script');
});

t.test(`newest first, the last ${INBOX_CAPACITY} only, any case of an address picks its emails`, async (t) => {
  const inbox = new DevInbox();
  const addresses = Array.from({ length: INBOX_CAPACITY + 2 }, (_, i) => `fill-${i}@example.com`);
  for (const to of addresses) inbox.add({ to, subject: 's', text: 't', html: 'h', code: '123456' }, new Date());
  const all = inbox.list();
  t.equal(all.length, INBOX_CAPACITY, `${INBOX_CAPACITY} kept`);
  t.equal(all[0]?.to, addresses.at(-1), 'the newest first');
  t.equal(all.at(-1)?.to, addresses[2], 'the two oldest are gone');
  t.same(
    all.map((m) => m.id),
    Array.from({ length: INBOX_CAPACITY }, (_, i) => INBOX_CAPACITY + 2 - i),
    'ids count every email since the start',
  );
  t.same(
    inbox.list('FILL-5@Example.com').map((m) => m.to),
    ['fill-5@example.com'],
    'one address, in any case',
  );
  t.same(inbox.list('fill-0@example.com'), [], 'a dropped one is gone');
});

t.test('what the URL brings is escaped on the page', async (t) => {
  const { app } = await buildTestApp(t);
  const hostile = '"><script>alert(1)</script>@example.com';
  const page = await app.inject({ url: `/dev/inbox?to=${encodeURIComponent(hostile)}` });
  t.equal(page.statusCode, 200);
  t.notMatch(page.body, /<script>alert/, 'escaped');
  t.match(page.body, /to &quot;&gt;&lt;script&gt;alert\(1\)&lt;\/script&gt;@example.com only/);
  t.match(page.body, /No email yet/);
});

t.test('only to this machine: another address or a proxied request gets 403', async (t) => {
  const { app } = await buildTestApp(t, { env: { CORS_ORIGINS: 'https://app.example.com' } });
  for (const path of ['/dev/inbox', '/dev/inbox.json']) {
    assertErrorBody(t, await app.inject({ url: path, remoteAddress: '203.0.113.9' }), 403, 'FORBIDDEN');
    assertErrorBody(
      t,
      await app.inject({ url: path, headers: { 'x-forwarded-for': '203.0.113.9' } }),
      403,
      'FORBIDDEN',
    );
    assertErrorBody(t, await app.inject({ url: path, headers: { forwarded: 'for=203.0.113.9' } }), 403, 'FORBIDDEN');
    assertErrorBody(t, await app.inject({ url: path, headers: { 'x-real-ip': '203.0.113.9' } }), 403, 'FORBIDDEN');
    // DNS rebinding: a name of the attacker's that resolves to 127.0.0.1.
    assertErrorBody(t, await app.inject({ url: path, headers: { host: 'evil.example.net:7130' } }), 403, 'FORBIDDEN');
    // A page of another site, even one CORS_ORIGINS allows, reading it with fetch.
    assertErrorBody(
      t,
      await app.inject({ url: path, headers: { origin: 'https://app.example.com' } }),
      403,
      'FORBIDDEN',
    );
    assertErrorBody(t, await app.inject({ url: path, headers: { 'sec-fetch-site': 'cross-site' } }), 403, 'FORBIDDEN');
    t.equal((await app.inject({ url: path, remoteAddress: '::1' })).statusCode, 200, `${path}: ::1 is this machine`);
    for (const host of ['localhost:7130', '127.0.0.1', '[::1]:7130', 'LOCALHOST']) {
      const res = await app.inject({ url: path, headers: { host, 'sec-fetch-site': 'none' } });
      t.equal(res.statusCode, 200, `${path}: Host ${host}, typed in the address bar`);
    }
    const own = await app.inject({ url: path, headers: { 'sec-fetch-site': 'same-origin' } });
    t.equal(own.statusCode, 200, `${path}: from the inbox's own page`);
  }
  const refused = await app.inject({ url: '/dev/inbox.json', remoteAddress: '10.1.2.3' });
  t.match(refused.json(), { message: /only requests made on this machine \(loopback/ }, 'it says why');
});

t.test('with SMTP_URL there is no inbox', async (t) => {
  const { app } = await buildTestApp(t, { env: { SMTP_URL: 'smtp://127.0.0.1:2525' } });
  assertErrorBody(t, await app.inject({ url: '/dev/inbox' }), 404, 'NOT_FOUND');
  assertErrorBody(t, await app.inject({ url: '/dev/inbox.json' }), 404, 'NOT_FOUND');
});
