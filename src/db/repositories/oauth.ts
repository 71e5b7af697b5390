import type { Selectable } from 'kysely';
import type { Executor, OAuthAuthorizationsTable } from '../schema.ts';
import type { UserRow } from './users.ts';
import { findUserById } from './users.ts';

export type OAuthAuthorizationRow = Selectable<OAuthAuthorizationsTable>;

export async function insertAuthorization(db: Executor, row: OAuthAuthorizationRow): Promise<void> {
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
 * Links a provider identity to an account; false when the account is already linked to another
 * identity of that provider, or the identity to another account (nothing changes then).
 */
export async function linkIdentity(db: Executor, userId: string, provider: string, subject: string): Promise<boolean> {
  const result = await db
    .insertInto('user_providers')
    .values({ user_id: userId, provider, provider_account_id: subject })
    .onConflict((oc) => oc.doNothing())
    .executeTakeFirst();
  return Number(result.numInsertedOrUpdatedRows ?? 0n) === 1;
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
