import { randomBytes } from 'node:crypto';
import type { Kysely } from 'kysely';
import type { Config } from '../config.ts';
import type { Database } from '../db/schema.ts';

const SETTING = 'jwt_secret';

/**
 * The key that signs access tokens: JWT_SECRET when set; otherwise (never in production) a random key
 * created once and kept in app_settings, so that restarts and other instances keep sessions valid.
 */
export async function resolveJwtSecret(config: Readonly<Config>, db: Kysely<Database>): Promise<string> {
  if (config.jwtSecret !== undefined) return config.jwtSecret;
  await db
    .insertInto('app_settings')
    .values({ key: SETTING, value: randomBytes(32).toString('base64url') })
    .onConflict((oc) => oc.column('key').doNothing())
    .execute();
  const row = await db.selectFrom('app_settings').select('value').where('key', '=', SETTING).executeTakeFirstOrThrow();
  return row.value;
}
