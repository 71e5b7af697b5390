import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // A provider round trip is either a sign-in (the app's PKCE challenge, for the one-time code) or
  // a link started from a session (the account and the session it was started for, which must
  // still be live when the provider sends the browser back): never both.
  await sql`alter table oauth_authorizations alter column code_challenge drop not null`.execute(db);
  await sql`
    alter table oauth_authorizations
      add column link_user_id uuid references users (id) on delete cascade,
      add column link_session_id uuid,
      add constraint oauth_authorizations_kind check (
        (link_user_id is null and link_session_id is null and code_challenge is not null)
        or (link_user_id is not null and link_session_id is not null and code_challenge is null)
      )
  `.execute(db);
  await sql`
    create index oauth_authorizations_link_user_id_idx on oauth_authorizations (link_user_id)
    where link_user_id is not null
  `.execute(db);

  // Identities their owner unlinked: their provider does not link them to that account again by
  // address (only a link from the account's session does, which deletes the row).
  await sql`
    create table unlinked_identities (
      user_id uuid not null references users (id) on delete cascade,
      provider text not null,
      provider_account_id text not null,
      unlinked_at timestamptz not null,
      primary key (user_id, provider, provider_account_id)
    )
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table unlinked_identities`.execute(db);
  await sql`delete from oauth_authorizations where link_user_id is not null`.execute(db);
  await sql`
    alter table oauth_authorizations
      drop constraint oauth_authorizations_kind,
      drop column link_session_id,
      drop column link_user_id
  `.execute(db);
  await sql`alter table oauth_authorizations alter column code_challenge set not null`.execute(db);
}
