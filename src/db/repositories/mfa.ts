// Second factors (mfa_factors, and passkeys where they count as factors), their wrong-code counts (mfa_attempts) and the account's flag
// (users.mfa_enabled). Recovery codes are one-time codes (one-time-codes.ts, purpose 'recovery').
import { type Selectable, sql } from 'kysely';
import type { Executor, MfaFactorsTable } from '../schema.ts';

export type FactorRow = Selectable<MfaFactorsTable>;

/** How long an enrollment may wait for its first code. */
export const UNVERIFIED_FACTOR_TTL_MS = 10 * 60_000;

/** The factors that count: verified ones, and unverified ones younger than UNVERIFIED_FACTOR_TTL_MS. */
function liveFactors(db: Executor, userId: string, now: Date) {
  return db
    .selectFrom('mfa_factors')
    .where('user_id', '=', userId)
    .where((eb) =>
      eb.or([eb('status', '=', 'verified'), eb('created_at', '>', new Date(now.getTime() - UNVERIFIED_FACTOR_TTL_MS))]),
    );
}

export async function listFactors(db: Executor, userId: string, now: Date): Promise<FactorRow[]> {
  return liveFactors(db, userId, now).selectAll().orderBy('created_at').orderBy('id').execute();
}

/** A live factor of this account (another account's, an expired enrollment or an unknown id: undefined). */
export async function findFactor(db: Executor, userId: string, factorId: string, now: Date) {
  return liveFactors(db, userId, now).selectAll().where('id', '=', factorId).executeTakeFirst();
}

/**
 * Inserts an unverified factor unless the account has `max` live factors already (undefined then).
 * Expired enrollments are deleted first. The caller holds the account's row (lockAccountMfa), so that
 * concurrent enrollments count each other.
 */
export async function insertFactor(
  db: Executor,
  factor: { id: string; userId: string; friendlyName: string | null; secretSealed: string; now: Date },
  max: number,
): Promise<FactorRow | undefined> {
  await db
    .deleteFrom('mfa_factors')
    .where('user_id', '=', factor.userId)
    .where('status', '=', 'unverified')
    .where('created_at', '<=', new Date(factor.now.getTime() - UNVERIFIED_FACTOR_TTL_MS))
    .execute();
  if ((await countFactors(db, factor.userId, factor.now)) >= max) return undefined;
  return db
    .insertInto('mfa_factors')
    .values({
      id: factor.id,
      user_id: factor.userId,
      type: 'totp',
      friendly_name: factor.friendlyName,
      secret_sealed: factor.secretSealed,
      status: 'unverified',
      created_at: factor.now,
    })
    .returningAll()
    .executeTakeFirstOrThrow();
}

/**
 * Records a code of `step` accepted on a live factor: only when the factor has accepted no code of
 * this step or a later one (one of two requests with the same code gets the row). Verifies an
 * unverified factor. Returns the factor as it was before, or undefined (replayed, or gone).
 */
export async function acceptTotpStep(
  db: Executor,
  userId: string,
  factorId: string,
  step: number,
  now: Date,
): Promise<{ wasVerified: boolean } | undefined> {
  const row = await db
    .updateTable('mfa_factors as f')
    .set({
      last_used_step: step,
      last_used_at: now,
      status: 'verified',
      verified_at: sql<Date>`coalesce(f.verified_at, ${now})`,
    })
    .where('f.id', '=', factorId)
    .where('f.user_id', '=', userId)
    .where((eb) => eb.or([eb('f.last_used_step', 'is', null), eb('f.last_used_step', '<', step)]))
    .where((eb) =>
      eb.or([
        eb('f.status', '=', 'verified'),
        eb('f.created_at', '>', new Date(now.getTime() - UNVERIFIED_FACTOR_TTL_MS)),
      ]),
    )
    // The old status: an UPDATE's RETURNING sees the new row, so the old one is read from a
    // self-join on the same (locked) row.
    .from('mfa_factors as before')
    .whereRef('before.id', '=', 'f.id')
    .returning(sql<boolean>`before.status = 'verified'`.as('was_verified'))
    .executeTakeFirst();
  return row === undefined ? undefined : { wasVerified: row.was_verified };
}

/** A second factor's kind: an authenticator app's secret, or a passkey (the passkeys table). */
export type FactorKind = 'totp' | 'passkey';

/**
 * Deletes one factor of this account, a TOTP factor or a passkey (of `kind` only, when given);
 * returns whether it was verified (undefined: none deleted). A passkey is verified from the start.
 */
export async function deleteFactor(db: Executor, userId: string, factorId: string, kind?: FactorKind) {
  if (kind !== 'passkey') {
    const row = await db
      .deleteFrom('mfa_factors')
      .where('id', '=', factorId)
      .where('user_id', '=', userId)
      .returning('status')
      .executeTakeFirst();
    if (row !== undefined) return { wasVerified: row.status === 'verified', kind: 'totp' as const };
  }
  if (kind === 'totp') return undefined;
  const passkey = await db
    .deleteFrom('passkeys')
    .where('id', '=', factorId)
    .where('user_id', '=', userId)
    .returning('id')
    .executeTakeFirst();
  return passkey === undefined ? undefined : { wasVerified: true, kind: 'passkey' as const };
}

/** Deletes every factor of an account (its passkeys too) and its wrong-code counts. */
export async function deleteAllFactors(db: Executor, userId: string): Promise<void> {
  await db.deleteFrom('mfa_factors').where('user_id', '=', userId).execute();
  await db.deleteFrom('passkeys').where('user_id', '=', userId).execute();
  await db.deleteFrom('mfa_attempts').where('user_id', '=', userId).execute();
}

/** How many factors count against the account's limit: live TOTP factors and passkeys. */
export async function countFactors(db: Executor, userId: string, now: Date): Promise<number> {
  const { count } = await liveFactors(db, userId, now)
    .select(sql<number>`count(*) + (select count(*) from passkeys where passkeys.user_id = ${userId})`.as('count'))
    .executeTakeFirstOrThrow();
  return Number(count);
}

/**
 * The account's row locked (FOR UPDATE) with whether it has a verified factor; undefined when the
 * account is gone or disabled. Opening a session reads the row FOR SHARE, so it waits for this.
 */
export async function lockAccountMfa(db: Executor, userId: string) {
  return db
    .selectFrom('users')
    .select(['id', 'email', 'mfa_enabled'])
    .where('id', '=', userId)
    .where('disabled_at', 'is', null)
    .forUpdate()
    .executeTakeFirst();
}

/** Sets the account's flag to whether it has a verified factor now; returns it. */
export async function refreshMfaEnabled(db: Executor, userId: string): Promise<boolean> {
  const row = await db
    .updateTable('users')
    .set({
      mfa_enabled: sql<boolean>`exists (select 1 from mfa_factors where user_id = ${userId} and status = 'verified')
        or exists (select 1 from passkeys where user_id = ${userId})`,
    })
    .where('id', '=', userId)
    .returning('mfa_enabled')
    .executeTakeFirst();
  return row?.mfa_enabled === true;
}

/**
 * Counts a code attempt at `factorKey` (a factor's id, or 'recovery') before it is compared, in a
 * window of `windowMs`: returns the attempts in the current window (this one included) and when it
 * ends. Atomic across instances (one upsert).
 */
export async function takeMfaAttempt(
  db: Executor,
  userId: string,
  factorKey: string,
  now: Date,
  windowMs: number,
): Promise<{ attempts: number; windowEndsAt: Date } | undefined> {
  const expired = new Date(now.getTime() - windowMs);
  const { rows } = await sql<{ failures: number; window_started_at: Date }>`
    insert into mfa_attempts as a (user_id, factor_key, window_started_at, failures)
    select ${userId}, ${factorKey}, ${now}, 1 where exists (select 1 from users where id = ${userId})
    on conflict (user_id, factor_key) do update set
      window_started_at = case when a.window_started_at <= ${expired} then ${now} else a.window_started_at end,
      failures = case when a.window_started_at <= ${expired} then 1 else a.failures + 1 end
    returning failures, window_started_at
  `.execute(db);
  const row = rows[0];
  // No row: the account is gone (a token outliving it); the caller refuses the session.
  if (row === undefined) return undefined;
  return { attempts: Number(row.failures), windowEndsAt: new Date(row.window_started_at.getTime() + windowMs) };
}

/** Forgets the attempts at `factorKey` once a right code went through. */
export async function clearMfaAttempts(db: Executor, userId: string, factorKey: string): Promise<void> {
  await db.deleteFrom('mfa_attempts').where('user_id', '=', userId).where('factor_key', '=', factorKey).execute();
}

/**
 * Removes every second factor of an account, its wrong-code counts and its recovery codes, and
 * clears its flag: what was added before the mailbox's owner proved the mailbox (an unproven
 * password's holder, an unverified account's maker) must not lock the owner out.
 */
export async function removeSecondFactors(db: Executor, userId: string): Promise<void> {
  await deleteAllFactors(db, userId);
  await db.deleteFrom('one_time_codes').where('purpose', '=', 'recovery').where('user_id', '=', userId).execute();
  await db
    .updateTable('users')
    .set({ mfa_enabled: false })
    .where('id', '=', userId)
    .where('mfa_enabled', '=', true)
    .execute();
}

/** Deletes the account's unverified factors but `keep` (enrollments begun before its first factor was verified). */
export async function deleteUnverifiedFactors(db: Executor, userId: string, keep: string): Promise<void> {
  await db
    .deleteFrom('mfa_factors')
    .where('user_id', '=', userId)
    .where('status', '=', 'unverified')
    .where('id', '<>', keep)
    .execute();
}
