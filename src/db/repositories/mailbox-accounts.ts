// Writes to accounts made by proving a mailbox (a password reset, a sign-in by email code).
import { type Selectable, sql } from 'kysely';
import type { Executor, UsersTable } from '../schema.ts';
import { removeSecondFactors } from './mfa.ts';

export type LockedUser = Selectable<UsersTable>;

/** The account with this id, locked (FOR UPDATE) until the transaction ends. */
export async function lockUserById(db: Executor, id: string): Promise<LockedUser | undefined> {
  return db.selectFrom('users').selectAll().where('id', '=', id).forUpdate().executeTakeFirst();
}

/** The account with this (lower-cased) address, locked (FOR UPDATE) until the transaction ends. */
export async function lockUserByEmail(db: Executor, email: string): Promise<LockedUser | undefined> {
  return db.selectFrom('users').selectAll().where('email', '=', email).forUpdate().executeTakeFirst();
}

/** The profile of an account whose mailbox was just proven: whoever signed up before chose none of it. */
const provenProfile = (name: string | null) => JSON.stringify({ name, avatar_url: null });

/**
 * Sets the password a reset chose (the mailbox's owner chose it: it is proven), and marks the
 * address verified (the reset proved the mailbox).
 * The profile of an account whose address was not verified was set by whoever signed up with it,
 * perhaps not the owner: it starts again empty.
 */
export async function setPasswordAfterReset(db: Executor, userId: string, passwordHash: string): Promise<void> {
  // An account whose address was not verified: its second factors were added by whoever made it.
  const unverified = await db
    .selectFrom('users')
    .select('id')
    .where('id', '=', userId)
    .where('email_verified', '=', false)
    .executeTakeFirst();
  if (unverified !== undefined) await removeSecondFactors(db, userId);
  await db
    .updateTable('users')
    .set({
      password_hash: passwordHash,
      password_unproven_since: null,
      device_epoch: sql`device_epoch + 1`,
      email_verified: true,
      profile: sql`case when email_verified then profile else ${provenProfile(null)}::jsonb end`,
    })
    .where('id', '=', userId)
    .execute();
}

/**
 * Creates a verified account without a password for an address proven by an email code; nothing
 * happens when the address is taken (a concurrent sign-up: the caller reads the account then).
 */
export async function insertPasswordlessUser(db: Executor, email: string, name: string | null): Promise<void> {
  await db
    .insertInto('users')
    .values({
      email,
      password_hash: null,
      email_verified: true,
      profile: JSON.stringify({ name, avatar_url: null }) as never,
    })
    .onConflict((oc) => oc.column('email').doNothing())
    .execute();
}

/**
 * Marks an unverified account's address verified by an email code and removes its password,
 * profile and second factors: they were set before the mailbox was proven, perhaps by whoever
 * signed up with someone else's address. The profile keeps only the name sent with the code.
 */
export async function proveMailboxWithoutPassword(db: Executor, userId: string, name: string | null): Promise<void> {
  await removeSecondFactors(db, userId);
  await db
    .updateTable('users')
    .set({
      email_verified: true,
      password_hash: null,
      password_unproven_since: null,
      // Whoever used the removed password keeps no known device.
      device_epoch: sql`device_epoch + 1`,
      profile: sql`${provenProfile(name)}::jsonb`,
    })
    .where('id', '=', userId)
    .execute();
}

/**
 * Removes a password whose chooser was never proven to hold the mailbox (see unproven-password.ts),
 * and every provider identity linked since (all but the address itself): the mailbox's owner has
 * just proven it, and none of these may outlive that. Returns the providers unlinked.
 */
export async function removeUnprovenPassword(db: Executor, userId: string): Promise<string[]> {
  // Second factors added while the password was there go with it.
  await removeSecondFactors(db, userId);
  await db
    .updateTable('users')
    .set({ password_hash: null, password_unproven_since: null, device_epoch: sql`device_epoch + 1` })
    .where('id', '=', userId)
    .execute();
  const unlinked = await db
    .deleteFrom('user_providers')
    .where('user_id', '=', userId)
    .where('provider', '<>', 'email')
    .returning('provider')
    .execute();
  return unlinked.map((row) => row.provider);
}
