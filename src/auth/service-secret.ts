import { randomBytes } from 'node:crypto';
import type { Kysely } from 'kysely';
import type { Config } from '../config.ts';
import type { Database } from '../db/schema.ts';

/**
 * Defaults that every instance on a database must share, made by the first and kept in app_settings:
 * the value stored under `key`, `made` when there is none yet.
 */
async function kept(db: Kysely<Database>, key: string, made: string): Promise<string> {
  await db
    .insertInto('app_settings')
    .values({ key, value: made })
    .onConflict((oc) => oc.column('key').doNothing())
    .execute();
  const row = await db.selectFrom('app_settings').select('value').where('key', '=', key).executeTakeFirstOrThrow();
  return row.value;
}

/**
 * The secret the internal keys derive from: JWT_SECRET when set; otherwise (never in production) a
 * random one made once and kept, so that restarts and other instances keep sessions valid.
 */
export function resolveJwtSecret(config: Readonly<Config>, db: Kysely<Database>): Promise<string> {
  if (config.jwtSecret !== undefined) return Promise.resolve(config.jwtSecret);
  return kept(db, 'jwt_secret', randomBytes(32).toString('base64url'));
}

/**
 * The `iss` of access tokens: PUBLIC_URL when set; otherwise the address of the first instance
 * (its HOST and PORT), kept, so that instances on other ports or hosts accept each other's tokens.
 */
export function resolveTokenIssuer(config: Readonly<Config>, db: Kysely<Database>): Promise<string> {
  if (config.tokenIssuer !== undefined) return Promise.resolve(config.tokenIssuer);
  return kept(db, 'token_issuer', config.publicUrl.replace(/\/+$/, ''));
}
