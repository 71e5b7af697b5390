import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table users (
      id uuid primary key default gen_random_uuid(),
      email text not null,
      password_hash text,
      profile jsonb not null default '{}'::jsonb,
      metadata jsonb not null default '{}'::jsonb,
      email_verified boolean not null default false,
      role text not null default 'user' check (role in ('user', 'admin')),
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now(),
      constraint users_email_lower check (email = lower(email))
    )
  `.execute(db);
  await sql`create unique index users_email_key on users (email)`.execute(db);
  await sql`
    create trigger users_touch before update on users
    for each row execute function public.touch_updated_at()
  `.execute(db);

  // How a user can sign in: 'email' for a password account; OAuth providers later.
  await sql`
    create table user_providers (
      user_id uuid not null references users (id) on delete cascade,
      provider text not null,
      provider_account_id text not null,
      created_at timestamptz not null default now(),
      primary key (user_id, provider),
      unique (provider, provider_account_id)
    )
  `.execute(db);

  // One live verification per user: a new one replaces (voids) the previous code and link.
  await sql`
    create table email_verifications (
      user_id uuid primary key references users (id) on delete cascade,
      code_hmac text not null,
      token_hash text not null unique,
      code_expires_at timestamptz not null,
      token_expires_at timestamptz not null,
      failed_attempts integer not null default 0,
      -- The password chosen by the sign-up that asked for this verification; it becomes the
      -- account's password only when the address is verified (so nobody can pre-register someone
      -- else's address with a password of their own).
      pending_password_hash text,
      consumed_at timestamptz,
      created_at timestamptz not null default now()
    )
  `.execute(db);

  // Verification emails per address (the 60 s cooldown and a daily cap), kept in the database so
  // that the limits hold across instances.
  await sql`
    create table email_send_log (
      email text primary key,
      last_sent_at timestamptz not null,
      window_started_at timestamptz not null,
      sent_in_window integer not null default 1
    )
  `.execute(db);

  await sql`
    create table sessions (
      id uuid primary key default gen_random_uuid(),
      user_id uuid not null references users (id) on delete cascade,
      refresh_token_hash text not null unique,
      client_type text not null check (client_type in ('web', 'mobile', 'desktop')),
      created_at timestamptz not null,
      last_used_at timestamptz not null,
      expires_at timestamptz not null,
      revoked_at timestamptz,
      user_agent text,
      ip text
    )
  `.execute(db);
  await sql`create index sessions_user_id_idx on sessions (user_id)`.execute(db);

  // Refresh tokens that were rotated away: presenting one again means the session is compromised.
  await sql`
    create table rotated_refresh_tokens (
      token_hash text primary key,
      session_id uuid not null references sessions (id) on delete cascade,
      rotated_at timestamptz not null
    )
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  for (const table of [
    'rotated_refresh_tokens',
    'sessions',
    'email_send_log',
    'email_verifications',
    'user_providers',
    'users',
  ]) {
    await sql`drop table ${sql.table(table)}`.execute(db);
  }
}
