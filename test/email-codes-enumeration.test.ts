// Whether an address has an account (verified or not, disabled or not) must not show in the answer
// or the time of send-otp, send-reset-password, a wrong reset code or a wrong sign-in code: each
// runs the very same database statements, and writes, for every kind of address (the approach of
// enumeration-work.test.ts, applied to the passwordless sign-in and password-reset flows).
import t, { type Test } from 'tap';
import { buildApp } from '../src/app.ts';
import { type Env, loadConfig } from '../src/config.ts';
import { newEmail, wrongCode } from './helpers/auth.ts';
import { TestClock } from './helpers/clock.ts';
import { createTestDatabase } from './helpers/database.ts';
import { startSmtpCapture } from './helpers/smtp.ts';
import { StatementRecorder } from './helpers/statement-recorder.ts';

async function setup(t: Test, env: Env = {}) {
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
    RATE_LIMIT_SIGN_IN: '1000',
    RATE_LIMIT_SIGN_UP: '1000',
    RATE_LIMIT_SEND_VERIFICATION: '1000',
    ...env,
  });
  const app = await buildApp(config, {
    database: { ...database.handle, db },
    logger: false,
    clock,
    housekeeping: false,
  });
  await app.ready();
  t.teardown(async () => {
    await app.close();
    await smtp.close();
    await database.drop();
  });
  const post = (url: string, payload: Record<string, unknown>) => app.inject({ method: 'POST', url, payload });

  // One address of each kind. Accounts are made directly: sign-up may be disabled here.
  const unverified = newEmail('unverified');
  const verified = newEmail('verified');
  const disabled = newEmail('disabled');
  await database.handle.db
    .insertInto('users')
    .values([
      { email: unverified, email_verified: false },
      { email: verified, email_verified: true },
      { email: disabled, email_verified: true, disabled_at: new Date() },
    ])
    .execute();
  const kinds = {
    'known-unverified': unverified,
    'known-verified': verified,
    'known-disabled': disabled,
    unknown: newEmail('unknown'),
  };

  /** The statements one request runs, and its answer. */
  async function statementsOf(request: () => ReturnType<typeof post>) {
    recorder.recording = [];
    recorder.rowsWritten = 0;
    const res = await request();
    const statements = recorder.recording;
    recorder.recording = undefined;
    return { statements, rowsWritten: recorder.rowsWritten, status: res.statusCode, body: res.body };
  }
  return { kinds, post, clock, statementsOf, smtp };
}

type Setup = Awaited<ReturnType<typeof setup>>;

async function assertSameWork(t: Test, s: Setup, request: (email: string) => () => ReturnType<Setup['post']>) {
  const runs: Record<string, { statements: string[]; rowsWritten: number; status: number; body: string }> = {};
  for (const [kind, email] of Object.entries(s.kinds)) {
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
    t.equal(run.status, first[1].status, `${kind}: the same status`);
    t.equal(run.body, first[1].body, `${kind}: the same body`);
  }
}

for (const [label, env] of [
  ['sign-ups allowed', {}],
  ['ALLOW_SIGN_UP=false', { ALLOW_SIGN_UP: 'false' }],
] as const) {
  t.test(`${label}: send-otp runs the same statements for every kind of address`, async (t) => {
    const s = await setup(t, env);
    await assertSameWork(t, s, (email) => () => s.post('/api/auth/email/send-otp', { email }));
    // And yet only the addresses that may sign in got a code.
    const mailed = ['known-unverified', 'known-verified', ...(label === 'sign-ups allowed' ? ['unknown'] : [])];
    await s.smtp.waitFor(undefined, mailed.length);
    await new Promise((resolve) => setTimeout(resolve, 500));
    for (const [kind, email] of Object.entries(s.kinds)) {
      t.equal(
        s.smtp.messages.filter((m) => m.to.includes(email)).length,
        mailed.includes(kind) ? 1 : 0,
        `${kind}: emails`,
      );
    }
  });

  t.test(`${label}: a wrong sign-in code runs the same statements for every kind of address`, async (t) => {
    const s = await setup(t, env);
    for (const email of Object.values(s.kinds)) {
      s.clock.advance(61);
      await s.post('/api/auth/email/send-otp', { email });
    }
    await assertSameWork(
      t,
      s,
      (email) => () =>
        s.post('/api/auth/sessions?client_type=mobile', { method: 'otp', email, otp: wrongCode('000000') }),
    );
  });
}

t.test('send-reset-password runs the same statements for every kind of address', async (t) => {
  const s = await setup(t);
  await assertSameWork(t, s, (email) => () => s.post('/api/auth/email/send-reset-password', { email }));
  await s.smtp.waitFor(undefined, 2);
  await new Promise((resolve) => setTimeout(resolve, 500));
  for (const [kind, email] of Object.entries(s.kinds)) {
    const expected = kind === 'known-unverified' || kind === 'known-verified' ? 1 : 0;
    t.equal(s.smtp.messages.filter((m) => m.to.includes(email)).length, expected, `${kind}: emails`);
  }
});

t.test('a wrong reset code runs the same statements for every kind of address', async (t) => {
  const s = await setup(t);
  for (const email of Object.values(s.kinds)) {
    s.clock.advance(61);
    await s.post('/api/auth/email/send-reset-password', { email });
  }
  await assertSameWork(
    t,
    s,
    (email) => () => s.post('/api/auth/email/exchange-reset-password-token', { email, code: wrongCode('000000') }),
  );
});
