import { type Selectable, sql } from 'kysely';
import type { CodeAttemptMissesTable, EmailCodePurpose, EmailCodesTable, Executor } from '../schema.ts';

export type EmailCodeRow = Selectable<EmailCodesTable>;

/** A code as stored: its HMAC and when it stops working. */
export interface StoredCode {
  codeHmac: string;
  expiresAt: Date;
}

/** The columns a new code sets on conflict: its HMAC and expiry, attempts back to 0, not consumed. */
const REISSUE = {
  user_id: sql<string | null>`excluded.user_id`,
  code_hmac: sql<string>`excluded.code_hmac`,
  expires_at: sql<Date>`excluded.expires_at`,
  failed_attempts: 0,
  consumed_at: null,
  created_at: sql<Date>`excluded.created_at`,
};

/**
 * Stores a sign-in code for an address (replacing, and so voiding, the one before) unless the
 * address belongs to a disabled account, or it has no account and `allowNewAccounts` is false.
 * One statement whatever the address, writing a row or none. Returns whether a code was stored
 * (an email may go out).
 */
export async function issueSignInCode(
  db: Executor,
  email: string,
  code: StoredCode,
  allowNewAccounts: boolean,
  now: Date,
): Promise<boolean> {
  const row = await db
    .insertInto('email_codes')
    .columns(['email', 'purpose', 'user_id', 'code_hmac', 'expires_at', 'failed_attempts', 'consumed_at', 'created_at'])
    .expression(
      db
        .selectNoFrom((eb) => [
          eb.val(email).as('email'),
          sql<EmailCodePurpose>`'sign_in'`.as('purpose'),
          sql<string | null>`null::uuid`.as('user_id'),
          eb.val(code.codeHmac).as('code_hmac'),
          eb.val(code.expiresAt).as('expires_at'),
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
    .onConflict((oc) => oc.columns(['email', 'purpose']).doUpdateSet(REISSUE))
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
  code: StoredCode,
  link: { tokenHash: string; expiresAt: Date },
  now: Date,
): Promise<string | undefined> {
  const eligible = db.selectFrom('users').where('email', '=', email).where('disabled_at', 'is', null);
  const row = await db
    .insertInto('email_codes')
    .columns(['email', 'purpose', 'user_id', 'code_hmac', 'expires_at', 'failed_attempts', 'consumed_at', 'created_at'])
    .expression(
      eligible.select((eb) => [
        'email',
        sql<EmailCodePurpose>`'password_reset'`.as('purpose'),
        'id',
        eb.val(code.codeHmac).as('code_hmac'),
        eb.val(code.expiresAt).as('expires_at'),
        sql<number>`0`.as('failed_attempts'),
        sql<Date | null>`null::timestamptz`.as('consumed_at'),
        eb.val(now).as('created_at'),
      ]),
    )
    .onConflict((oc) => oc.columns(['email', 'purpose']).doUpdateSet(REISSUE))
    .returning('user_id')
    .executeTakeFirst();
  // The link sent before is void, and so is any token exchanged for its code: one live reset per account.
  await db
    .deleteFrom('password_reset_tokens')
    .where('user_id', 'in', (eb) => eb.selectFrom('users').select('id').where('email', '=', email))
    .execute();
  await db
    .insertInto('password_reset_tokens')
    .columns(['token_hash', 'user_id', 'kind', 'expires_at', 'created_at'])
    .expression(
      eligible.select((eb) => [
        eb.val(link.tokenHash).as('token_hash'),
        'id',
        sql<'link'>`'link'`.as('kind'),
        eb.val(link.expiresAt).as('expires_at'),
        eb.val(now).as('created_at'),
      ]),
    )
    .execute();
  return row?.user_id ?? undefined;
}

/**
 * Takes one attempt of the address's live code for `purpose`, atomically: the count goes up before
 * the code is compared, so concurrent guesses cannot share one attempt. Returns the code as it is
 * after the count (undefined when the address has no live code: nothing is written then).
 */
export async function takeCodeAttempt(
  db: Executor,
  email: string,
  purpose: EmailCodePurpose,
): Promise<EmailCodeRow | undefined> {
  return db
    .updateTable('email_codes')
    .set({ failed_attempts: sql`failed_attempts + 1` })
    .where('email', '=', email)
    .where('purpose', '=', purpose)
    .where('consumed_at', 'is', null)
    .returningAll()
    .executeTakeFirst();
}

/**
 * The second half of a code attempt: when no unused code was taken (`taken` false), one row is
 * written here instead, so that an attempt at an address with an unused code (whose count goes up)
 * and one at any other address write one row each and run the same statements. Writes nothing
 * when a code was taken.
 */
export async function recordAttemptWithoutCode(
  db: Executor,
  email: string,
  purpose: CodeAttemptMissesTable['purpose'],
  taken: boolean,
  now: Date,
): Promise<void> {
  await db
    .insertInto('code_attempt_misses')
    .columns(['email', 'purpose', 'attempts', 'last_attempt_at'])
    .expression(
      db
        .selectNoFrom((eb) => [
          eb.val(email).as('email'),
          eb.val(purpose).as('purpose'),
          sql<number>`1`.as('attempts'),
          eb.val(now).as('last_attempt_at'),
        ])
        .where(sql<boolean>`${!taken}::boolean`),
    )
    .onConflict((oc) =>
      oc.columns(['email', 'purpose']).doUpdateSet({
        attempts: sql<number>`code_attempt_misses.attempts + 1`,
        last_attempt_at: sql<Date>`excluded.last_attempt_at`,
      }),
    )
    .execute();
}

/**
 * Consumes exactly this issuance of a code, if it is still live (and, for a password-reset code,
 * its account is not disabled). Of any number of concurrent callers, one gets the row: the
 * condition and the write are one atomic UPDATE.
 */
export async function consumeCode(db: Executor, code: EmailCodeRow, now: Date): Promise<EmailCodeRow | undefined> {
  let update = db
    .updateTable('email_codes')
    .set({ consumed_at: now })
    .where('email', '=', code.email)
    .where('purpose', '=', code.purpose)
    .where('code_hmac', '=', code.code_hmac)
    .where('consumed_at', 'is', null);
  if (code.purpose === 'password_reset') {
    update = update.where('user_id', 'in', (eb) =>
      eb.selectFrom('users').select('id').where('disabled_at', 'is', null),
    );
  }
  return update.returningAll().executeTakeFirst();
}

/** Stores a reset token handed out for a right code. */
export async function insertResetToken(
  db: Executor,
  token: { tokenHash: string; userId: string; expiresAt: Date; now: Date },
): Promise<void> {
  await db
    .insertInto('password_reset_tokens')
    .values({
      token_hash: token.tokenHash,
      user_id: token.userId,
      kind: 'exchanged',
      expires_at: token.expiresAt,
      created_at: token.now,
    })
    .execute();
}

/**
 * Takes (deletes) a live reset token: single use, since of concurrent callers only the one whose
 * DELETE finds the row gets it. Returns the account it belongs to.
 */
export async function takeResetToken(
  db: Executor,
  tokenHash: string,
  now: Date,
): Promise<{ user_id: string } | undefined> {
  return db
    .deleteFrom('password_reset_tokens')
    .where('token_hash', '=', tokenHash)
    .where('expires_at', '>', now)
    .returning('user_id')
    .executeTakeFirst();
}

/** Deletes every reset token and code of an account, and the sign-in code of its address. */
export async function deleteAccountCodes(db: Executor, userId: string, email: string): Promise<void> {
  await db.deleteFrom('password_reset_tokens').where('user_id', '=', userId).execute();
  await db
    .deleteFrom('email_codes')
    .where((eb) => eb.or([eb('user_id', '=', userId), eb('email', '=', email)]))
    .execute();
}

/** Deletes the codes and reset tokens that have expired, and the records of attempts without a code a day old. */
export async function deleteExpiredCodes(db: Executor, now: Date): Promise<number> {
  const codes = await db.deleteFrom('email_codes').where('expires_at', '<=', now).executeTakeFirst();
  const tokens = await db.deleteFrom('password_reset_tokens').where('expires_at', '<=', now).executeTakeFirst();
  const misses = await db
    .deleteFrom('code_attempt_misses')
    .where('last_attempt_at', '<=', new Date(now.getTime() - 24 * 3600 * 1000))
    .executeTakeFirst();
  return Number(codes.numDeletedRows) + Number(tokens.numDeletedRows) + Number(misses.numDeletedRows);
}
