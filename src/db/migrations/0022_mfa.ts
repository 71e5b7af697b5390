import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // Second factors. A TOTP secret is kept sealed (AES-256-GCM under a key derived from JWT_SECRET,
  // bound to the factor's id). `last_used_step` is the 30-second step of the last code accepted:
  // a code of that step or an earlier one is refused (no replay).
  await sql`
    create table mfa_factors (
      id uuid primary key default gen_random_uuid(),
      user_id uuid not null references users (id) on delete cascade,
      type text not null check (type in ('totp')),
      friendly_name text,
      secret_sealed text not null,
      status text not null check (status in ('unverified', 'verified')),
      created_at timestamptz not null,
      verified_at timestamptz,
      last_used_at timestamptz,
      last_used_step bigint,
      check ((status = 'verified') = (verified_at is not null))
    )
  `.execute(db);
  await sql`create index mfa_factors_user_id_idx on mfa_factors (user_id)`.execute(db);
  // Wrong second-factor codes per factor (recovery codes count under 'recovery'), in a window.
  await sql`
    create table mfa_attempts (
      user_id uuid not null references users (id) on delete cascade,
      factor_key text not null,
      window_started_at timestamptz not null,
      failures integer not null,
      primary key (user_id, factor_key)
    )
  `.execute(db);
  // Whether the account has a verified factor: kept on the account's row, so that opening a session
  // (which reads the row FOR SHARE) and verifying a first factor (which updates it) are ordered.
  await sql`alter table users add column mfa_enabled boolean not null default false`.execute(db);
  // The session's assurance level, how its factors were proven, and whether it owes a second step
  // (the account had a verified factor when it opened).
  await sql`alter table sessions add column aal text not null default 'aal1' check (aal in ('aal1', 'aal2'))`.execute(
    db,
  );
  await sql`alter table sessions add column amr jsonb not null default '[]'::jsonb`.execute(db);
  await sql`alter table sessions add column mfa_pending boolean not null default false`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`alter table sessions drop column mfa_pending`.execute(db);
  await sql`alter table sessions drop column amr`.execute(db);
  await sql`alter table sessions drop column aal`.execute(db);
  await sql`alter table users drop column mfa_enabled`.execute(db);
  await sql`drop table mfa_attempts`.execute(db);
  await sql`drop table mfa_factors`.execute(db);
}
