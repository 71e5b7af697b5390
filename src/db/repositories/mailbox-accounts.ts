// Writes to accounts made by proving a mailbox (a password reset, a sign-in by email code).
import type { Selectable } from 'kysely';
import type { Executor, UsersTable } from '../schema.ts';

export type LockedUser = Selectable<UsersTable>;

/** The account with this id, locked (FOR UPDATE) until the transaction ends. */
export async function lockUserById(db: Executor, id: string): Promise<LockedUser | undefined> {
  return db.selectFrom('users').selectAll().where('id', '=', id).forUpdate().executeTakeFirst();
}

/** The account with this (lower-cased) address, locked (FOR UPDATE) until the transaction ends. */
export async function lockUserByEmail(db: Executor, email: string): Promise<LockedUser | undefined> {
  return db.selectFrom('users').selectAll().where('email', '=', email).forUpdate().executeTakeFirst();
}

/** Sets the password a reset chose, and marks the address verified (the reset proved the mailbox). */
export async function setPasswordAfterReset(db: Executor, userId: string, passwordHash: string): Promise<void> {
  await db
    .updateTable('users')
    .set({ password_hash: passwordHash, email_verified: true })
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
 * Marks an unverified account's address verified by an email code and removes its password: one
 * set before the mailbox was proven may be whoever signed up with someone else's address.
 */
export async function proveMailboxWithoutPassword(db: Executor, userId: string): Promise<void> {
  await db.updateTable('users').set({ email_verified: true, password_hash: null }).where('id', '=', userId).execute();
}
