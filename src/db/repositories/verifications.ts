import { type Selectable, sql } from 'kysely';
import type { EmailVerificationsTable, Executor } from '../schema.ts';

export type VerificationRow = Selectable<EmailVerificationsTable>;

/** A fresh code and link: what a verification email carries, as stored. */
export interface IssuedCode {
  codeHmac: string;
  tokenHash: string;
  codeExpiresAt: Date;
  tokenExpiresAt: Date;
}

/** The columns a new issuance sets: its code and link, attempts back to 0, not consumed. */
function issuance(issued: IssuedCode, now: Date) {
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
type Issuance = ReturnType<typeof issuance>;
const ISSUANCE_COLUMNS = Object.keys(issuance({} as IssuedCode, new Date(0))) as (keyof Issuance)[];

/**
 * `select users.id, <the issuance's values>` for the account with this address when it is
 * unverified (or, with `passwordless`, also when it is verified but has no password).
 */
function selectIssuanceFor(db: Executor, email: string, fields: Issuance, passwordless = false) {
  return db
    .selectFrom('users')
    .select((eb) => ['id', ...ISSUANCE_COLUMNS.map((column) => eb.val(fields[column]).as(column))])
    .where('email', '=', email)
    .where((eb) =>
      passwordless
        ? eb.or([eb('email_verified', '=', false), eb('password_hash', 'is', null)])
        : eb('email_verified', '=', false),
    );
}

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
    fresh: IssuedCode | undefined;
    unusable: IssuedCode;
    now: Date;
  },
): Promise<{ userId: string; contested: boolean } | undefined> {
  const fields = issuance(s.fresh ?? s.unusable, s.now);
  const row = await db
    .insertInto('email_verifications')
    .columns(['user_id', ...ISSUANCE_COLUMNS, 'pending_password_hash', 'contested', 'binding_hash'])
    .expression(
      selectIssuanceFor(db, s.email, fields).select([
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
      oc.column('user_id').doUpdateSet({
        // Any earlier sign-up (pending, or already contested) makes this one a competitor.
        contested: sql<boolean>`email_verifications.contested or email_verifications.pending_password_hash is not null or excluded.contested`,
        pending_password_hash: sql<string | null>`case
          when email_verifications.contested or email_verifications.pending_password_hash is not null
            or excluded.contested then null
          else excluded.pending_password_hash end`,
        // A contested sign-up activates no password, so its binding proves nothing more.
        binding_hash: sql<string>`excluded.binding_hash`,
        ...(s.fresh === undefined ? {} : fields),
      }),
    )
    .returning(['user_id', 'contested'])
    .executeTakeFirst();
  return row === undefined ? undefined : { userId: row.user_id, contested: row.contested };
}

/**
 * Replaces the code and link of the unverified account with this address (voiding the earlier
 * ones), keeping its pending sign-up. A verified account without a password (competing sign-ups
 * left it none) gets one too: its code or link signs its owner in, so that losing the session
 * before choosing a password locks nobody out. Returns the account's id and whether it is
 * contested, or undefined when no account qualifies (nothing is written then).
 */
export async function reissueVerification(
  db: Executor,
  email: string,
  issued: IssuedCode,
  now: Date,
): Promise<{ userId: string; contested: boolean } | undefined> {
  const fields = issuance(issued, now);
  const row = await db
    .insertInto('email_verifications')
    .columns(['user_id', ...ISSUANCE_COLUMNS])
    .expression(selectIssuanceFor(db, email, fields, true))
    .onConflict((oc) => oc.column('user_id').doUpdateSet(fields))
    .returning(['user_id', 'contested'])
    .executeTakeFirst();
  return row === undefined ? undefined : { userId: row.user_id, contested: row.contested };
}

/**
 * Takes one attempt of the code of the address's live verification, atomically: the count goes up
 * before the code is compared, so concurrent guesses cannot share one attempt. Returns the
 * verification as it is after the count (undefined when the address has no live verification).
 */
export async function takeCodeAttempt(db: Executor, email: string): Promise<VerificationRow | undefined> {
  return db
    .updateTable('email_verifications')
    .set({ failed_attempts: sql`failed_attempts + 1` })
    .where('user_id', '=', (eb) => eb.selectFrom('users').select('id').where('email', '=', email))
    .where('consumed_at', 'is', null)
    .returningAll()
    .executeTakeFirst();
}

export async function findVerificationByTokenHash(
  db: Executor,
  tokenHash: string,
): Promise<VerificationRow | undefined> {
  return db.selectFrom('email_verifications').selectAll().where('token_hash', '=', tokenHash).executeTakeFirst();
}

/**
 * Consumes exactly this issuance of the verification, if it is still live. Of any number of
 * concurrent callers, one gets true: the condition and the write are one atomic UPDATE. Returns
 * the consumed row (its pending password and whether it was contested, as they are now).
 */
export async function consumeVerification(
  db: Executor,
  v: VerificationRow,
  now: Date,
): Promise<VerificationRow | undefined> {
  return db
    .updateTable('email_verifications')
    .set({ consumed_at: now })
    .where('user_id', '=', v.user_id)
    .where('token_hash', '=', v.token_hash)
    .where('consumed_at', 'is', null)
    .returningAll()
    .executeTakeFirst();
}

/** Deletes every verification of an account (its pending sign-ups with them). */
export async function deleteVerifications(db: Executor, userId: string): Promise<void> {
  await db.deleteFrom('email_verifications').where('user_id', '=', userId).execute();
}

/**
 * Forgets the pending sign-up of a consumed verification (its password and binding): once the
 * mailbox is proven, a later code or link of this row (a re-send to an account without a password)
 * must never bring that password back.
 */
export async function forgetPendingSignUp(db: Executor, userId: string): Promise<void> {
  await db
    .updateTable('email_verifications')
    .set({ pending_password_hash: null, binding_hash: null })
    .where('user_id', '=', userId)
    .execute();
}
