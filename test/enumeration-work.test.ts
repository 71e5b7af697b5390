// Whether an address has an account, verified or not, must not show in the time sign-up,
// send-verification and verify take: each runs the very same database statements for a
// known-unverified, a known-verified and an unknown address (the figures are in bench/enumeration-timing.ts).
// Nor whether it has an unused code: a wrong verification code, a wrong sign-in code and a wrong
// reset code run the same statements, writing the same number of rows, with and without one.
import t, { type Test } from 'tap';
import { type AppDeps, buildApp } from '../src/app.ts';
import { loadConfig } from '../src/config.ts';
import { newEmail, withoutBinding, wrongCode } from './helpers/auth.ts';
import { TestClock } from './helpers/clock.ts';
import { createTestDatabase } from './helpers/database.ts';
import { startSmtpCapture } from './helpers/smtp.ts';
import { StatementRecorder } from './helpers/statement-recorder.ts';

async function setup(t: Test, env: Record<string, string> = {}, deps: Pick<AppDeps, 'webhookTuning'> = {}) {
  const database = await createTestDatabase();
  const smtp = await startSmtpCapture();
  const recorder = new StatementRecorder();
  const db = database.handle.db.withPlugin(recorder);
  recorder.setCompiler((node) => database.handle.db.getExecutor().compileQuery(node, { queryId: '' } as never).sql);
  const clock = new TestClock();
  const config = loadConfig({
    NODE_ENV: 'test',
    LOG_LEVEL: 'silent',
    DATABASE_URL: database.url,
    SMTP_URL: smtp.url,
    RATE_LIMIT_VERIFY: '1000',
    RATE_LIMIT_SIGN_UP: '1000',
    RATE_LIMIT_SEND_VERIFICATION: '1000',
    ...env,
  });
  const app = await buildApp(config, {
    database: { ...database.handle, db },
    logger: false,
    clock,
    housekeeping: false,
    ...deps,
  });
  await app.ready();
  t.teardown(async () => {
    await app.close();
    await smtp.close();
    await database.drop();
  });
  const post = (url: string, payload: Record<string, unknown>) => app.inject({ method: 'POST', url, payload });

  // One address of each kind.
  const unverified = newEmail('unverified');
  const verified = newEmail('verified');
  await post('/api/auth/users', { email: unverified, password: 'password one' });
  await post('/api/auth/users', { email: verified, password: 'password two' });
  const mail = (await smtp.waitFor(verified, 1))[0];
  const done = await post('/api/auth/email/verify?client_type=mobile', { email: verified, otp: mail?.code });
  if (done.statusCode !== 200) throw new Error(`verify: ${done.statusCode} ${done.body}`);
  const kinds = { 'known-unverified': unverified, 'known-verified': verified, unknown: newEmail('unknown') };

  /** A verified account's address (its verification code consumed). */
  async function verifiedAccount(label: string): Promise<string> {
    const email = newEmail(label);
    await post('/api/auth/users', { email, password: 'password three' });
    const sent = (await smtp.waitFor(email, 1))[0];
    const ok = await post('/api/auth/email/verify?client_type=mobile', { email, otp: sent?.code });
    if (ok.statusCode !== 200) throw new Error(`verify: ${ok.statusCode} ${ok.body}`);
    return email;
  }

  /** Sends a sign-in or reset code to `email` and returns it (the n-th mail to the address). */
  async function mailedCode(url: string, email: string, n: number): Promise<string> {
    clock.advance(61);
    const res = await post(url, { email });
    if (res.statusCode !== 202 && res.statusCode !== 200) throw new Error(`${url}: ${res.statusCode} ${res.body}`);
    const code = (await smtp.waitFor(email, n))[n - 1]?.code;
    if (code === undefined) throw new Error(`no code mailed to ${email}`);
    return code;
  }

  /** The statements one request runs, and its answer. */
  async function statementsOf(request: () => ReturnType<typeof post>) {
    recorder.recording = [];
    recorder.rowsWritten = 0;
    const res = await request();
    const statements = recorder.recording;
    recorder.recording = undefined;
    return { statements, rowsWritten: recorder.rowsWritten, status: res.statusCode, body: res.body };
  }
  return { kinds, post, clock, statementsOf, verifiedAccount, mailedCode, rawDb: database.handle.db };
}

type Kinds = Awaited<ReturnType<typeof setup>>['kinds'];

async function assertSameWork(
  t: Test,
  s: Awaited<ReturnType<typeof setup>>,
  request: (email: string) => () => ReturnType<Awaited<ReturnType<typeof setup>>['post']>,
  options: { kinds?: Record<string, string>; sameRowsWritten?: boolean } = {},
) {
  const runs: Record<string, { statements: string[]; rowsWritten: number; status: number; body: string }> = {};
  for (const [kind, email] of Object.entries(options.kinds ?? s.kinds) as [keyof Kinds, string][]) {
    // Each address outside the email cooldown, so that the limits say the same for all.
    s.clock.advance(61);
    runs[kind] = await s.statementsOf(request(email));
  }
  const [first, ...others] = Object.entries(runs);
  if (!first) throw new Error('no runs');
  t.ok(first[1].statements.length > 0, `${first[0]}: statements were recorded`);
  // A commit that wrote nothing skips the write-ahead log flush, the largest cost of all: every
  // kind must write.
  for (const [kind, run] of Object.entries(runs)) t.ok(run.rowsWritten > 0, `${kind}: writes at least one row`);
  for (const [kind, run] of others) {
    t.same(run.statements, first[1].statements, `${kind} runs the same statements as ${first[0]}`);
    if (options.sameRowsWritten) {
      t.equal(run.rowsWritten, first[1].rowsWritten, `${kind} writes as many rows as ${first[0]}`);
    }
    t.equal(run.status, first[1].status, `${kind}: the same status`);
    t.equal(withoutBinding(run.body), withoutBinding(first[1].body), `${kind}: the same body`);
  }
}

t.test('send-verification runs the same statements for every kind of address', async (t) => {
  const s = await setup(t);
  await assertSameWork(t, s, (email) => () => s.post('/api/auth/email/send-verification', { email }));
});

t.test('sign-up runs the same statements for every kind of address', async (t) => {
  const s = await setup(t);
  await assertSameWork(t, s, (email) => () => s.post('/api/auth/users', { email, password: 'another password' }));
});

t.test('with webhooks on, sign-up still runs the same statements for every kind of address', async (t) => {
  // Nothing listens there: the events of the setup's verification fail their first attempt and wait
  // an hour for the next, so that no delivery runs while the sign-ups' statements are recorded.
  const hour = 3_600_000;
  const s = await setup(
    t,
    { WEBHOOK_URL: 'http://127.0.0.1:9/webhooks', WEBHOOK_SECRET: `whsec_${Buffer.alloc(32, 7).toString('base64')}` },
    { webhookTuning: { retryDelayMs: () => hour, pollIntervalMs: hour } },
  );
  for (let i = 0; i < 200; i++) {
    const waiting = await s.rawDb
      .selectFrom('webhook_outbox')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('last_status', 'is', null)
      .where('last_error', 'is', null)
      .executeTakeFirstOrThrow();
    if (Number(waiting.n) === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  await assertSameWork(t, s, (email) => () => s.post('/api/auth/users', { email, password: 'another password' }));
});

t.test('verify with a wrong code runs the same statements for every kind of address', async (t) => {
  const s = await setup(t);
  await assertSameWork(
    t,
    s,
    (email) => () => s.post('/api/auth/email/verify?client_type=mobile', { email, otp: wrongCode('000000') }),
  );
});

// An unused code's attempt count goes up on a wrong guess; without one, a row is written elsewhere
// instead (code_attempt_misses): the same statements and the same number of rows either way.
t.test('a wrong verification code: the same work with and without an unused code', async (t) => {
  const s = await setup(t);
  // known-unverified has an unused code; known-verified's was used; unknown never had one.
  await assertSameWork(
    t,
    s,
    (email) => () => s.post('/api/auth/email/verify?client_type=mobile', { email, otp: '000000' }),
    { sameRowsWritten: true },
  );
});

t.test('a wrong sign-in code: the same work with and without an unused code', async (t) => {
  const s = await setup(t);
  const withCode = await s.verifiedAccount('sign-in-code');
  const code = await s.mailedCode('/api/auth/email/send-otp', withCode, 2);
  const kinds = { 'with an unused code': withCode, 'without one': s.kinds['known-verified'], unknown: s.kinds.unknown };
  await assertSameWork(
    t,
    s,
    (email) => () => s.post('/api/auth/sessions?client_type=mobile', { method: 'otp', email, otp: wrongCode(code) }),
    { kinds, sameRowsWritten: true },
  );
});

t.test('a wrong reset code: the same work with and without an unused code', async (t) => {
  const s = await setup(t);
  const withCode = await s.verifiedAccount('reset-code');
  const code = await s.mailedCode('/api/auth/email/send-reset-password', withCode, 2);
  const kinds = { 'with an unused code': withCode, 'without one': s.kinds['known-verified'], unknown: s.kinds.unknown };
  await assertSameWork(
    t,
    s,
    (email) => () => s.post('/api/auth/email/exchange-reset-password-token', { email, code: wrongCode(code) }),
    { kinds, sameRowsWritten: true },
  );
});
