import { type Kysely, sql } from 'kysely';
import { type Migration, type MigrationResult, Migrator } from 'kysely/migration';
import * as m0001 from './migrations/0001_app_settings.ts';
import * as m0002 from './migrations/0002_accounts_and_sessions.ts';
import * as m0003 from './migrations/0003_user_directory.ts';
import * as m0004 from './migrations/0004_directory_grams.ts';
import * as m0005 from './migrations/0005_embedding_usage.ts';
import * as m0006 from './migrations/0006_realtime.ts';
import * as m0007 from './migrations/0007_realtime_delivery.ts';
import * as m0008 from './migrations/0008_account_ownership.ts';
import * as m0009 from './migrations/0009_account_disabling.ts';
import * as m0010 from './migrations/0010_email_codes.ts';
import * as m0011 from './migrations/0011_account_administration.ts';
import * as m0012 from './migrations/0012_oauth.ts';
import * as m0013 from './migrations/0013_realtime_recheck.ts';
import * as m0014 from './migrations/0014_embedding_usage_end_user.ts';
import * as m0015 from './migrations/0015_unproven_passwords.ts';
import * as m0016 from './migrations/0016_known_device_emails.ts';
import * as m0017 from './migrations/0017_id_token_uses.ts';
import * as m0018 from './migrations/0018_code_attempt_misses.ts';
import * as m0019 from './migrations/0019_one_time_codes.ts';
import * as m0020 from './migrations/0020_signing_keys.ts';
import * as m0021 from './migrations/0021_one_time_codes_fillfactor.ts';
import * as m0022 from './migrations/0022_mfa.ts';
import * as m0023 from './migrations/0023_passkeys.ts';
import * as m0024 from './migrations/0024_audit_log_and_webhooks.ts';
import * as m0025 from './migrations/0025_webhook_delivery.ts';
import * as m0026 from './migrations/0026_identity_linking.ts';
import * as m0027 from './migrations/0027_user_directory_chunks.ts';
import { applyRepeatableSql } from './repeatable-sql.ts';
import type { Database } from './schema.ts';

/** Every migration, in order. Listed by hand so that no file-system scan happens at start-up. */
export const migrations: Record<string, Migration> = {
  '0001_app_settings': m0001,
  '0002_accounts_and_sessions': m0002,
  '0003_user_directory': m0003,
  '0004_directory_grams': m0004,
  '0005_embedding_usage': m0005,
  '0006_realtime': m0006,
  '0007_realtime_delivery': m0007,
  '0008_account_ownership': m0008,
  '0009_account_disabling': m0009,
  '0010_email_codes': m0010,
  '0011_account_administration': m0011,
  '0012_oauth': m0012,
  '0013_realtime_recheck': m0013,
  '0014_embedding_usage_end_user': m0014,
  '0015_unproven_passwords': m0015,
  '0016_known_device_emails': m0016,
  '0017_id_token_uses': m0017,
  '0018_code_attempt_misses': m0018,
  '0019_one_time_codes': m0019,
  '0020_signing_keys': m0020,
  '0021_one_time_codes_fillfactor': m0021,
  '0022_mfa': m0022,
  '0023_passkeys': m0023,
  '0024_audit_log_and_webhooks': m0024,
  '0025_webhook_delivery': m0025,
  '0026_identity_linking': m0026,
  '0027_user_directory_chunks': m0027,
};

/**
 * Whether the database records exactly the migrations above: two reads, so that a start on an
 * up-to-date database skips the migrator (which creates its tables if missing and takes a lock).
 */
async function upToDate(db: Kysely<Database>): Promise<boolean> {
  const { rows: table } = await sql<{ present: boolean }>`
    select to_regclass('kysely_migration') is not null as present`.execute(db);
  if (!table[0]?.present) return false;
  const { rows } = await sql<{ name: string }>`select name from kysely_migration`.execute(db);
  const known = Object.keys(migrations);
  return rows.length === known.length && rows.every((row) => row.name in migrations);
}

/**
 * Brings the database to the latest migration, then applies the repeatable SQL files that changed
 * (src/db/sql/, see repeatable-sql.ts); throws with the failing migration's name on error.
 */
export async function migrateToLatest(db: Kysely<Database>): Promise<MigrationResult[]> {
  const results = (await upToDate(db)) ? [] : await runMigrations(db);
  await applyRepeatableSql(db);
  return results;
}

async function runMigrations(db: Kysely<Database>): Promise<MigrationResult[]> {
  const migrator = new Migrator({ db, provider: { getMigrations: async () => migrations } });
  const { error, results = [] } = await migrator.migrateToLatest();
  if (error) {
    const failed = results.find((r) => r.status === 'Error');
    const reason = error instanceof Error ? error.message : String(error);
    throw new Error(`Migration ${failed?.migrationName ?? '(unknown)'} failed: ${reason}`, { cause: error });
  }
  return results;
}
