import { type Insertable, type Selectable, sql } from 'kysely';
import type { Executor, OAuthAuthorizationsTable } from '../schema.ts';
import type { UserRow } from './users.ts';
import { findUserById } from './users.ts';

export type OAuthAuthorizationRow = Selectable<OAuthAuthorizationsTable>;

/**
 * The provider name of an account's own address in user_providers (users.ts adds it): not a
 * provider identity, never listed, counted or unlinked as one.
 */
export const ADDRESS_PROVIDER = 'email';

export async function insertAuthorization(db: Executor, row: Insertable<OAuthAuthorizationsTable>): Promise<void> {
  await db.insertInto('oauth_authorizations').values(row).execute();
}

/** Takes (deletes and returns) the live sign-in with this state hash: a state works once. */
export async function takeAuthorization(
  db: Executor,
  stateHash: string,
  now: Date,
): Promise<OAuthAuthorizationRow | undefined> {
  const row = await db
    .deleteFrom('oauth_authorizations')
    .where('state_hash', '=', stateHash)
    .returningAll()
    .executeTakeFirst();
  return row !== undefined && row.expires_at > now ? row : undefined;
}

export async function insertCode(
  db: Executor,
  row: { codeHash: string; userId: string; codeChallenge: string; now: Date; expiresAt: Date },
): Promise<void> {
  await db
    .insertInto('oauth_codes')
    .values({
      code_hash: row.codeHash,
      user_id: row.userId,
      code_challenge: row.codeChallenge,
      expires_at: row.expiresAt,
      created_at: row.now,
    })
    .execute();
}

/** Takes (deletes and returns) a one-time code, live or not: whatever the verifier, it is used up. */
export async function takeCode(
  db: Executor,
  codeHash: string,
): Promise<{ user_id: string; code_challenge: string; expires_at: Date } | undefined> {
  return db
    .deleteFrom('oauth_codes')
    .where('code_hash', '=', codeHash)
    .returning(['user_id', 'code_challenge', 'expires_at'])
    .executeTakeFirst();
}

/** The account linked to a provider identity, if any. */
export async function findUserByIdentity(
  db: Executor,
  provider: string,
  subject: string,
): Promise<UserRow | undefined> {
  const link = await db
    .selectFrom('user_providers')
    .select('user_id')
    .where('provider', '=', provider)
    .where('provider_account_id', '=', subject)
    .executeTakeFirst();
  return link === undefined ? undefined : findUserById(db, link.user_id);
}

/**
 * Links a provider identity to an account, keeping the address the provider vouched for (null:
 * none); its id, or undefined when the account is already linked to another identity of that
 * provider, or the identity to another account (nothing changes then).
 */
export async function linkIdentity(
  db: Executor,
  link: { userId: string; provider: string; subject: string; email: string | null },
): Promise<string | undefined> {
  const row = await db
    .insertInto('user_providers')
    .values({ user_id: link.userId, provider: link.provider, provider_account_id: link.subject, email: link.email })
    .onConflict((oc) => oc.doNothing())
    .returning('id')
    .executeTakeFirst();
  return row?.id;
}

/** A provider identity linked to an account, as the identities operations show it. */
export interface IdentityRow {
  id: string;
  provider: string;
  provider_account_id: string;
  email: string | null;
  created_at: Date;
}

/** The account's provider identities, oldest first. */
export async function listIdentities(db: Executor, userId: string): Promise<IdentityRow[]> {
  return db
    .selectFrom('user_providers')
    .select(['id', 'provider', 'provider_account_id', 'email', 'created_at'])
    .where('user_id', '=', userId)
    .where('provider', '<>', ADDRESS_PROVIDER)
    .orderBy('created_at')
    .orderBy('id')
    .execute();
}

/** The account a provider identity is linked to, by its id there, if any. */
export async function findIdentityOwner(
  db: Executor,
  provider: string,
  subject: string,
): Promise<{ id: string; user_id: string } | undefined> {
  return db
    .selectFrom('user_providers')
    .select(['id', 'user_id'])
    .where('provider', '=', provider)
    .where('provider_account_id', '=', subject)
    .executeTakeFirst();
}

/** Whether the account has an identity of this provider (an account has at most one per provider). */
export async function hasIdentityOf(db: Executor, userId: string, provider: string): Promise<boolean> {
  const row = await db
    .selectFrom('user_providers')
    .select('id')
    .where('user_id', '=', userId)
    .where('provider', '=', provider)
    .executeTakeFirst();
  return row !== undefined;
}

/** One of the account's provider identities, by its id; undefined when the account has no such identity. */
export async function findIdentityOf(
  db: Executor,
  userId: string,
  identityId: string,
): Promise<IdentityRow | undefined> {
  return db
    .selectFrom('user_providers')
    .select(['id', 'provider', 'provider_account_id', 'email', 'created_at'])
    .where('id', '=', identityId)
    .where('user_id', '=', userId)
    .where('provider', '<>', ADDRESS_PROVIDER)
    .executeTakeFirst();
}

/**
 * The account's ways to sign in besides the identity `identityId`: its other identities of the
 * `providers` given (those configured now; an identity of a provider no longer configured signs
 * nobody in) and its passkeys.
 */
export async function otherSignInMethods(
  db: Executor,
  userId: string,
  identityId: string,
  providers: readonly string[],
): Promise<{ identities: number; passkeys: number }> {
  const identities =
    providers.length === 0
      ? sql<number>`0`
      : sql<number>`(select count(*) from user_providers p
          where p.user_id = ${userId} and p.id <> ${identityId} and p.provider <> ${ADDRESS_PROVIDER}
            and p.provider in (${sql.join(providers)}))`;
  const { rows } = await sql<{ identities: number | string; passkeys: number | string }>`
    select ${identities} as identities,
      (select count(*) from passkeys k where k.user_id = ${userId}) as passkeys`.execute(db);
  // count(*) is a string from pg and a number from PGlite.
  return { identities: Number(rows[0]?.identities ?? 0), passkeys: Number(rows[0]?.passkeys ?? 0) };
}

/** Deletes one of the account's provider identities; true when it was there. */
export async function deleteIdentity(db: Executor, userId: string, identityId: string): Promise<boolean> {
  const result = await db
    .deleteFrom('user_providers')
    .where('id', '=', identityId)
    .where('user_id', '=', userId)
    .where('provider', '<>', ADDRESS_PROVIDER)
    .executeTakeFirst();
  return Number(result.numDeletedRows) === 1;
}

/** Remembers that the account's owner unlinked this identity: its provider no longer links it by address. */
export async function rememberUnlinked(
  db: Executor,
  row: { userId: string; provider: string; subject: string; now: Date },
): Promise<void> {
  await db
    .insertInto('unlinked_identities')
    .values({ user_id: row.userId, provider: row.provider, provider_account_id: row.subject, unlinked_at: row.now })
    .onConflict((oc) =>
      oc.columns(['user_id', 'provider', 'provider_account_id']).doUpdateSet({ unlinked_at: row.now }),
    )
    .execute();
}

/** Whether the account's owner unlinked this identity (and did not link it again from a session). */
export async function wasUnlinked(db: Executor, userId: string, provider: string, subject: string): Promise<boolean> {
  const row = await db
    .selectFrom('unlinked_identities')
    .select('user_id')
    .where('user_id', '=', userId)
    .where('provider', '=', provider)
    .where('provider_account_id', '=', subject)
    .executeTakeFirst();
  return row !== undefined;
}

/** Forgets an unlinking (the owner linked the identity again from a session). */
export async function forgetUnlinked(db: Executor, userId: string, provider: string, subject: string): Promise<void> {
  await db
    .deleteFrom('unlinked_identities')
    .where('user_id', '=', userId)
    .where('provider', '=', provider)
    .where('provider_account_id', '=', subject)
    .execute();
}

/**
 * Records that an ID token (by the hash of its signed part) opens a session, until `expiresAt`;
 * false when it is recorded already. One INSERT … ON CONFLICT DO NOTHING on the primary key, so
 * that of concurrent presentations exactly one gets true.
 */
export async function recordIdTokenUse(
  db: Executor,
  row: { tokenHash: string; provider: string; expiresAt: Date; now: Date },
): Promise<boolean> {
  const result = await db
    .insertInto('oauth_id_token_uses')
    .values({ token_hash: row.tokenHash, provider: row.provider, expires_at: row.expiresAt, created_at: row.now })
    .onConflict((oc) => oc.column('token_hash').doNothing())
    .executeTakeFirst();
  return Number(result.numInsertedOrUpdatedRows ?? 0n) === 1;
}

/** Forgets an ID token's use (its presentation opened no session after all). */
export async function forgetIdTokenUse(db: Executor, tokenHash: string): Promise<void> {
  await db.deleteFrom('oauth_id_token_uses').where('token_hash', '=', tokenHash).execute();
}

/** Deletes sign-ins, codes and ID-token records that have expired (the periodic housekeeping). */
export async function deleteExpiredOAuthRecords(db: Executor, now: Date): Promise<number> {
  const a = await db.deleteFrom('oauth_authorizations').where('expires_at', '<=', now).executeTakeFirst();
  const c = await db.deleteFrom('oauth_codes').where('expires_at', '<=', now).executeTakeFirst();
  const t = await db.deleteFrom('oauth_id_token_uses').where('expires_at', '<=', now).executeTakeFirst();
  return Number(a.numDeletedRows) + Number(c.numDeletedRows) + Number(t.numDeletedRows);
}
