import { type Selectable, sql } from 'kysely';
import type { EmailCodePurpose, Executor, OneTimeCodePurpose, OneTimeCodesTable } from '../schema.ts';
import { addressClaim, addressLock, type EmailClaimant, type EmailLimits } from './address-limits.ts';

export type OneTimeCodeRow = Selectable<OneTimeCodesTable>;

/** A fresh code and link token as stored: the code's HMAC, the token's SHA-256, their expiries. */
export interface StoredSecret {
  codeHmac: string;
  codeExpiresAt: Date;
  tokenHash: string;
  tokenExpiresAt: Date;
}

const DAY_MS = 24 * 3600 * 1000;

/**
 * What was emailed (codes and links) and what they led to: what a new password or a disabled
 * account voids. Not the recovery codes: they belong to the second factors, which stay.
 */
export const EMAILED_PURPOSES: readonly OneTimeCodePurpose[] = [
  'verification',
  'sign_in',
  'password_reset',
  'password_reset_token',
];

/** The index predicate of one_time_codes_address_idx: the purposes with one live row per address. */
const ONE_PER_ADDRESS = sql<boolean>`purpose in ('verification', 'sign_in', 'password_reset')`;

/** The columns a new verification issuance sets: its code and link, attempts back to 0, not consumed. */
function verificationIssuance(issued: StoredSecret, now: Date) {
  return {
    code_hmac: issued.codeHmac,
    token_hash: issued.tokenHash,
    code_expires_at: issued.codeExpiresAt,
    token_expires_at: issued.tokenExpiresAt,
    failed_attempts: 0,
    consumed_at: null,
    created_at: now,
  };
}
type Issuance = ReturnType<typeof verificationIssuance>;
const ISSUANCE_COLUMNS = Object.keys(verificationIssuance({} as StoredSecret, new Date(0))) as (keyof Issuance)[];

/**
 * `select users.id, users.email, 'verification', <the issuance's values>` for the account with this
 * address when it is unverified (or, with `passwordless`, also when it is verified but has no password).
 */
function selectVerificationFor(db: Executor, email: string, fields: Issuance, passwordless = false) {
  return db
    .selectFrom('users')
    .select((eb) => [
      'id',
      'email',
      sql<OneTimeCodePurpose>`'verification'`.as('purpose'),
      ...ISSUANCE_COLUMNS.map((column) => eb.val(fields[column]).as(column)),
    ])
    .where('email', '=', email)
    .where((eb) =>
      passwordless
        ? eb.or([eb('email_verified', '=', false), eb('password_hash', 'is', null)])
        : eb('email_verified', '=', false),
    );
}

const VERIFICATION_COLUMNS = ['user_id', 'email', 'purpose', ...ISSUANCE_COLUMNS] as const;

/**
 * Records a sign-up for an unverified account (nothing happens for a verified one: the statement
 * runs all the same, so that both cost the same). The first sign-up's password waits for the
 * verification; a later sign-up before verification marks the address contested, which clears
 * the pending password for good. With `fresh` (an email will go out) the code and link are
 * replaced; without it (the cooldown or the daily cap said no) they stay as they were, and an
 * account that had none gets an unusable pair, so that a later re-send has a row to replace.
 * Returns the account's id and whether it is now contested, when the account is unverified.
 */
export async function recordSignUp(
  db: Executor,
  s: {
    email: string;
    passwordHash: string;
    /** SHA-256 of the binding handed to this sign-up's client (see sign-up-binding.ts). */
    bindingHash: string;
    fresh: StoredSecret | undefined;
    unusable: StoredSecret;
    now: Date;
  },
): Promise<{ userId: string; contested: boolean } | undefined> {
  const fields = verificationIssuance(s.fresh ?? s.unusable, s.now);
  const row = await db
    .insertInto('one_time_codes')
    .columns([...VERIFICATION_COLUMNS, 'pending_password_hash', 'contested', 'binding_hash'])
    .expression(
      selectVerificationFor(db, s.email, fields).select([
        // An account that already holds a password was signed up for without verification
        // (REQUIRE_EMAIL_VERIFICATION=false at the time): that sign-up competes too.
        sql<string | null>`case when users.password_hash is null then ${s.passwordHash} end`.as(
          'pending_password_hash',
        ),
        sql<boolean>`users.password_hash is not null`.as('contested'),
        sql<string>`${s.bindingHash}`.as('binding_hash'),
      ]),
    )
    .onConflict((oc) =>
      oc
        .columns(['email', 'purpose'])
        .where(ONE_PER_ADDRESS)
        .doUpdateSet({
          // Any earlier sign-up (pending, or already contested) makes this one a competitor.
          contested: sql<boolean>`one_time_codes.contested or one_time_codes.pending_password_hash is not null or excluded.contested`,
          pending_password_hash: sql<string | null>`case
            when one_time_codes.contested or one_time_codes.pending_password_hash is not null
              or excluded.contested then null
            else excluded.pending_password_hash end`,
          // A contested sign-up activates no password, so its binding proves nothing more.
          binding_hash: sql<string>`excluded.binding_hash`,
          ...(s.fresh === undefined ? {} : fields),
        })
        // A row consumed since this statement's snapshot read the account as unverified: the
        // account has just been verified, so this sign-up records nothing (as for a verified one).
        .where('one_time_codes.consumed_at', 'is', null),
    )
    .returning(['user_id', 'contested'])
    .executeTakeFirst();
  return row?.user_id == null ? undefined : { userId: row.user_id, contested: row.contested };
}

/**
 * Claims an email to the address (the address's budget, see addressClaim) and, when granted,
 * replaces the code and link of the unverified account with this address (voiding the earlier
 * ones), keeping its pending sign-up. A verified account without a password (competing sign-ups
 * left it none) gets one too: its code or link signs its owner in, so that losing the session
 * before choosing a password locks nobody out. One statement, so one round trip and one commit,
 * whatever the address. Says whether the claim was granted and, when an account qualified, its id
 * and whether it is contested (nothing is written to the codes otherwise).
 */
export async function claimAndReissueVerification(
  db: Executor,
  email: string,
  claimant: EmailClaimant,
  limits: EmailLimits,
  issued: StoredSecret,
  now: Date,
): Promise<{ claimed: boolean; issued: { userId: string; contested: boolean } | undefined }> {
  const fields = verificationIssuance(issued, now);
  const reissue = db
    .insertInto('one_time_codes')
    .columns(VERIFICATION_COLUMNS)
    .expression(selectVerificationFor(db, email, fields, true).where(sql<boolean>`exists (select 1 from claimed)`))
    .onConflict((oc) => oc.columns(['email', 'purpose']).where(ONE_PER_ADDRESS).doUpdateSet(fields))
    .returning(['user_id', 'contested']);
  const claim = addressClaim(email, claimant, now, limits);
  const { rows } = await sql<{ claimed: boolean; user_id: string | null; contested: boolean | null }>`
    with ${claim.claimed}, issued as (${reissue})
    ${claim.requesterShare}
    returning exists (select 1 from claimed) as claimed, (select user_id from issued) as user_id,
      (select contested from issued) as contested
  `.execute(db);
  const row = rows[0];
  return {
    claimed: row?.claimed === true,
    issued: row?.user_id == null ? undefined : { userId: row.user_id, contested: row.contested === true },
  };
}

/** The columns a new sign-in or reset code sets on conflict: its HMAC and expiry, attempts back to 0, not consumed. */
const REISSUE = {
  user_id: sql<string | null>`excluded.user_id`,
  code_hmac: sql<string>`excluded.code_hmac`,
  code_expires_at: sql<Date>`excluded.code_expires_at`,
  failed_attempts: 0,
  consumed_at: null,
  created_at: sql<Date>`excluded.created_at`,
};

const CODE_COLUMNS = [
  'email',
  'purpose',
  'user_id',
  'code_hmac',
  'code_expires_at',
  'failed_attempts',
  'consumed_at',
  'created_at',
] as const;

/**
 * Stores a sign-in code for an address (replacing, and so voiding, the one before) unless the
 * address belongs to a disabled account, or it has no account and `allowNewAccounts` is false.
 * One statement whatever the address, writing a row or none. Returns whether a code was stored
 * (an email may go out).
 */
export async function issueSignInCode(
  db: Executor,
  email: string,
  code: Pick<StoredSecret, 'codeHmac' | 'codeExpiresAt'>,
  allowNewAccounts: boolean,
  now: Date,
): Promise<boolean> {
  const row = await db
    .insertInto('one_time_codes')
    .columns(CODE_COLUMNS)
    .expression(
      db
        .selectNoFrom((eb) => [
          eb.val(email).as('email'),
          sql<OneTimeCodePurpose>`'sign_in'`.as('purpose'),
          sql<string | null>`null::uuid`.as('user_id'),
          eb.val(code.codeHmac).as('code_hmac'),
          eb.val(code.codeExpiresAt).as('code_expires_at'),
          sql<number>`0`.as('failed_attempts'),
          sql<Date | null>`null::timestamptz`.as('consumed_at'),
          eb.val(now).as('created_at'),
        ])
        .where((w) =>
          w.and([
            w.not(
              w.exists(
                w.selectFrom('users').select('id').where('email', '=', email).where('disabled_at', 'is not', null),
              ),
            ),
            w.or([
              sql<boolean>`${allowNewAccounts}::boolean`,
              w.exists(w.selectFrom('users').select('id').where('email', '=', email)),
            ]),
          ]),
        ),
    )
    .onConflict((oc) => oc.columns(['email', 'purpose']).where(ONE_PER_ADDRESS).doUpdateSet(REISSUE))
    .returning('email')
    .executeTakeFirst();
  return row !== undefined;
}

/**
 * Stores a password-reset code and link token for the account with this address unless there is
 * none or it is disabled, voiding the code and link sent before. The same three statements run
 * for every address. Returns the account's id when a code was stored (an email may go out).
 */
export async function issueResetCode(
  db: Executor,
  email: string,
  issued: StoredSecret,
  now: Date,
): Promise<string | undefined> {
  const eligible = db.selectFrom('users').where('email', '=', email).where('disabled_at', 'is', null);
  const row = await db
    .insertInto('one_time_codes')
    .columns(CODE_COLUMNS)
    .expression(
      eligible.select((eb) => [
        'email',
        sql<OneTimeCodePurpose>`'password_reset'`.as('purpose'),
        'id',
        eb.val(issued.codeHmac).as('code_hmac'),
        eb.val(issued.codeExpiresAt).as('code_expires_at'),
        sql<number>`0`.as('failed_attempts'),
        sql<Date | null>`null::timestamptz`.as('consumed_at'),
        eb.val(now).as('created_at'),
      ]),
    )
    .onConflict((oc) => oc.columns(['email', 'purpose']).where(ONE_PER_ADDRESS).doUpdateSet(REISSUE))
    .returning('user_id')
    .executeTakeFirst();
  // The link sent before is void, and so is any token exchanged for its code: one live reset per account.
  await db
    .deleteFrom('one_time_codes')
    .where('purpose', '=', 'password_reset_token')
    .where('user_id', 'in', (eb) => eb.selectFrom('users').select('id').where('email', '=', email))
    .execute();
  await db
    .insertInto('one_time_codes')
    .columns(['purpose', 'email', 'user_id', 'token_hash', 'token_expires_at', 'created_at'])
    .expression(
      eligible.select((eb) => [
        sql<OneTimeCodePurpose>`'password_reset_token'`.as('purpose'),
        'email',
        'id',
        eb.val(issued.tokenHash).as('token_hash'),
        eb.val(issued.tokenExpiresAt).as('token_expires_at'),
        eb.val(now).as('created_at'),
      ]),
    )
    .execute();
  return row?.user_id ?? undefined;
}

/**
 * `attempts` code attempts at an address (the guesses that arrived together, see
 * src/auth/attempt-batches.ts), in one statement (its row locks held only while it runs, so that
 * guesses at one address do not queue behind each other's round trips):
 * - the address's unused code of `purpose` has its count raised by `attempts` before it is
 *   compared, so that concurrent guesses cannot share one attempt; the code is returned as it is
 *   after the count (guess i of the batch, from 1, is attempt `failed_attempts - attempts + i`);
 * - when there is no such code, one row of `code_attempt_misses` is written instead, so that an
 *   attempt at any address writes the same number of rows with the same statement;
 * - the attempts are counted in the address's daily window (over every purpose; the row the email
 *   limits keep, see address-limits.ts), and `addressAttempts` is how many it has had. Only guesses
 *   at a live code count: guesses where there is none cannot succeed, and counting them let a
 *   stranger use up the address's allowance and so refuse the owner's next right code.
 *
 * The address's lock (addressLock) is taken first, as every email sent to the address takes it
 * before its claim and its code: otherwise a guess holding the code's row and a send holding the
 * address's row could each wait for the other until PostgreSQL failed one of them. A guess that
 * waited for a send counts at the code the send wrote.
 */
export async function recordCodeAttempt(
  db: Executor,
  purpose: EmailCodePurpose,
  email: string,
  now: Date,
  attempts = 1,
): Promise<{ row: OneTimeCodeRow | undefined; addressAttempts: number }> {
  const dayAgo = new Date(now.getTime() - DAY_MS);
  // The count is the statement itself (an INSERT, whose row is written whatever the address), and
  // the code comes back with it as JSON: RETURNING names only the inserted row's columns. `address`
  // runs first: the code's UPDATE asks for its result.
  const result = await sql<{ address_attempts: number; code: Record<string, unknown> | null }>`
    with address as (
      select ${addressLock(email)}
    ), taken as (
      update one_time_codes set failed_attempts = failed_attempts + ${attempts}::int
      where email = ${email} and purpose = ${purpose} and code_hmac is not null and consumed_at is null
        and (select count(*) from address) >= 0
      returning *
    ), missed as (
      insert into code_attempt_misses as m (email, purpose, attempts, last_attempt_at)
      select ${email}, ${purpose}, ${attempts}::int, ${now} where not exists (select 1 from taken)
      on conflict (email, purpose) do update set attempts = m.attempts + excluded.attempts, last_attempt_at = excluded.last_attempt_at
    )
    insert into email_send_log as l (email, last_sent_at, window_started_at, sent_in_window, code_attempts_in_window)
    values (${email}, to_timestamp(0), ${now}, 0,
      coalesce((select ${attempts}::int from taken where code_expires_at > ${now} limit 1), 0))
    on conflict (email) do update set
      window_started_at = case when l.window_started_at <= ${dayAgo} then excluded.window_started_at else l.window_started_at end,
      sent_in_window = case when l.window_started_at <= ${dayAgo} then 0 else l.sent_in_window end,
      code_attempts_in_window = case when l.window_started_at <= ${dayAgo} then excluded.code_attempts_in_window
        else l.code_attempts_in_window + excluded.code_attempts_in_window end
    returning code_attempts_in_window as address_attempts, (select to_jsonb(taken) from taken limit 1) as code
  `.execute(db);
  const first = result.rows[0];
  const code = first?.code ?? null;
  return {
    row: code === null ? undefined : codeRowFromJson(code),
    addressAttempts: Number(first?.address_attempts ?? 0),
  };
}

/** The timestamp columns of one_time_codes, which JSON carries as text. */
const CODE_TIMESTAMPS = ['code_expires_at', 'token_expires_at', 'consumed_at', 'created_at'] as const;

/** A row of one_time_codes from its `to_jsonb`, with its timestamps as Dates again. */
function codeRowFromJson(json: Record<string, unknown>): OneTimeCodeRow {
  const row = { ...json };
  for (const column of CODE_TIMESTAMPS) {
    const value = row[column];
    if (typeof value === 'string') row[column] = new Date(value);
  }
  return row as unknown as OneTimeCodeRow;
}

/** The row of `purpose` whose token has this SHA-256, used or not, live or not. */
export async function findByTokenHash(
  db: Executor,
  purpose: OneTimeCodePurpose,
  tokenHash: string,
): Promise<OneTimeCodeRow | undefined> {
  return db
    .selectFrom('one_time_codes')
    .selectAll()
    .where('purpose', '=', purpose)
    .where('token_hash', '=', tokenHash)
    .executeTakeFirst();
}

/**
 * Consumes exactly this issuance (its code and its token), if it is still unused and its account,
 * if it has one, is not disabled. Of any number of concurrent callers, one gets the row: the
 * condition and the write are one atomic UPDATE. Returns the row as consumed (a verification's
 * pending sign-up as it is now).
 */
export async function consume(db: Executor, row: OneTimeCodeRow, now: Date): Promise<OneTimeCodeRow | undefined> {
  return consumeStatement(db, row, now).executeTakeFirst();
}

/** The statement of `consume` (its plan is tested: one account row read per code). */
export function consumeStatement(db: Executor, row: OneTimeCodeRow, now: Date) {
  return db
    .updateTable('one_time_codes')
    .set({ consumed_at: now })
    .where('id', '=', row.id)
    .where('purpose', '=', row.purpose)
    .where('email', '=', row.email)
    .where('code_hmac', 'is not distinct from', row.code_hmac)
    .where('token_hash', 'is not distinct from', row.token_hash)
    .where('consumed_at', 'is', null)
    .where((eb) =>
      eb.or([
        eb('user_id', 'is', null),
        // Correlated (one index lookup): `user_id in (select id from users ...)` under an OR is
        // planned as a hash of every account, built for each code consumed.
        eb.exists(
          eb
            .selectFrom('users')
            .select(sql`1`.as('one'))
            .whereRef('users.id', '=', 'one_time_codes.user_id')
            .where('users.disabled_at', 'is', null),
        ),
      ]),
    )
    .returningAll();
}

/** Stores a token of its own (one handed out for a right reset code), as SHA-256. */
export async function insertToken(
  db: Executor,
  token: {
    purpose: OneTimeCodePurpose;
    email: string;
    userId: string;
    tokenHash: string;
    expiresAt: Date;
    now: Date;
  },
): Promise<void> {
  await db
    .insertInto('one_time_codes')
    .values({
      purpose: token.purpose,
      email: token.email,
      user_id: token.userId,
      code_hmac: null,
      code_expires_at: null,
      token_hash: token.tokenHash,
      token_expires_at: token.expiresAt,
      created_at: token.now,
    })
    .execute();
}

/**
 * Takes (deletes) a live token of `purpose`: single use, since of concurrent callers only the one
 * whose DELETE finds the row gets it. Returns the account it belongs to.
 */
export async function takeToken(
  db: Executor,
  purpose: OneTimeCodePurpose,
  tokenHash: string,
  now: Date,
): Promise<{ user_id: string | null } | undefined> {
  return db
    .deleteFrom('one_time_codes')
    .where('purpose', '=', purpose)
    .where('token_hash', '=', tokenHash)
    .where('token_expires_at', '>', now)
    .returning('user_id')
    .executeTakeFirst();
}

/**
 * Deletes the account's codes and tokens of the given purposes (a verification's pending sign-up
 * with it), and the address's sign-in code when `sign_in` is among them.
 */
export async function deleteAccountCodes(
  db: Executor,
  account: { id: string; email: string },
  purposes: readonly OneTimeCodePurpose[] = EMAILED_PURPOSES,
): Promise<void> {
  await db
    .deleteFrom('one_time_codes')
    .where('purpose', 'in', purposes)
    .where((eb) => eb.or([eb('user_id', '=', account.id), eb('email', '=', account.email)]))
    .execute();
}

/**
 * Forgets the pending sign-up of a consumed verification (its password and binding): once the
 * mailbox is proven, a later code or link of this row (a re-send to an account without a password)
 * must never bring that password back.
 */
export async function forgetPendingSignUp(db: Executor, verification: OneTimeCodeRow): Promise<void> {
  // By the row's key: a lookup by account and purpose is planned as a bitmap AND with the index
  // of every verification row while the table's statistics are behind a bulk of sign-ups.
  await db
    .updateTable('one_time_codes')
    .set({ pending_password_hash: null, binding_hash: null })
    .where('id', '=', verification.id)
    .execute();
}

/**
 * Deletes the codes and tokens that have expired (but not verification rows, which hold their
 * account's pending sign-up), and the records of attempts without a code a day old. A code that a
 * flow holds is left for the next sweep: the sweep never waits, so it can never hold a code that
 * flow waits for (flows at one address keep one order, addressLock; the sweep spans addresses).
 */
export async function deleteExpiredCodes(db: Executor, now: Date): Promise<number> {
  const codes = await db
    .deleteFrom('one_time_codes')
    .where('id', 'in', (eb) =>
      eb
        .selectFrom('one_time_codes')
        .select('id')
        .where(sql<boolean>`purpose <> 'verification'`)
        .where(sql<boolean>`greatest(code_expires_at, token_expires_at) <= ${now}`)
        .forUpdate()
        .skipLocked(),
    )
    .executeTakeFirst();
  const misses = await db
    .deleteFrom('code_attempt_misses')
    .where('last_attempt_at', '<=', new Date(now.getTime() - DAY_MS))
    .executeTakeFirst();
  return Number(codes.numDeletedRows) + Number(misses.numDeletedRows);
}

/** When recovery codes stop working by themselves: never, in practice (they are replaced or used). */
const RECOVERY_CODES_EXPIRE = new Date('2200-01-01T00:00:00Z');

/** Replaces an account's recovery codes with these (their HMACs). */
export async function replaceRecoveryCodes(
  db: Executor,
  account: { id: string; email: string },
  hmacs: readonly string[],
  now: Date,
): Promise<void> {
  await db.deleteFrom('one_time_codes').where('purpose', '=', 'recovery').where('user_id', '=', account.id).execute();
  if (hmacs.length === 0) return;
  await db
    .insertInto('one_time_codes')
    .values(
      hmacs.map((hmac) => ({
        purpose: 'recovery' as const,
        email: account.email,
        user_id: account.id,
        code_hmac: hmac,
        code_expires_at: RECOVERY_CODES_EXPIRE,
        created_at: now,
      })),
    )
    .execute();
}

/**
 * Uses an unused recovery code of the account (by its HMAC): one atomic UPDATE, so that of two
 * requests with the same code exactly one gets it. True when this call used it.
 */
export async function useRecoveryCode(db: Executor, userId: string, hmac: string, now: Date): Promise<boolean> {
  const row = await db
    .updateTable('one_time_codes')
    .set({ consumed_at: now })
    .where('purpose', '=', 'recovery')
    .where('user_id', '=', userId)
    .where('code_hmac', '=', hmac)
    .where('consumed_at', 'is', null)
    .returning('id')
    .executeTakeFirst();
  return row !== undefined;
}

/** A WebAuthn challenge as stored: its HMAC, when it ends, the session it is bound to (if any). */
export interface StoredChallenge {
  challengeHmac: string;
  expiresAt: Date;
  sessionId: string | null;
}

/** A challenge row's values, as `select`ed constants. */
function challengeValues(
  db: Executor,
  purpose: OneTimeCodePurpose,
  row: { email: string; userId: string | null; idHash: string | null; now: Date } & StoredChallenge,
) {
  return db.selectNoFrom((eb) => [
    eb.val(purpose).as('purpose'),
    eb.val(row.email).as('email'),
    eb.val(row.userId).as('user_id'),
    eb.val(row.sessionId).as('session_id'),
    eb.val(row.challengeHmac).as('code_hmac'),
    eb.val(row.expiresAt).as('code_expires_at'),
    eb.val(row.idHash).as('token_hash'),
    eb.val(row.idHash === null ? null : row.expiresAt).as('token_expires_at'),
    eb.val(row.now).as('created_at'),
  ]);
}

const CHALLENGE_COLUMNS = [
  'purpose',
  'email',
  'user_id',
  'session_id',
  'code_hmac',
  'code_expires_at',
  'token_hash',
  'token_expires_at',
  'created_at',
] as const;

/**
 * Inserts a challenge; one bound to a session only while that session is live (read FOR SHARE, so
 * that it cannot end meanwhile). False when the session is not.
 */
async function insertChallenge(
  db: Executor,
  purpose: OneTimeCodePurpose,
  row: { email: string; userId: string | null; idHash: string | null; now: Date } & StoredChallenge,
): Promise<boolean> {
  const values = challengeValues(db, purpose, row);
  const source =
    row.sessionId === null
      ? values
      : values.where((eb) =>
          eb.exists(
            eb
              .selectFrom('sessions')
              .select('id')
              .where('id', '=', row.sessionId as string)
              .where('revoked_at', 'is', null)
              .forShare(),
          ),
        );
  const inserted = await db
    .insertInto('one_time_codes')
    .columns(CHALLENGE_COLUMNS)
    .expression(source)
    .returning('id')
    .executeTakeFirst();
  return inserted !== undefined;
}

/**
 * Stores a registration challenge for a live session, replacing the session's earlier one (one
 * ceremony at a time per session). False when the session is not live. Run it in a transaction:
 * the account's row is held first (KEY SHARE, the lock its foreign key takes anyway), then the
 * session (FOR SHARE), the order of every flow that locks an account and then ends its sessions;
 * the other way round, one of them waited for the other's row until PostgreSQL failed it.
 */
export async function replaceRegistrationChallenge(
  db: Executor,
  account: { id: string; email: string },
  challenge: StoredChallenge & { sessionId: string },
  now: Date,
): Promise<boolean> {
  await db.selectFrom('users').select('id').where('id', '=', account.id).forKeyShare().execute();
  await db
    .deleteFrom('one_time_codes')
    .where('purpose', '=', 'passkey_registration')
    .where('session_id', '=', challenge.sessionId)
    .execute();
  return insertChallenge(db, 'passkey_registration', {
    ...challenge,
    email: account.email,
    userId: account.id,
    idHash: null,
    now,
  });
}

/**
 * Takes (deletes) the session's registration challenge, expired or not: single use whatever the
 * outcome. Returns it, for the caller to compare and check its expiry.
 */
export async function takeRegistrationChallenge(
  db: Executor,
  sessionId: string,
): Promise<{ code_hmac: string | null; code_expires_at: Date | null } | undefined> {
  return db
    .deleteFrom('one_time_codes')
    .where('purpose', '=', 'passkey_registration')
    .where('session_id', '=', sessionId)
    .returning(['code_hmac', 'code_expires_at'])
    .executeTakeFirst();
}

/**
 * Stores an authentication challenge, found later by the SHA-256 of its id; one bound to a session
 * only while it is live (false otherwise). A discoverable sign-in names no address: its row's
 * `email` is empty.
 */
export async function insertAuthenticationChallenge(
  db: Executor,
  challenge: StoredChallenge & { idHash: string; email: string },
  now: Date,
): Promise<boolean> {
  return insertChallenge(db, 'passkey_authentication', { ...challenge, userId: null, now });
}

/** Takes (deletes) an authentication challenge by its id's SHA-256, expired or not: single use. */
export async function takeAuthenticationChallenge(
  db: Executor,
  idHash: string,
): Promise<{ code_hmac: string | null; code_expires_at: Date | null; session_id: string | null } | undefined> {
  return db
    .deleteFrom('one_time_codes')
    .where('purpose', '=', 'passkey_authentication')
    .where('token_hash', '=', idHash)
    .returning(['code_hmac', 'code_expires_at', 'session_id'])
    .executeTakeFirst();
}
