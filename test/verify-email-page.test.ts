// The page verification links open (GET/POST /auth/verify-email): a form without script that
// confirms the address by the link's token, opens no session, and offers the way on only to an
// allowed redirect; wrong, used and disabled-account tokens get one answer.
import t, { type Test } from 'tap';
import { buildAuthTestApp, newEmail, PASSWORD } from './helpers/auth.ts';

const APP = 'https://app.example.com';
const form = (fields: Record<string, string>) => new URLSearchParams(fields).toString();

async function setup(t: Test, env: Record<string, string> = {}) {
  const test = await buildAuthTestApp(t, {
    label: 'verify-page',
    env: { AUTH_REDIRECT_URL: `${APP}/signed-up`, ...env },
  });
  const { app, database } = test;
  const post = (fields: Record<string, string>) =>
    app.inject({
      method: 'POST',
      url: '/auth/verify-email',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      payload: form(fields),
    });
  const account = async (label: string, extra: Record<string, unknown> = {}) => {
    const email = newEmail(label);
    await test.signUp(email, extra);
    return { email, mail: await test.firstMail(email) };
  };
  const userOf = (email: string) =>
    database.handle.db.selectFrom('users').selectAll().where('email', '=', email).executeTakeFirstOrThrow();
  const sessionCount = async (userId: string) =>
    Number(
      (
        await database.handle.db
          .selectFrom('sessions')
          .select((eb) => eb.fn.countAll().as('n'))
          .where('user_id', '=', userId)
          .executeTakeFirstOrThrow()
      ).n,
    );
  return { ...test, post, account, userOf, sessionCount };
}

t.test('the link confirms the address and opens no session', async (t) => {
  const { app, post, account, userOf, sessionCount, verify } = await setup(t);
  const { email, mail } = await account('confirm');
  const token = mail.token ?? '';

  const page = await app.inject({ url: `/auth/verify-email?token=${token}` });
  t.equal(page.statusCode, 200);
  t.match(page.body, /<form method="post" action="\/auth\/verify-email">/, 'a form posted back to the page');
  t.match(page.body, /If you did not sign up, do not press it/, 'the warning of the email, beside the button');
  t.notMatch(page.body, /<script/i, 'no script');
  t.equal((await userOf(email)).email_verified, false, 'opening the page confirms nothing');

  const done = await post({ token });
  t.equal(done.statusCode, 200);
  t.match(done.body, /Your email address is confirmed/);
  t.match(done.body, /<h1>Email address confirmed<\/h1>/, 'the heading says it is done');
  t.notMatch(done.body, /Confirm your email address/, 'and no longer asks');
  t.match(
    page.body,
    /<p class="app">Accounts<\/p>\n<h1>Confirm your email address<\/h1>/,
    'APP_NAME above the heading',
  );
  t.notMatch(done.body, /signed in/i, 'it does not claim a session');
  t.match(done.body, new RegExp(`<a href="${APP}/signed-up">Continue</a>`), 'Continue goes to AUTH_REDIRECT_URL');
  t.notMatch(String(done.headers['set-cookie'] ?? ''), /refresh_token/, 'no cookie');
  const user = await userOf(email);
  t.equal(user.email_verified, true, 'the address is verified');
  t.equal(await sessionCount(user.id), 0, 'no session was opened');

  const sessions = await app.inject({
    method: 'POST',
    url: '/api/auth/sessions?client_type=mobile',
    payload: { email, password: PASSWORD },
  });
  t.equal(sessions.statusCode, 200, 'the person signs in with the sign-up password');

  const again = await post({ token });
  t.equal(again.statusCode, 400, 'the token is spent');
  t.match(again.body, /invalid, has expired or was already used/);
  t.equal((await verify({ otp: token })).statusCode, 400, 'and the API refuses it too');
});

t.test('after competing sign-ups the page says no password was kept, and how to go on', async (t) => {
  const { post, account, signUp, userOf, sessionCount } = await setup(t);
  const { email, mail } = await account('contested');
  await signUp(email, { password: 'someone else typed this' });
  const done = await post({ token: mail.token ?? '' });
  t.equal(done.statusCode, 200);
  t.match(done.body, /It has no password yet/);
  t.notMatch(done.body, /You can now sign in with it/, 'no promise that a password works');
  const user = await userOf(email);
  t.equal(user.email_verified, true);
  t.equal(user.password_hash, null, 'neither password was activated');
  t.equal(await sessionCount(user.id), 0, 'and no session was opened');
});

t.test("the link's redirect_to is offered only when it is allowed", async (t) => {
  const { app, post, account } = await setup(t);
  const { mail } = await account('redirect', { redirectTo: `${APP}/welcome` });
  t.match(mail.text, /redirect_to=https%3A%2F%2Fapp\.example\.com%2Fwelcome/, 'the link carries it');
  const page = await app.inject({
    url: `/auth/verify-email?token=${mail.token}&redirect_to=${encodeURIComponent(`${APP}/welcome`)}`,
  });
  t.match(page.body, /name="redirect_to" value="https:\/\/app\.example\.com\/welcome"/, 'the form keeps it');
  const hostile = await app.inject({
    url: `/auth/verify-email?token=${mail.token}&redirect_to=${encodeURIComponent('https://evil.example.net/x')}`,
  });
  t.notMatch(hostile.body, /evil/, 'a redirect elsewhere is dropped from the form');

  const done = await post({ token: mail.token ?? '', redirect_to: 'javascript:alert(1)' });
  t.equal(done.statusCode, 200, 'a refused redirect does not stop the confirmation');
  t.notMatch(done.body, /javascript:/);
  t.match(done.body, new RegExp(`<a href="${APP}/signed-up">Continue</a>`), 'Continue falls back to AUTH_REDIRECT_URL');
});

t.test('no AUTH_REDIRECT_URL and no redirect: the confirmation without a link', async (t) => {
  const { post, account } = await setup(t, { AUTH_REDIRECT_URL: '' });
  const { mail } = await account('plain');
  const done = await post({ token: mail.token ?? '' });
  t.equal(done.statusCode, 200);
  t.notMatch(done.body, /Continue/);
});

t.test('wrong, malformed and disabled-account tokens', async (t) => {
  const { post, account, userOf, database } = await setup(t);
  const wrong = await post({ token: 'a'.repeat(64) });
  t.equal(wrong.statusCode, 400);
  t.match(wrong.body, /invalid, has expired or was already used/);
  const malformed = await post({ token: '<script>alert(1)</script>' });
  t.equal(malformed.statusCode, 400);
  t.notMatch(malformed.body, /<script>alert/, 'never echoed');
  t.match(malformed.body, /This link is incomplete/);

  const { email, mail } = await account('disabled');
  const user = await userOf(email);
  await database.handle.db.updateTable('users').set({ disabled_at: new Date() }).where('id', '=', user.id).execute();
  const refused = await post({ token: mail.token ?? '' });
  t.equal(refused.statusCode, 400, 'a disabled account: the answer of a wrong token');
  t.equal(refused.body, wrong.body, 'the same page');
  t.equal((await userOf(email)).email_verified, false, 'and nothing is verified');
});

t.test('the form is the only body the page takes, under the verify rate limit', async (t) => {
  const { app, post } = await setup(t, { RATE_LIMIT_VERIFY: '2' });
  const json = await app.inject({ method: 'POST', url: '/auth/verify-email', payload: { token: 'a'.repeat(64) } });
  t.equal(json.statusCode, 415, 'JSON is not taken here');
  await post({ token: 'b'.repeat(64) });
  const limited = await post({ token: 'c'.repeat(64) });
  t.equal(limited.statusCode, 429, 'the third attempt within the window is limited');
  t.ok(limited.headers['retry-after'], 'with Retry-After');
});
