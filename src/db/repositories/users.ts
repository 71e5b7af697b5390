import { type RawBuilder, type Selectable, sql } from 'kysely';
import type { Executor, Role, UsersTable } from '../schema.ts';

export type UserRow = Selectable<UsersTable> & { providers: string[] };

const withProviders = sql<
  string[]
>`array(select p.provider from user_providers p where p.user_id = users.id order by p.provider)::text[]`;

/** A user with the providers it can sign in with, by lower-cased email. */
export async function findUserByEmail(db: Executor, email: string): Promise<UserRow | undefined> {
  return db
    .selectFrom('users')
    .selectAll()
    .select(withProviders.as('providers'))
    .where('email', '=', email)
    .executeTakeFirst();
}

export async function findUserById(db: Executor, id: string): Promise<UserRow | undefined> {
  return db
    .selectFrom('users')
    .selectAll()
    .select(withProviders.as('providers'))
    .where('id', '=', id)
    .executeTakeFirst();
}

/** Inserts a password account; returns undefined when the email is already taken. */
export async function insertPasswordUser(
  db: Executor,
  user: { email: string; passwordHash: string; name: string | null; emailVerified: boolean; role?: Role },
): Promise<UserRow | undefined> {
  const inserted = await db
    .insertInto('users')
    .values({
      email: user.email,
      password_hash: user.passwordHash,
      profile: JSON.stringify({ name: user.name, avatar_url: null }) as never,
      email_verified: user.emailVerified,
      role: user.role ?? 'user',
    })
    .onConflict((oc) => oc.column('email').doNothing())
    .returningAll()
    .executeTakeFirst();
  if (!inserted) return undefined;
  await addProvider(db, inserted.id, 'email', inserted.email);
  return { ...inserted, providers: ['email'] };
}

/** Inserts a verified account without a password (a provider's identity); undefined when the email is taken. */
export async function insertProviderUser(
  db: Executor,
  user: { email: string; name: string | null; avatarUrl: string | undefined },
): Promise<UsersRowOnly | undefined> {
  return db
    .insertInto('users')
    .values({
      email: user.email,
      password_hash: null,
      profile: JSON.stringify({ name: user.name, avatar_url: user.avatarUrl ?? null }) as never,
      email_verified: true,
    })
    .onConflict((oc) => oc.column('email').doNothing())
    .returningAll()
    .executeTakeFirst();
}

type UsersRowOnly = Selectable<UsersTable>;

export async function addProvider(db: Executor, userId: string, provider: string, accountId: string): Promise<void> {
  await db
    .insertInto('user_providers')
    .values({ user_id: userId, provider, provider_account_id: accountId })
    .onConflict((oc) => oc.columns(['user_id', 'provider']).doNothing())
    .execute();
}

/**
 * Marks the address verified and sets the password the verification activates: a hash, null (the
 * account has none from now on), or undefined (the account keeps the one it has). A hash activated
 * without its sign-up's binding is recorded as unproven since `unprovenSince`. An account verified
 * meanwhile (by another flow that proved the mailbox) keeps its password: the UPDATE reads the
 * row's latest version under its lock, so one statement decides and writes.
 */
export async function markEmailVerified(
  db: Executor,
  userId: string,
  passwordHash: string | null | undefined,
  unprovenSince: Date | null = null,
): Promise<void> {
  const unlessVerified = <T>(
    value: T | RawBuilder<T>,
    column: 'password_hash' | 'password_unproven_since' | 'device_epoch',
  ) => sql<T>`case when users.email_verified then ${sql.ref(`users.${column}`)} else ${value} end`;
  await db
    .updateTable('users')
    .set(
      passwordHash === undefined
        ? { email_verified: true }
        : {
            email_verified: true,
            password_hash: unlessVerified(passwordHash, 'password_hash'),
            password_unproven_since: unlessVerified(
              passwordHash === null ? null : unprovenSince,
              'password_unproven_since',
            ),
            // The password is replaced or removed: device signals issued before stop counting.
            device_epoch: unlessVerified(sql<number>`users.device_epoch + 1`, 'device_epoch'),
          },
    )
    .where('id', '=', userId)
    .execute();
}

/** Inserts an unverified account without a password unless the address is taken (nothing happens then). */
export async function insertUnverifiedUser(db: Executor, email: string, name: string | null): Promise<boolean> {
  const result = await db
    .insertInto('users')
    .values({ email, password_hash: null, profile: JSON.stringify({ name, avatar_url: null }) as never })
    .onConflict((oc) => oc.column('email').doNothing())
    .executeTakeFirst();
  return Number(result.numInsertedOrUpdatedRows ?? 0) === 1;
}

/** Gives the account with this address the `email` provider, if it lacks it (nothing happens otherwise). */
export async function ensureEmailProvider(db: Executor, email: string): Promise<void> {
  await db
    .insertInto('user_providers')
    .columns(['user_id', 'provider', 'provider_account_id'])
    .expression((eb) =>
      eb
        .selectFrom('users')
        .select(['id', eb.val('email').as('provider'), 'email'])
        .where('email', '=', email),
    )
    .onConflict((oc) => oc.doNothing())
    .execute();
}

/** Replaces the password only if it is still `expected` (null: none); false when it changed meanwhile. */
export async function replacePassword(
  db: Executor,
  userId: string,
  expected: string | null,
  passwordHash: string,
): Promise<boolean> {
  const result = await db
    .updateTable('users')
    .set({ password_hash: passwordHash, device_epoch: sql`device_epoch + 1` })
    .where('id', '=', userId)
    .where((eb) => (expected === null ? eb('password_hash', 'is', null) : eb('password_hash', '=', expected)))
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/** Creates the administrator or brings an existing account to admin, verified, with this password hash. */
export async function upsertAdmin(db: Executor, email: string, passwordHash: string): Promise<string> {
  const row = await db
    .insertInto('users')
    .values({ email, password_hash: passwordHash, email_verified: true, role: 'admin' })
    .onConflict((oc) =>
      oc.column('email').doUpdateSet({ password_hash: passwordHash, email_verified: true, role: 'admin' }),
    )
    .returning('id')
    .executeTakeFirstOrThrow();
  await addProvider(db, row.id, 'email', email);
  return row.id;
}

/** The account's known devices stop counting: every device signal was issued for an earlier epoch. */
export async function forgetKnownDevices(db: Executor, userId: string): Promise<void> {
  await db.updateTable('users').set({ device_epoch: sql`device_epoch + 1` }).where('id', '=', userId).execute();
}
