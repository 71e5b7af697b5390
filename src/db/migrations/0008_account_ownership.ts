import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // Set when a second sign-up was made for an address before it was verified: verifying it then
  // proves the mailbox but activates no password (neither sign-up can be told to be the owner's).
  await sql`alter table email_verifications add column contested boolean not null default false`.execute(db);
  // A sign-up's password waits in pending_password_hash until the address is verified; an
  // unverified account holds none of its own (older rows kept a copy there).
  await sql`
    update users set password_hash = null
    where not email_verified
      and id in (select user_id from email_verifications where pending_password_hash is not null)
  `.execute(db);

  // Per address (known or not): code attempts in the same daily window as the emails, so that
  // every code submission records the same thing whether or not the address has an account.
  await sql`alter table email_send_log add column code_attempts_in_window integer not null default 0`.execute(db);

  // Emails to one address caused by one requester (client IP) per day: a requester can use only a
  // small share of an address's daily emails, so others cannot exhaust the owner's.
  await sql`
    create table email_send_requesters (
      email text not null,
      requester text not null,
      window_started_at timestamptz not null,
      sent_in_window integer not null default 0,
      primary key (email, requester)
    )
  `.execute(db);
  // Every instance reads the recently revoked sessions at start and after a lost notification connection.
  await sql`create index sessions_revoked_at_idx on sessions (revoked_at) where revoked_at is not null`.execute(db);
  await sql`create index email_send_log_window_idx on email_send_log (window_started_at)`.execute(db);
  await sql`create index email_send_requesters_window_idx on email_send_requesters (window_started_at)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table email_send_requesters`.execute(db);
  await sql`drop index sessions_revoked_at_idx`.execute(db);
  await sql`drop index email_send_log_window_idx`.execute(db);
  await sql`alter table email_send_log drop column code_attempts_in_window`.execute(db);
  await sql`alter table email_verifications drop column contested`.execute(db);
}
