import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // Every one-time secret in one table: the emailed 6-digit codes (verification, sign-in, password
  // reset; one live code per address and purpose, a new one voids the previous one), the link
  // tokens (the verification link rides on its code's row; reset links and the tokens handed out
  // for a right reset code are rows of their own) and, later, recovery codes (any number per
  // account). Codes are stored as an HMAC, tokens as SHA-256.
  await sql`
    create table one_time_codes (
      id bigint generated always as identity primary key,
      purpose text not null
        check (purpose in ('verification', 'sign_in', 'password_reset', 'password_reset_token', 'recovery')),
      email text not null,
      -- The account the secret was issued for; null for sign-in codes, whose account is looked
      -- up (or created) when the code is used.
      user_id uuid references users (id) on delete cascade,
      code_hmac text,
      code_expires_at timestamptz,
      token_hash text unique,
      token_expires_at timestamptz,
      -- Attempts taken at the code (counted before it is compared); the code is void after 5.
      failed_attempts integer not null default 0,
      consumed_at timestamptz,
      created_at timestamptz not null,
      -- Verification rows only: the sign-up waiting for the address to be verified (its password,
      -- whether sign-ups competed, the SHA-256 of its client's binding). Verification rows are
      -- kept after they expire, for this.
      pending_password_hash text,
      contested boolean not null default false,
      binding_hash text,
      check ((code_hmac is null) = (code_expires_at is null)),
      check ((token_hash is null) = (token_expires_at is null)),
      check (code_hmac is not null or token_hash is not null)
    )
  `.execute(db);
  await sql`
    create unique index one_time_codes_address_idx on one_time_codes (email, purpose)
      where purpose in ('verification', 'sign_in', 'password_reset')
  `.execute(db);
  await sql`create index one_time_codes_user_id_idx on one_time_codes (user_id) where user_id is not null`.execute(db);
  // Lookups by address whatever the purpose, and with the purpose as a parameter (which a generic
  // plan cannot match to the partial unique index's predicate).
  await sql`create index one_time_codes_email_idx on one_time_codes (email)`.execute(db);
  // The hourly deletion of what has expired (verification rows stay: they hold pending sign-ups).
  await sql`
    create index one_time_codes_expiry_idx on one_time_codes (greatest(code_expires_at, token_expires_at))
      where purpose <> 'verification'
  `.execute(db);

  // What the old tables held, so that what was emailed before the upgrade still works. Every
  // verification row (each holds its account's pending sign-up); its code HMAC has the old layout
  // (address and code only), marked so the check can tell (see src/auth/one-time-codes.ts).
  await sql`
    insert into one_time_codes (purpose, email, user_id, code_hmac, code_expires_at, token_hash, token_expires_at,
      failed_attempts, consumed_at, created_at, pending_password_hash, contested, binding_hash)
    select 'verification', u.email, v.user_id, 'address:' || v.code_hmac, v.code_expires_at, v.token_hash,
      v.token_expires_at, v.failed_attempts, v.consumed_at, v.created_at, v.pending_password_hash, v.contested,
      v.binding_hash
    from email_verifications v join users u on u.id = v.user_id
  `.execute(db);
  // Live sign-in and reset codes (their HMAC already has the one layout: purpose, address, code).
  await sql`
    insert into one_time_codes (purpose, email, user_id, code_hmac, code_expires_at, failed_attempts, created_at)
    select purpose, email, user_id, code_hmac, expires_at, failed_attempts, created_at
    from email_codes where consumed_at is null and expires_at > now()
  `.execute(db);
  // Live reset links and exchanged reset tokens.
  await sql`
    insert into one_time_codes (purpose, email, user_id, token_hash, token_expires_at, created_at)
    select 'password_reset_token', u.email, t.user_id, t.token_hash, t.expires_at, t.created_at
    from password_reset_tokens t join users u on u.id = t.user_id
    where t.expires_at > now()
  `.execute(db);

  await sql`drop table password_reset_tokens`.execute(db);
  await sql`drop table email_codes`.execute(db);
  await sql`drop table email_verifications`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table email_verifications (
      user_id uuid primary key references users (id) on delete cascade,
      code_hmac text not null,
      token_hash text not null unique,
      code_expires_at timestamptz not null,
      token_expires_at timestamptz not null,
      failed_attempts integer not null default 0,
      pending_password_hash text,
      consumed_at timestamptz,
      created_at timestamptz not null default now(),
      contested boolean not null default false,
      binding_hash text
    )
  `.execute(db);
  await sql`
    create table email_codes (
      email text not null,
      purpose text not null check (purpose in ('password_reset', 'sign_in')),
      user_id uuid references users (id) on delete cascade,
      code_hmac text not null,
      expires_at timestamptz not null,
      failed_attempts integer not null default 0,
      consumed_at timestamptz,
      created_at timestamptz not null,
      primary key (email, purpose)
    )
  `.execute(db);
  await sql`create index email_codes_user_id_idx on email_codes (user_id) where user_id is not null`.execute(db);
  await sql`create index email_codes_expires_at_idx on email_codes (expires_at)`.execute(db);
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
  // Verification rows keep their pending sign-ups; codes issued since the upgrade (the new HMAC
  // layout) no longer match and must be sent again.
  await sql`
    insert into email_verifications (user_id, code_hmac, token_hash, code_expires_at, token_expires_at,
      failed_attempts, pending_password_hash, consumed_at, created_at, contested, binding_hash)
    select user_id, regexp_replace(code_hmac, '^address:', ''), token_hash, code_expires_at, token_expires_at,
      failed_attempts, pending_password_hash, consumed_at, created_at, contested, binding_hash
    from one_time_codes where purpose = 'verification' and user_id is not null
  `.execute(db);
  await sql`
    insert into email_codes (email, purpose, user_id, code_hmac, expires_at, failed_attempts, consumed_at, created_at)
    select email, purpose, user_id, code_hmac, code_expires_at, failed_attempts, consumed_at, created_at
    from one_time_codes where purpose in ('sign_in', 'password_reset')
  `.execute(db);
  await sql`
    insert into password_reset_tokens (token_hash, user_id, kind, expires_at, created_at)
    select token_hash, user_id, 'link', token_expires_at, created_at
    from one_time_codes where purpose = 'password_reset_token' and user_id is not null
  `.execute(db);
  await sql`drop table one_time_codes`.execute(db);
}
