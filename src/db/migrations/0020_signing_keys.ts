import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // The asymmetric keys that sign access tokens. The public half is kept as a JWK; the private half
  // only sealed (AES-256-GCM under a key derived from JWT_SECRET, bound to the kid). At most one
  // key signs (`current`) and at most one waits to (`standby`).
  await sql`
    create table signing_keys (
      kid text primary key,
      alg text not null check (alg in ('ES256', 'RS256', 'EdDSA')),
      status text not null check (status in ('standby', 'current', 'previous', 'revoked')),
      public_jwk jsonb not null,
      private_key_sealed text not null,
      created_at timestamptz not null,
      activated_at timestamptz,
      retired_at timestamptz,
      revoked_at timestamptz,
      check ((status = 'revoked') = (revoked_at is not null))
    )
  `.execute(db);
  await sql`create unique index signing_keys_one_current_idx on signing_keys (status) where status = 'current'`.execute(
    db,
  );
  await sql`create unique index signing_keys_one_standby_idx on signing_keys (status) where status = 'standby'`.execute(
    db,
  );
  // Access tokens were HS256 before this version. Where sessions are open, the ones already issued
  // stay valid for one access-token lifetime from now (see src/auth/legacy-tokens.ts); a database
  // without open sessions has no such token to honour, and never accepts one.
  await sql`
    insert into app_settings (key, value)
    select 'legacy_hs256_since', to_char(now() at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
    where exists (select 1 from sessions where revoked_at is null and expires_at > now())
    on conflict (key) do nothing
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`delete from app_settings where key = 'legacy_hs256_since'`.execute(db);
  await sql`drop table signing_keys`.execute(db);
}
