import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // Passkeys (WebAuthn credentials). `credential_id` and `public_key` are base64url, as the WebAuthn
  // library hands them over. `counter` is the authenticator's signature counter as last seen: an
  // assertion must move it forward, unless the authenticator keeps it at 0.
  await sql`
    create table passkeys (
      id uuid primary key default gen_random_uuid(),
      user_id uuid not null references users (id) on delete cascade,
      credential_id text not null unique,
      public_key text not null,
      counter bigint not null,
      transports jsonb not null default '[]'::jsonb,
      device_type text not null check (device_type in ('singleDevice', 'multiDevice')),
      backed_up boolean not null,
      friendly_name text,
      created_at timestamptz not null,
      last_used_at timestamptz
    )
  `.execute(db);
  await sql`create index passkeys_user_id_idx on passkeys (user_id)`.execute(db);
  // WebAuthn challenges are one-time secrets too: registration challenges (one per session),
  // authentication challenges (found by the SHA-256 of their id; bound to a session when they were
  // asked for with one). The challenge itself is kept as an HMAC in code_hmac.
  await sql`alter table one_time_codes drop constraint one_time_codes_purpose_check`.execute(db);
  await sql`
    alter table one_time_codes add constraint one_time_codes_purpose_check check (purpose in (
      'verification', 'sign_in', 'password_reset', 'password_reset_token', 'recovery',
      'passkey_registration', 'passkey_authentication'))
  `.execute(db);
  await sql`alter table one_time_codes add column session_id uuid references sessions (id) on delete cascade`.execute(
    db,
  );
  await sql`create index one_time_codes_session_id_idx on one_time_codes (session_id) where session_id is not null`.execute(
    db,
  );
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`delete from one_time_codes where purpose in ('passkey_registration', 'passkey_authentication')`.execute(db);
  await sql`alter table one_time_codes drop column session_id`.execute(db);
  await sql`alter table one_time_codes drop constraint one_time_codes_purpose_check`.execute(db);
  await sql`
    alter table one_time_codes add constraint one_time_codes_purpose_check check (purpose in (
      'verification', 'sign_in', 'password_reset', 'password_reset_token', 'recovery'))
  `.execute(db);
  await sql`drop table passkeys`.execute(db);
}
