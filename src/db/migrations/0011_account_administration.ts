import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // The sessions of a deleted account go with it (on delete cascade), but their access tokens stay
  // validly signed until they expire. Their revocations are kept here for that long, so that an
  // instance that starts, or catches up after losing its LISTEN connection, still refuses them.
  await sql`
    create table deleted_account_sessions (
      session_id uuid primary key,
      revoked_at timestamptz not null
    )
  `.execute(db);
  await sql`create index deleted_account_sessions_revoked_at_idx on deleted_account_sessions (revoked_at)`.execute(db);
  // The enabled administrators, locked by every call that could remove one (the last-administrator
  // rule): an index scan of a few rows rather than a scan of every account.
  await sql`create index users_enabled_admins_idx on users (id) where role = 'admin' and disabled_at is null`.execute(
    db,
  );
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop index users_enabled_admins_idx`.execute(db);
  await sql`drop table deleted_account_sessions`.execute(db);
}
