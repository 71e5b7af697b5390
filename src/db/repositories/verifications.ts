import { type Kysely, type Selectable, sql, type Transaction } from 'kysely';
import type { Database, EmailVerificationsTable } from '../schema.ts';

type Db = Kysely<Database> | Transaction<Database>;
export type VerificationRow = Selectable<EmailVerificationsTable>;

/** Replaces the user's verification (voiding any earlier code and link) with a fresh one. */
export async function replaceVerification(
  db: Db,
  v: { userId: string; codeHmac: string; tokenHash: string; codeExpiresAt: Date; tokenExpiresAt: Date; now: Date },
): Promise<void> {
  const values = {
    code_hmac: v.codeHmac,
    token_hash: v.tokenHash,
    code_expires_at: v.codeExpiresAt,
    token_expires_at: v.tokenExpiresAt,
    failed_attempts: 0,
    consumed_at: null,
    created_at: v.now,
  };
  await db
    .insertInto('email_verifications')
    .values({ user_id: v.userId, ...values })
    .onConflict((oc) => oc.column('user_id').doUpdateSet(values))
    .execute();
}

/** The verification of the user with this email (and the user's id), if both exist. */
export async function findVerificationByEmail(
  db: Db,
  email: string,
): Promise<{ userId: string; verification: VerificationRow | undefined } | undefined> {
  const row = await db
    .selectFrom('users')
    .leftJoin('email_verifications as v', 'v.user_id', 'users.id')
    .select(['users.id as uid'])
    .select([
      'v.user_id',
      'v.code_hmac',
      'v.token_hash',
      'v.code_expires_at',
      'v.token_expires_at',
      'v.failed_attempts',
      'v.consumed_at',
      'v.created_at',
    ])
    .where('users.email', '=', email)
    .executeTakeFirst();
  if (!row) return undefined;
  const { uid, ...v } = row;
  return { userId: uid, verification: v.user_id === null ? undefined : (v as VerificationRow) };
}

export async function findVerificationByTokenHash(db: Db, tokenHash: string): Promise<VerificationRow | undefined> {
  return db.selectFrom('email_verifications').selectAll().where('token_hash', '=', tokenHash).executeTakeFirst();
}

/**
 * Counts a failed code attempt for the address, in its own statement so that it commits even though
 * the request fails. Runs the same single statement whether or not the address exists.
 */
export async function recordFailedCodeAttempt(db: Db, email: string): Promise<void> {
  await db
    .updateTable('email_verifications')
    .set({ failed_attempts: sql`failed_attempts + 1` })
    .where('user_id', '=', (eb) => eb.selectFrom('users').select('id').where('email', '=', email))
    .where('consumed_at', 'is', null)
    .execute();
}

/**
 * Consumes exactly this issuance of the verification, if it is still live. Of any number of
 * concurrent callers, one gets true: the condition and the write are one atomic UPDATE.
 */
export async function consumeVerification(
  db: Db,
  v: VerificationRow,
  now: Date,
  maxFailures: number,
): Promise<boolean> {
  const result = await db
    .updateTable('email_verifications')
    .set({ consumed_at: now })
    .where('user_id', '=', v.user_id)
    .where('token_hash', '=', v.token_hash)
    .where('consumed_at', 'is', null)
    .where('failed_attempts', '<', maxFailures)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/** Claims the right to send a verification email to an address: false while the cooldown runs. */
export async function claimEmailSend(db: Db, email: string, now: Date, cooldownSeconds: number): Promise<boolean> {
  const cutoff = new Date(now.getTime() - cooldownSeconds * 1000);
  const row = await db
    .insertInto('email_send_log')
    .values({ email, last_sent_at: now })
    .onConflict((oc) =>
      oc.column('email').doUpdateSet({ last_sent_at: now }).where('email_send_log.last_sent_at', '<=', cutoff),
    )
    .returning('email')
    .executeTakeFirst();
  return row !== undefined;
}
