import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // Emailed 6-digit codes other than the verification ones: password reset and passwordless
  // sign-in. One live code per address and purpose: a new one replaces (voids) the previous one.
  // Keyed by address, because a sign-in code may be sent to an address that has no account yet.
  await sql`
    create table email_codes (
      email text not null,
      purpose text not null check (purpose in ('password_reset', 'sign_in')),
      -- The account the code was sent for (password reset); null for sign-in codes, whose
      -- account is looked up (or created) when the code is used.
      user_id uuid references users (id) on delete cascade,
      code_hmac text not null,
      expires_at timestamptz not null,
      -- Attempts taken (counted before the code is compared); the code is void after 5.
      failed_attempts integer not null default 0,
      consumed_at timestamptz,
      created_at timestamptz not null,
      primary key (email, purpose)
    )
  `.execute(db);
  await sql`create index email_codes_user_id_idx on email_codes (user_id) where user_id is not null`.execute(db);
  await sql`create index email_codes_expires_at_idx on email_codes (expires_at)`.execute(db);

  // Password-reset tokens, stored only as SHA-256: the emailed link's token, and the tokens handed
  // out for a right reset code. Deleted when used (single use) or when the account's password is reset.
  await sql`
    create table password_reset_tokens (
      token_hash text primary key,
      user_id uuid not null references users (id) on delete cascade,
      kind text not null check (kind in ('link', 'exchanged')),
      expires_at timestamptz not null,
      created_at timestamptz not null
    )
  `.execute(db);
  await sql`create index password_reset_tokens_user_id_idx on password_reset_tokens (user_id)`.execute(db);
  await sql`create index password_reset_tokens_expires_at_idx on password_reset_tokens (expires_at)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table password_reset_tokens`.execute(db);
  await sql`drop table email_codes`.execute(db);
}
