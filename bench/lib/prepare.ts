import { randomUUID } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { type Kysely, sql } from 'kysely';
import pg from 'pg';
import { seedUsers } from '../../scripts/lib/seed.ts';
import { deriveKeys, hashPassword, sha256Hex } from '../../src/auth/crypto.ts';
import { oneTimeCodeHmac } from '../../src/auth/one-time-codes.ts';
import type { DatabaseConfig } from '../../src/config.ts';
import { openDatabase } from '../../src/db/database.ts';
import { migrateToLatest } from '../../src/db/migrate.ts';
import type { Database } from '../../src/db/schema.ts';
import { benchAdminEnv, benchServiceEnv } from './setup.ts';

// The benchmark's data: a directory of N seeded users, kept between runs (seeding a million takes
// a minute and a half), plus what each run spends and so makes again: unverified sign-ups with a
// known code, and a verified user to sign in as. Everything is written before the service starts
// (PGlite admits one process).

export const PREPARED_DOMAIN = 'bench.invalid';
export const VERIFY_CODE = '424242';
export const SIGN_IN = { email: `sign-in@${PREPARED_DOMAIN}`, password: 'bench-password' };
/** The live code of every prepared password reset and passwordless sign-in. */
export const EMAIL_CODE = '313131';

export interface PreparedDatabase {
  /** Environment that points the service at the database. */
  env: Record<string, string>;
  /** Seeded users (the directory's size, prepared accounts aside). */
  users: number;
  /** Emails of unverified sign-ups, each with the live code VERIFY_CODE. */
  signUps: string[];
  /** Verified accounts, each with a live reset code EMAIL_CODE and a live reset link token (`token`). */
  resets: Array<{ email: string; token: string }>;
  /** Addresses without an account, each with a live sign-in code EMAIL_CODE. */
  otpSignIns: string[];
  version: string;
  /** The EXPLAIN ANALYZE of a statement, as text (PostgreSQL only: PGlite runs in the service). */
  explain?: (statement: unknown) => Promise<string>;
  close(): Promise<void>;
}

export interface PrepareOptions {
  kind: 'postgres' | 'pglite';
  /** A PostgreSQL server URL; the benchmark's database is created beside the one it names. */
  serverUrl: string;
  users: number;
  signUps: number;
}

async function ensurePostgresDatabase(serverUrl: string, name: string): Promise<string> {
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    const exists = await admin.query('select 1 from pg_database where datname = $1', [name]);
    if (exists.rowCount === 0) await admin.query(`create database ${name}`);
  } finally {
    await admin.end();
  }
  return Object.assign(new URL(serverUrl), { pathname: `/${name}` }).toString();
}

/** Seeded users: everyone but the prepared accounts and the administrator. */
async function seededUsers(db: Kysely<Database>): Promise<number> {
  const { rows } = await sql<{ n: number }>`
    select count(*)::int as n from users
    where email not like ${`%@${PREPARED_DOMAIN}`} and email <> ${benchAdminEnv.ADMIN_EMAIL}`.execute(db);
  return rows[0]?.n ?? 0;
}

async function prepareAccounts(db: Kysely<Database>, count: number): Promise<string[]> {
  await sql`delete from users where email like ${`%@${PREPARED_DOMAIN}`}`.execute(db);
  // Their per-address email and code-attempt records from earlier runs would carry over (an
  // address used for wrong codes last time may have used up its attempts for the day).
  await sql`delete from email_send_log where email like ${`%@${PREPARED_DOMAIN}`}`.execute(db);
  await sql`delete from email_send_requesters where email like ${`%@${PREPARED_DOMAIN}`}`.execute(db);
  await sql`delete from code_attempt_misses where email like ${`%@${PREPARED_DOMAIN}`}`.execute(db);
  // Every one-time code of the prepared addresses, here before any is written: sign-in codes of
  // addresses without an account are not removed with the prepared users, and the verification
  // rows written below share the table with the codes prepareEmailCodes writes after them.
  await sql`delete from one_time_codes where email like ${`%@${PREPARED_DOMAIN}`}`.execute(db);
  const keys = deriveKeys(benchServiceEnv.JWT_SECRET);
  const emails: string[] = [];
  for (let start = 0; start < count; start += 2000) {
    const ids: string[] = [];
    const batch: string[] = [];
    for (let i = start; i < Math.min(start + 2000, count); i++) {
      ids.push(randomUUID());
      batch.push(`sign-up-${i}@${PREPARED_DOMAIN}`);
    }
    await sql`insert into users (id, email, password_hash)
      select * from unnest(${ids}::uuid[], ${batch}::text[], ${ids.map(() => 'scrypt$unused')}::text[])`.execute(db);
    await sql`insert into one_time_codes
        (purpose, email, user_id, code_hmac, token_hash, code_expires_at, token_expires_at, created_at)
      select 'verification', email, id, hmac, th, now() + interval '1 hour', now() + interval '1 hour', now()
      from unnest(${ids}::uuid[], ${batch}::text[],
                  ${batch.map((email) => oneTimeCodeHmac(keys, 'verification', email, VERIFY_CODE))}::text[],
                  ${ids.map(() => sha256Hex(randomUUID()))}::text[]) as t(id, email, hmac, th)`.execute(db);
    emails.push(...batch);
  }
  await sql`insert into users (email, password_hash, email_verified)
    values (${SIGN_IN.email}, ${await hashPassword(SIGN_IN.password)}, true)`.execute(db);
  return emails;
}

/**
 * Password resets and passwordless sign-ins ready to be spent, `count` of each, with the codes
 * stored as the service stores them (an HMAC bound to purpose and address; link tokens as SHA-256).
 */
async function prepareEmailCodes(
  db: Kysely<Database>,
  count: number,
): Promise<{ resets: Array<{ email: string; token: string }>; otpSignIns: string[] }> {
  // The table holds the prepared sign-ups' verification rows by now: what earlier runs left is
  // removed by prepareAccounts, which runs first.
  const keys = deriveKeys(benchServiceEnv.JWT_SECRET);
  const codeHmac = (purpose: 'password_reset' | 'sign_in', email: string) =>
    oneTimeCodeHmac(keys, purpose, email, EMAIL_CODE);
  const passwordHash = await hashPassword('bench-old-password');
  const resets: Array<{ email: string; token: string }> = [];
  const otpSignIns: string[] = [];
  for (let start = 0; start < count; start += 2000) {
    const ids: string[] = [];
    const emails: string[] = [];
    const tokens: string[] = [];
    const otpEmails: string[] = [];
    for (let i = start; i < Math.min(start + 2000, count); i++) {
      ids.push(randomUUID());
      emails.push(`reset-${i}@${PREPARED_DOMAIN}`);
      tokens.push(randomUUID().replaceAll('-', '') + randomUUID().replaceAll('-', ''));
      otpEmails.push(`otp-${i}@${PREPARED_DOMAIN}`);
    }
    await sql`insert into users (id, email, password_hash, email_verified)
      select id, email, ${passwordHash}, true from unnest(${ids}::uuid[], ${emails}::text[]) as t(id, email)`.execute(
      db,
    );
    await sql`insert into one_time_codes (purpose, email, user_id, code_hmac, code_expires_at, created_at)
      select 'password_reset', email, id, hmac, now() + interval '1 hour', now()
      from unnest(${ids}::uuid[], ${emails}::text[], ${emails.map((e) => codeHmac('password_reset', e))}::text[])
        as t(id, email, hmac)`.execute(db);
    await sql`insert into one_time_codes (purpose, email, user_id, token_hash, token_expires_at, created_at)
      select 'password_reset_token', email, id, th, now() + interval '1 hour', now()
      from unnest(${ids}::uuid[], ${emails}::text[], ${tokens.map(sha256Hex)}::text[]) as t(id, email, th)`.execute(db);
    await sql`insert into one_time_codes (purpose, email, user_id, code_hmac, code_expires_at, created_at)
      select 'sign_in', email, null, hmac, now() + interval '1 hour', now()
      from unnest(${otpEmails}::text[], ${otpEmails.map((e) => codeHmac('sign_in', e))}::text[]) as t(email, hmac)`.execute(
      db,
    );
    resets.push(...emails.map((email, i) => ({ email, token: tokens[i] as string })));
    otpSignIns.push(...otpEmails);
  }
  return { resets, otpSignIns };
}

/** Opens (creating and seeding when needed) the benchmark's database and prepares this run's accounts. */
export async function prepareDatabase(o: PrepareOptions): Promise<PreparedDatabase> {
  let config: DatabaseConfig;
  let env: Record<string, string>;
  if (o.kind === 'postgres') {
    const url = await ensurePostgresDatabase(o.serverUrl, `bench_users_${o.users}`);
    config = { kind: 'postgres', url };
    env = { DATABASE_URL: url };
  } else {
    const dataDir = path.join(os.tmpdir(), 'service-bench', `users-${o.users}`);
    config = { kind: 'pglite', dataDir: path.join(dataDir, 'pglite') };
    env = { DATA_DIR: dataDir };
  }
  const database = await openDatabase(config);
  try {
    await migrateToLatest(database.db);
    // Keys that a kept database got under another JWT_SECRET (an earlier version of the bench made a
    // new one every run) cannot be opened: the service makes a fresh first key instead.
    await sql`delete from signing_keys`.execute(database.db);
    const have = await seededUsers(database.db);
    if (have < o.users) {
      process.stderr.write(`seeding ${(o.users - have).toLocaleString('en-US')} users (kept for later runs)\n`);
      await seedUsers(database.db, o.users - have);
    }
    process.stderr.write(`preparing ${o.signUps.toLocaleString('en-US')} unverified sign-ups\n`);
    const signUps = await prepareAccounts(database.db, o.signUps);
    // Flushes the sign-ups out of the search indexes' pending lists (GIN fastupdate): otherwise
    // every search scans them, about 17 ms for 7,500 new users, until autovacuum runs.
    const { resets, otpSignIns } = await prepareEmailCodes(database.db, o.signUps);
    await sql`vacuum analyze users`.execute(database.db);
    const version = (await sql<{ v: string }>`select current_setting('server_version') as v`.execute(database.db))
      .rows[0]?.v as string;
    const users = await seededUsers(database.db);
    if (o.kind === 'pglite') {
      await database.close(); // the service takes the data directory over
      return { env, users, signUps, resets, otpSignIns, version, close: async () => {} };
    }
    return {
      env,
      users,
      signUps,
      resets,
      otpSignIns,
      version,
      explain: async (statement) => {
        const { rows } = await sql<{
          'QUERY PLAN': string;
        }>`explain (analyze, buffers, costs off) ${statement}`.execute(database.db);
        return rows.map((r) => r['QUERY PLAN']).join('\n');
      },
      close: () => database.close(),
    };
  } catch (err) {
    await database.close();
    throw err;
  }
}
