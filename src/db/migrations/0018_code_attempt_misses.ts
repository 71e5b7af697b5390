import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // Wrong-code attempts at an address that had no unused code of that kind (verification, sign-in,
  // password reset). A guess at a live code writes one row (its attempt count); a guess anywhere
  // else writes one row here, so that both do the same work and time cannot tell whether the
  // address has an unused code. Nothing reads it; the auth housekeeping deletes rows a day old.
  await sql`
    create table code_attempt_misses (
      email text not null,
      purpose text not null check (purpose in ('verification', 'sign_in', 'password_reset')),
      attempts integer not null,
      last_attempt_at timestamptz not null,
      primary key (email, purpose)
    )
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table code_attempt_misses`.execute(db);
}
