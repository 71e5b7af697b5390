import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // Set by an administrator: a disabled account cannot sign in, refresh, verify or reset its password.
  await sql`alter table users add column disabled_at timestamptz`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`alter table users drop column disabled_at`.execute(db);
}
