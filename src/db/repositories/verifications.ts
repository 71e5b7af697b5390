import { type Selectable, sql } from 'kysely';
import type { EmailVerificationsTable, Executor } from '../schema.ts';

export type VerificationRow = Selectable<EmailVerificationsTable>;

/** Replaces the user's verification (voiding any earlier code and link) with a fresh one. */
export async function replaceVerification(
  db: Executor,
  v: {
    userId: string;
    codeHmac: string;
    tokenHash: string;
    codeExpiresAt: Date;
    tokenExpiresAt: Date;
    /** The password of the sign-up asking for it; undefined (a resend) keeps the previous one. */
    pendingPasswordHash: string | undefined;
    now: Date;
  },
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
    .values({ user_id: v.userId, ...values, pending_password_hash: v.pendingPasswordHash ?? null })
    .onConflict((oc) =>
      oc.column('user_id').doUpdateSet({
        ...values,
        pending_password_hash: v.pendingPasswordHash ?? sql<string | null>`email_verifications.pending_password_hash`,
      }),
    )
    .execute();
}

/** The verification of the user with this email (and the user's id), if both exist. */
export async function findVerificationByEmail(
  db: Executor,
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
      'v.pending_password_hash',
      'v.consumed_at',
      'v.created_at',
    ])
    .where('users.email', '=', email)
    .executeTakeFirst();
  if (!row) return undefined;
  const { uid, ...v } = row;
  return { userId: uid, verification: v.user_id === null ? undefined : (v as VerificationRow) };
}

export async function findVerificationByTokenHash(
  db: Executor,
  tokenHash: string,
): Promise<VerificationRow | undefined> {
  return db.selectFrom('email_verifications').selectAll().where('token_hash', '=', tokenHash).executeTakeFirst();
}

/**
 * Counts a failed code attempt for the address, in its own statement so that it commits even though
 * the request fails. Runs the same single statement whether or not the address exists.
 */
export async function recordFailedCodeAttempt(db: Executor, email: string): Promise<void> {
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
  db: Executor,
  v: VerificationRow,
  now: Date,
  /** For a code: the failures that void it. The link is independent of failed code attempts. */
  maxCodeFailures: number | undefined,
): Promise<boolean> {
  let update = db
    .updateTable('email_verifications')
    .set({ consumed_at: now })
    .where('user_id', '=', v.user_id)
    .where('token_hash', '=', v.token_hash)
    .where('consumed_at', 'is', null);
  if (maxCodeFailures !== undefined) update = update.where('failed_attempts', '<', maxCodeFailures);
  const result = await update.executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/**
 * Claims the right to send a verification email to an address: false while the cooldown runs or
 * once the daily cap is reached (each email resets the code's failure count, so the cap bounds the
 * guesses an attacker gets per day). One atomic upsert, so concurrent instances agree.
 */
export async function claimEmailSend(
  db: Executor,
  email: string,
  now: Date,
  limits: { cooldownSeconds: number; perDay: number },
): Promise<boolean> {
  const cutoff = new Date(now.getTime() - limits.cooldownSeconds * 1000);
  const dayAgo = new Date(now.getTime() - 86_400_000);
  const result = await sql<{ email: string }>`
    insert into email_send_log as l (email, last_sent_at, window_started_at, sent_in_window)
    values (${email}, ${now}, ${now}, 1)
    on conflict (email) do update set
      last_sent_at = excluded.last_sent_at,
      window_started_at = case when l.window_started_at <= ${dayAgo} then excluded.last_sent_at else l.window_started_at end,
      sent_in_window = case when l.window_started_at <= ${dayAgo} then 1 else l.sent_in_window + 1 end
    where l.last_sent_at <= ${cutoff} and (l.window_started_at <= ${dayAgo} or l.sent_in_window < ${limits.perDay})
    returning email
  `.execute(db);
  return result.rows.length === 1;
}

/** Gives back a claim whose email could not be sent, so that the person can ask again at once. */
export async function releaseEmailSend(db: Executor, email: string, claimedAt: Date): Promise<void> {
  await sql`
    update email_send_log
    set last_sent_at = to_timestamp(0), sent_in_window = greatest(sent_in_window - 1, 0)
    where email = ${email} and last_sent_at = ${claimedAt}
  `.execute(db);
}
