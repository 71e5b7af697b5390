import { sql } from 'kysely';
import type { Executor, Role } from '../schema.ts';
import { revokeUserSessions } from './sessions.ts';
import { findUserById, type UserRow } from './users.ts';

/**
 * Locks the rows of every enabled administrator (FOR UPDATE, in id order, so that two callers never
 * wait on each other crosswise) until the transaction ends; returns their ids. Every call that can
 * remove an enabled administrator takes these locks first, so such calls run one after another: the
 * second one reads the administrators as the first left them (a row that stopped matching while it
 * waited is not returned), and the last one cannot be removed twice over.
 */
export async function lockEnabledAdmins(db: Executor): Promise<string[]> {
  const rows = await db
    .selectFrom('users')
    .select('id')
    .where('role', '=', 'admin')
    .where('disabled_at', 'is', null)
    .orderBy('id')
    .forUpdate()
    .execute();
  return rows.map((r) => r.id);
}

/** The addresses of the accounts among `ids` (not locked: an account's address never changes). */
export async function addressesOf(db: Executor, ids: readonly string[]): Promise<string[]> {
  if (ids.length === 0) return [];
  const rows = await db.selectFrom('users').select('email').where('id', 'in', ids).execute();
  return rows.map((r) => r.email);
}

/** The accounts among `ids` (their role and whether disabled), locked FOR UPDATE in id order. */
export async function lockAccounts(
  db: Executor,
  ids: readonly string[],
): Promise<{ id: string; email: string; role: Role; disabled_at: Date | null }[]> {
  if (ids.length === 0) return [];
  return db
    .selectFrom('users')
    .select(['id', 'email', 'role', 'disabled_at'])
    .where('id', 'in', ids)
    .orderBy('id')
    .forUpdate()
    .execute();
}

/**
 * Sets the role and whether the account is disabled (disabled_at keeps the time it was first
 * disabled); returns the account as it now is.
 */
export async function updateAccount(
  db: Executor,
  id: string,
  change: { role?: Role | undefined; disabled?: boolean | undefined },
  now: Date,
): Promise<UserRow | undefined> {
  const disabledAt =
    change.disabled === undefined ? undefined : change.disabled ? sql<Date>`coalesce(disabled_at, ${now})` : null;
  await db
    .updateTable('users')
    .set({
      ...(change.role !== undefined ? { role: change.role } : {}),
      ...(disabledAt !== undefined ? { disabled_at: disabledAt } : {}),
    })
    .where('id', '=', id)
    .execute();
  return findUserById(db, id);
}

/**
 * Deletes the accounts (locked by the caller). Their sessions are revoked first, which announces
 * each to every instance (pg_notify), and those revocations are kept in deleted_account_sessions
 * (for as long as `keepSince` says an access token may be unexpired) because the session rows go
 * with the accounts. Returns how many accounts were deleted and the sessions this call revoked.
 */
export async function deleteAccounts(
  db: Executor,
  ids: readonly string[],
  now: Date,
  keepSince: Date,
): Promise<{ deleted: number; revoked: string[] }> {
  if (ids.length === 0) return { deleted: 0, revoked: [] };
  const revoked: string[] = [];
  for (const id of ids) revoked.push(...(await revokeUserSessions(db, id, now)));
  await db
    .insertInto('deleted_account_sessions')
    .columns(['session_id', 'revoked_at'])
    .expression((eb) =>
      eb
        .selectFrom('sessions')
        .select(['id', sql<Date>`coalesce(revoked_at, ${now})`.as('revoked_at')])
        .where('user_id', 'in', ids)
        .where('revoked_at', '>', keepSince),
    )
    .onConflict((oc) => oc.column('session_id').doNothing())
    .execute();
  // Revocations no access token can outlive any more.
  await db.deleteFrom('deleted_account_sessions').where('revoked_at', '<=', keepSince).execute();
  const result = await db.deleteFrom('users').where('id', 'in', ids).executeTakeFirst();
  return { deleted: Number(result.numDeletedRows), revoked };
}
