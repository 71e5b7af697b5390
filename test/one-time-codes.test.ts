// The one-time code store (src/auth/one-time-codes.ts, table one_time_codes): what was emailed before
// migration 0019 still works after it, and the attempt rules (per code, per address and day) hold
// for every purpose, with the codes of one purpose or address worth nothing for another.
import { createHmac } from 'node:crypto';
import { type Kysely, sql } from 'kysely';
import { Migrator } from 'kysely/migration';
import t from 'tap';
import { createAttemptBatches } from '../src/auth/attempt-batches.ts';
import { EMAIL_LIMITS, MAX_CODE_ATTEMPTS_PER_DAY, MAX_CODE_FAILURES } from '../src/auth/auth-context.ts';
import { deriveKeys, hashPassword, sha256Hex } from '../src/auth/crypto.ts';
import { oneTimeCodeHmac } from '../src/auth/one-time-codes.ts';
import { migrations } from '../src/db/migrate.ts';
import { claimEmailSend } from '../src/db/repositories/address-limits.ts';
import {
  consumeStatement,
  deleteExpiredCodes,
  issueSignInCode,
  type OneTimeCodeRow,
} from '../src/db/repositories/one-time-codes.ts';
import type { Database, EmailCodePurpose } from '../src/db/schema.ts';
import { buildAuthTestApp, newEmail, PASSWORD, wrongCode } from './helpers/auth.ts';
import { heldTransaction } from './helpers/database.ts';
import { assertErrorBody } from './helpers/error-body.ts';

const JWT_SECRET = 'one-time-codes-test-secret-5b1e0c7a9d2f4e68';
const keys = deriveKeys(JWT_SECRET);
const CODE = '246810';
const TOKEN = 'ab'.repeat(32);
const otherToken = (n: number) => n.toString(16).padStart(2, '0').repeat(32);

async function setup(t: Parameters<typeof buildAuthTestApp>[0]) {
  const s = await buildAuthTestApp(t, { label: 'one-time-codes', env: { JWT_SECRET } });
  const db = s.database.handle.db;
  const post = (url: string, payload: Record<string, unknown>) => s.app.inject({ method: 'POST', url, payload });
  return { ...s, db, post };
}

async function insertUser(db: Kysely<Database>, email: string, verified: boolean): Promise<string> {
  const { rows } = await sql<{ id: string }>`
    insert into users (email, password_hash, email_verified) values (${email}, ${await hashPassword(PASSWORD)}, ${verified})
    returning id`.execute(db);
  const id = rows[0]?.id ?? '';
  await sql`insert into user_providers (user_id, provider, provider_account_id) values (${id}, 'email', ${email})`.execute(
    db,
  );
  return id;
}

t.test('codes and links emailed before the upgrade to one table still work after it', async (t) => {
  const s = await setup(t);
  const migrator = new Migrator({ db: s.db, provider: { getMigrations: async () => migrations } });
  const down = await migrator.migrateTo('0018_code_attempt_misses');
  t.error(down.error, 'back to the migration before the one table');

  // Rows as the code before the upgrade wrote them (its HMAC layouts, SHA-256 link tokens).
  const inMinutes = (m: number) => new Date(Date.now() + m * 60_000);
  const byCode = newEmail('verify-code');
  const byLink = newEmail('verify-link');
  const signIn = newEmail('sign-in');
  const reset = newEmail('reset');
  const expired = newEmail('expired');
  const used = newEmail('used');
  const pendingHash = await hashPassword(PASSWORD);
  for (const [email, token] of [
    [byCode, otherToken(1)],
    [byLink, TOKEN],
  ] as const) {
    const id = await insertUser(s.db, email, false);
    await sql`update users set password_hash = null where id = ${id}`.execute(s.db);
    await sql`
      insert into email_verifications (user_id, code_hmac, token_hash, code_expires_at, token_expires_at,
        pending_password_hash, created_at)
      values (${id}, ${createHmac('sha256', keys.otp).update(`${email}:${CODE}`).digest('hex')}, ${sha256Hex(token)},
        ${inMinutes(10)}, ${inMinutes(60)}, ${pendingHash}, now())`.execute(s.db);
  }
  const resetId = await insertUser(s.db, reset, true);
  const expiredId = await insertUser(s.db, expired, true);
  await insertUser(s.db, used, true);
  await insertUser(s.db, signIn, true);
  const emailCode = (purpose: string, email: string, userId: string | null, expires: Date, consumed: Date | null) =>
    sql`insert into email_codes (email, purpose, user_id, code_hmac, expires_at, consumed_at, created_at)
      values (${email}, ${purpose}, ${userId}, ${createHmac('sha256', keys.otp).update(`${purpose}\n${email}\n${CODE}`).digest('hex')},
        ${expires}, ${consumed}, now())`.execute(s.db);
  await emailCode('sign_in', signIn, null, inMinutes(10), null);
  await emailCode('password_reset', reset, resetId, inMinutes(10), null);
  await emailCode('password_reset', expired, expiredId, inMinutes(-1), null);
  await emailCode('sign_in', used, null, inMinutes(10), new Date());
  await sql`insert into password_reset_tokens (token_hash, user_id, kind, expires_at, created_at)
    values (${sha256Hex(otherToken(2))}, ${resetId}, 'link', ${inMinutes(60)}, now()),
           (${sha256Hex(otherToken(3))}, ${expiredId}, 'link', ${inMinutes(-1)}, now())`.execute(s.db);

  const up = await migrator.migrateToLatest();
  t.error(up.error, 'the upgrade ran');
  const { rows: old } = await sql<{ n: number }>`
    select count(*)::int as n from information_schema.tables
    where table_name in ('email_verifications', 'email_codes', 'password_reset_tokens')`.execute(s.db);
  t.equal(old[0]?.n, 0, 'the old tables are gone');

  const verified = await s.verifyElsewhere({ email: byCode, otp: CODE });
  t.equal(verified.statusCode, 200, 'a verification code sent before the upgrade verifies');
  const signedIn = await s.post('/api/auth/sessions?client_type=mobile', { email: byCode, password: PASSWORD });
  t.equal(signedIn.statusCode, 200, "the sign-up's pending password came along");
  t.equal((await s.verifyElsewhere({ otp: TOKEN })).statusCode, 200, 'so does a verification link');
  const withCode = await s.post('/api/auth/sessions?client_type=mobile', { method: 'otp', email: signIn, otp: CODE });
  t.equal(withCode.statusCode, 200, 'a sign-in code signs in');
  const exchanged = await s.post('/api/auth/email/exchange-reset-password-token', { email: reset, code: CODE });
  t.equal(exchanged.statusCode, 200, 'a reset code is exchanged');
  const viaLink = await s.post('/api/auth/email/reset-password', {
    otp: otherToken(2),
    newPassword: 'a new password 1',
  });
  t.equal(viaLink.statusCode, 200, 'a reset link sets a new password');

  // What was dead before stays dead.
  const expiredCode = await s.post('/api/auth/email/exchange-reset-password-token', { email: expired, code: CODE });
  assertErrorBody(t, expiredCode, 400, 'INVALID_OTP');
  const expiredLink = await s.post('/api/auth/email/reset-password', {
    otp: otherToken(3),
    newPassword: 'x'.repeat(12),
  });
  assertErrorBody(t, expiredLink, 400, 'INVALID_OTP');
  const usedCode = await s.post('/api/auth/sessions?client_type=mobile', { method: 'otp', email: used, otp: CODE });
  assertErrorBody(t, usedCode, 400, 'INVALID_OTP');
  assertErrorBody(t, await s.verifyElsewhere({ email: byCode, otp: CODE }), 400, 'INVALID_OTP');
});

/**
 * Plants a live code of `purpose` for an address, as a fresh email would (so that tests need not wait
 * out the email limits); `hmac` stores another HMAC instead of the code's.
 */
async function plant(
  s: Awaited<ReturnType<typeof setup>>,
  purpose: EmailCodePurpose,
  email: string,
  code: string,
  hmac = oneTimeCodeHmac(keys, purpose, email, code),
) {
  const { rows } = await sql<{ id: string }>`select id from users where email = ${email}`.execute(s.db);
  const userId = purpose === 'sign_in' ? null : (rows[0]?.id ?? null);
  const expires = new Date(s.clock.now().getTime() + 3_600_000);
  const link = purpose === 'verification' ? { hash: sha256Hex(`${email}\n${code}`), expires } : undefined;
  await sql`delete from one_time_codes where email = ${email} and purpose = ${purpose}`.execute(s.db);
  await sql`insert into one_time_codes (purpose, email, user_id, code_hmac, code_expires_at, token_hash,
      token_expires_at, created_at)
    values (${purpose}, ${email}, ${userId}, ${hmac}, ${expires}, ${link?.hash ?? null}, ${link?.expires ?? null},
      ${s.clock.now()})`.execute(s.db);
}

t.test('the attempt rules hold for every purpose, and a code is worth nothing elsewhere', async (t) => {
  const s = await setup(t);
  const submit = (purpose: EmailCodePurpose, email: string, code: string) =>
    purpose === 'verification'
      ? s.verifyElsewhere({ email, otp: code })
      : purpose === 'sign_in'
        ? s.post('/api/auth/sessions?client_type=mobile', { method: 'otp', email, otp: code })
        : s.post('/api/auth/email/exchange-reset-password-token', { email, code });
  const accountFor = async (purpose: EmailCodePurpose, label: string) => {
    const email = newEmail(label);
    await insertUser(s.db, email, purpose !== 'verification');
    return email;
  };

  for (const purpose of ['verification', 'sign_in', 'password_reset'] as const) {
    // Per code: the right code still works after MAX_CODE_FAILURES - 1 wrong ones...
    const lenient = await accountFor(purpose, `${purpose}-4`);
    await plant(s, purpose, lenient, CODE);
    for (let i = 1; i < MAX_CODE_FAILURES; i++) {
      assertErrorBody(t, await submit(purpose, lenient, wrongCode(CODE, i)), 400, 'INVALID_OTP');
    }
    t.equal((await submit(purpose, lenient, CODE)).statusCode, 200, `${purpose}: right after 4 wrong`);
    // ...and not after MAX_CODE_FAILURES.
    const strict = await accountFor(purpose, `${purpose}-5`);
    await plant(s, purpose, strict, CODE);
    for (let i = 1; i <= MAX_CODE_FAILURES; i++) await submit(purpose, strict, wrongCode(CODE, i));
    assertErrorBody(t, await submit(purpose, strict, CODE), 400, 'INVALID_OTP');

    // The stored HMAC binds purpose and address: the same digits issued for another purpose, or for
    // another address, are refused even where their HMAC was stored.
    const owner = await accountFor(purpose, `${purpose}-owner`);
    const other = purpose === 'sign_in' ? 'password_reset' : 'sign_in';
    await plant(s, purpose, owner, CODE, oneTimeCodeHmac(keys, other, owner, CODE));
    assertErrorBody(t, await submit(purpose, owner, CODE), 400, 'INVALID_OTP');
    await plant(s, purpose, owner, CODE, oneTimeCodeHmac(keys, purpose, lenient, CODE));
    assertErrorBody(t, await submit(purpose, owner, CODE), 400, 'INVALID_OTP');
    // A live code of another purpose is not looked at.
    await sql`delete from one_time_codes where email = ${owner} and purpose = ${purpose}`.execute(s.db);
    await plant(s, other, owner, CODE);
    assertErrorBody(t, await submit(purpose, owner, CODE), 400, 'INVALID_OTP');
    await plant(s, purpose, owner, CODE);
    t.equal((await submit(purpose, owner, CODE)).statusCode, 200, `${purpose}: its own code works`);
  }

  // Per address and day, over every purpose: guesses at live verification and reset codes add up,
  // and then a right sign-in code is refused too, until the day is over.
  const email = await accountFor('verification', 'per-address');
  let guesses = 0;
  for (let round = 0; guesses < MAX_CODE_ATTEMPTS_PER_DAY; round++) {
    const purpose = round % 2 === 0 ? 'verification' : 'password_reset';
    await plant(s, purpose, email, CODE);
    for (let i = 1; i < MAX_CODE_FAILURES && guesses < MAX_CODE_ATTEMPTS_PER_DAY; i++, guesses++) {
      assertErrorBody(t, await submit(purpose, email, wrongCode(CODE, i)), 400, 'INVALID_OTP');
    }
  }
  await plant(s, 'sign_in', email, CODE);
  assertErrorBody(t, await submit('sign_in', email, CODE), 400, 'INVALID_OTP');
  await plant(s, 'password_reset', email, CODE);
  assertErrorBody(t, await submit('password_reset', email, CODE), 400, 'INVALID_OTP');
  s.clock.advance(24 * 3600 + 1);
  await plant(s, 'password_reset', email, CODE);
  t.equal((await submit('password_reset', email, CODE)).statusCode, 200, 'a day later the right code works');
});

t.test('simultaneous guesses at one code each take an attempt of their own', async (t) => {
  const s = await setup(t);
  const email = newEmail('simultaneous');
  await insertUser(s.db, email, false);
  await plant(s, 'verification', email, CODE);
  const guesses = 2 * MAX_CODE_FAILURES;
  const answers = await Promise.all(
    Array.from({ length: guesses }, (_, i) => s.verifyElsewhere({ email, otp: wrongCode(CODE, i + 1) })),
  );
  t.same(
    answers.map((a) => a.statusCode),
    answers.map(() => 400),
    'every wrong guess is refused',
  );
  const { rows } = await sql<{ failed: number; window: number }>`
    select c.failed_attempts as failed, l.code_attempts_in_window as window
    from one_time_codes c join email_send_log l using (email)
    where c.email = ${email} and c.purpose = 'verification'`.execute(s.db);
  t.same(rows, [{ failed: guesses, window: guesses }], 'the code and the address each counted every guess');
  assertErrorBody(t, await s.verifyElsewhere({ email, otp: CODE }), 400, 'INVALID_OTP');
});

// Guesses at one address that arrive while a counting statement is in flight there are counted by
// one statement (src/auth/attempt-batches.ts). Each must still get an attempt number of its own, in
// arrival order: here the first guess is held up by a transaction that keeps the code's row (or, on
// PGlite, the one session) busy, and the others queue behind it in a known order.
for (const [label, rightAt] of [
  ['a right code queued after the allowed attempts is refused', MAX_CODE_FAILURES + 2],
  ['a right code queued within the allowed attempts works', MAX_CODE_FAILURES],
] as const) {
  t.test(`guesses that queue at one code each count: ${label}`, async (t) => {
    const s = await setup(t);
    const email = newEmail('queued');
    await insertUser(s.db, email, false);
    await plant(s, 'verification', email, CODE);
    const hold = heldTransaction(s.db, (trx) =>
      sql`select id from one_time_codes where email = ${email} for update`.execute(trx),
    );
    await hold.held;
    const answers: Promise<{ statusCode: number }>[] = [];
    for (let attempt = 1; attempt <= MAX_CODE_FAILURES + 2; attempt++) {
      answers.push(s.verifyElsewhere({ email, otp: attempt === rightAt ? CODE : wrongCode(CODE, attempt) }));
      // In arrival order: each request reaches the check before the next is sent.
      await new Promise((resolve) => setTimeout(resolve, 40));
    }
    await hold.commit();
    const statuses = (await Promise.all(answers)).map((a) => a.statusCode);
    t.same(
      statuses,
      statuses.map((_, i) => (i + 1 === rightAt && rightAt <= MAX_CODE_FAILURES ? 200 : 400)),
      `attempt ${rightAt} (the right code) ${rightAt <= MAX_CODE_FAILURES ? 'works' : 'is refused'}, every other is refused`,
    );
    const { rows } = await sql<{ failed: number }>`
      select failed_attempts as failed from one_time_codes where email = ${email} and purpose = 'verification'`.execute(
      s.db,
    );
    t.same(rows, [{ failed: MAX_CODE_FAILURES + 2 }], 'the code counted every guess');
  });
}

// Sending a code claims the address's row of email_send_log, then writes the code's row, in one
// transaction; counting a guess writes the same two rows. Taken in the other order, a guess that
// arrived between a send's two statements would wait for the send while the send waited for it: a
// deadlock, which PostgreSQL breaks after a second by failing one of them (a 503, or a send lost).
for (const expired of [false, true]) {
  const before = expired ? 'an expired code' : 'a live code';
  t.test(
    `a guess that arrives while a code is being sent waits for it, and neither fails (${before} before)`,
    async (t) => {
      const s = await setup(t);
      const email = newEmail('send-and-guess');
      await insertUser(s.db, email, true);
      await plant(s, 'sign_in', email, CODE);
      // The code was mailed two minutes ago (past the cooldown), as every code is: after a claim.
      const sentAt = new Date(s.clock.now().getTime() - 120_000);
      await sql`insert into email_send_log (email, last_sent_at, window_started_at, sent_in_window)
      values (${email}, ${sentAt}, ${sentAt}, 1)`.execute(s.db);
      if (expired)
        await sql`update one_time_codes set code_expires_at = ${s.clock.now()} where email = ${email}`.execute(s.db);
      const send = heldTransaction(
        s.db,
        (trx) => claimEmailSend(trx, email, { requester: '203.0.113.7', kind: 'sign_in' }, s.clock.now(), EMAIL_LIMITS),
        (trx) =>
          issueSignInCode(
            trx,
            email,
            {
              codeHmac: oneTimeCodeHmac(keys, 'sign_in', email, '135790'),
              codeExpiresAt: new Date(Date.now() + 600_000),
            },
            true,
            s.clock.now(),
          ),
      );
      await send.held;
      const guess = s.post('/api/auth/sessions?client_type=mobile', { method: 'otp', email, otp: wrongCode(CODE, 1) });
      // The guess reaches its statement while the send holds the address's row.
      await new Promise((resolve) => setTimeout(resolve, 200));
      await t.resolves(send.commit(), 'the send commits');
      assertErrorBody(t, await guess, 400, 'INVALID_OTP');
      const { rows } = await sql<{ failed: number; window: number }>`
      select c.failed_attempts as failed, l.code_attempts_in_window as window
      from one_time_codes c join email_send_log l using (email)
      where c.email = ${email} and c.purpose = 'sign_in'`.execute(s.db);
      t.same(rows, [{ failed: 1, window: 1 }], 'the guess counted at the new code and in the address window');
    },
  );
}

t.test('attempt batches: one statement in flight per key, the rest counted together in arrival order', async (t) => {
  const calls: Array<{ key: string; size: number }> = [];
  let release: (() => void) | undefined;
  const batches = createAttemptBatches(async (key, size) => {
    const call = calls.push({ key, size });
    if (call === 1) await new Promise<void>((resolve) => (release = resolve));
    if (key === 'fails') throw new Error('statement failed');
    return call;
  });
  const first = batches.submit('a');
  const queued = [batches.submit('a'), batches.submit('a'), batches.submit('a')];
  const other = batches.submit('b');
  t.same(
    calls,
    [
      { key: 'a', size: 1 },
      { key: 'b', size: 1 },
    ],
    'the first guess at each key runs at once, alone',
  );
  release?.();
  t.same(await first, { result: 1, size: 1, index: 0 });
  t.same(
    await Promise.all(queued),
    [0, 1, 2].map((index) => ({ result: 3, size: 3, index })),
    'the guesses that waited are one statement of three, in arrival order',
  );
  t.same(await other, { result: 2, size: 1, index: 0 });
  t.equal(batches.keysInFlight, 0, 'nothing is left in flight');
  const failing = [batches.submit('fails'), batches.submit('fails')];
  await t.rejects(failing[0] as Promise<unknown>, /statement failed/, 'a failed statement fails its guesses');
  await t.rejects(failing[1] as Promise<unknown>, /statement failed/, 'the next statement still runs');
  t.same(await batches.submit('a'), { result: 6, size: 1, index: 0 }, 'and the key works again');
});

t.test('housekeeping deletes expired codes and tokens, never a verification row', async (t) => {
  const s = await setup(t);
  const email = await insertUser(s.db, newEmail('housekeeping'), false).then(async (id) => {
    const { rows } = await sql<{ email: string }>`select email from users where id = ${id}`.execute(s.db);
    return rows[0]?.email ?? '';
  });
  for (const purpose of ['verification', 'sign_in', 'password_reset'] as const) await plant(s, purpose, email, CODE);
  const later = new Date(s.clock.now().getTime() + 2 * 3_600_000);
  const live = new Date(later.getTime() + 3_600_000);
  await sql`insert into one_time_codes (purpose, email, user_id, token_hash, token_expires_at, created_at)
    select 'password_reset_token', email, id, ${sha256Hex('live')}, ${live}, now() from users where email = ${email}`.execute(
    s.db,
  );
  t.equal(await deleteExpiredCodes(s.db, later), 2, 'the expired sign-in and reset codes');
  const { rows } = await sql<{ purpose: string }>`
    select purpose from one_time_codes where email = ${email} order by purpose`.execute(s.db);
  t.same(
    rows.map((r) => r.purpose),
    ['password_reset_token', 'verification'],
    'the live token and the verification row stay',
  );
});

t.test('consuming a code reads its own account only, however many accounts there are', async (t) => {
  const s = await setup(t);
  await sql`insert into users (email, password_hash, email_verified)
    select 'many-' || n || '@example.com', null, true from generate_series(1, 2000) n`.execute(s.db);
  await sql`analyze users`.execute(s.db);
  const email = newEmail('consume-plan');
  await insertUser(s.db, email, false);
  await plant(s, 'verification', email, CODE);
  const { rows } = await sql<OneTimeCodeRow>`select * from one_time_codes where email = ${email}`.execute(s.db);
  const row = rows[0] as OneTimeCodeRow;

  // The plan as executed (in a transaction rolled back): a filter on `users` built from every
  // account (a hashed subquery over the whole table) reads thousands of rows per code.
  let usersRead = 0;
  await s.db
    .transaction()
    .execute(async (trx) => {
      const { rows: plan } = await sql<{ 'QUERY PLAN': unknown }>`
        explain (analyze, format json) ${consumeStatement(trx, row, s.clock.now())}`.execute(trx);
      const walk = (node: PlanNode) => {
        if (node['Relation Name'] === 'users') usersRead += (node['Actual Rows'] ?? 0) * (node['Actual Loops'] ?? 1);
        for (const child of node.Plans ?? []) walk(child);
      };
      const json = plan[0]?.['QUERY PLAN'];
      const root = (typeof json === 'string' ? JSON.parse(json) : json) as { Plan: PlanNode }[];
      walk(root[0]?.Plan as PlanNode);
      throw new RolledBack();
    })
    .catch((err: unknown) => {
      if (!(err instanceof RolledBack)) throw err;
    });
  t.ok(usersRead <= 1, `rows of users read to consume one code: ${usersRead}`);
});

interface PlanNode {
  'Relation Name'?: string;
  'Actual Rows'?: number;
  'Actual Loops'?: number;
  Plans?: PlanNode[];
}
class RolledBack extends Error {}
