import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // ID tokens that opened a session through POST /api/auth/id-token, so that a token signs in once
  // on every instance: keyed by the SHA-256 of the token's signed part (header and payload; the
  // signature's encoding can vary, the signed part cannot), kept until the token could no longer
  // be taken, then deleted by the auth housekeeping.
  await sql`
    create table oauth_id_token_uses (
      token_hash text primary key,
      provider text not null,
      expires_at timestamptz not null,
      created_at timestamptz not null
    )
  `.execute(db);
  await sql`create index oauth_id_token_uses_expires_at_idx on oauth_id_token_uses (expires_at)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table oauth_id_token_uses`.execute(db);
}
