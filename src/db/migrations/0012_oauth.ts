import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // Sign-ins started with an OAuth provider, until the provider sends the browser back: keyed by
  // the SHA-256 of the state handed to the provider, deleted when the callback uses it (one use).
  // provider_verifier is the PKCE verifier towards the provider; it is useless without the
  // provider's code, which only ever reaches the service's callback, and lives 10 minutes.
  await sql`
    create table oauth_authorizations (
      state_hash text primary key,
      provider text not null,
      redirect_uri text not null,
      code_challenge text not null,
      nonce text not null,
      provider_verifier text not null,
      expires_at timestamptz not null,
      created_at timestamptz not null
    )
  `.execute(db);
  await sql`create index oauth_authorizations_expires_at_idx on oauth_authorizations (expires_at)`.execute(db);

  // One-time codes handed to the app after a provider sign-in (insforge_code), stored as SHA-256,
  // bound to the app's PKCE challenge; deleted when exchanged (or tried with a wrong verifier).
  await sql`
    create table oauth_codes (
      code_hash text primary key,
      user_id uuid not null references users (id) on delete cascade,
      code_challenge text not null,
      expires_at timestamptz not null,
      created_at timestamptz not null
    )
  `.execute(db);
  await sql`create index oauth_codes_user_id_idx on oauth_codes (user_id)`.execute(db);
  await sql`create index oauth_codes_expires_at_idx on oauth_codes (expires_at)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table oauth_codes`.execute(db);
  await sql`drop table oauth_authorizations`.execute(db);
}
