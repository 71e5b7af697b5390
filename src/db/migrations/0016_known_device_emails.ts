import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // When the address last got a reset or sign-in email from the reserve: one per 15 minutes beyond
  // the daily budget that any requester may use, so that no one can keep the owner's way back in.
  await sql`alter table email_send_log add column reserve_sent_at timestamptz not null default to_timestamp(0)`.execute(
    db,
  );
  // Emails to one address asked for from a device that has signed in to its account before (a
  // signed device cookie or token): a budget of their own, which strangers cannot spend.
  await sql`
    create table email_send_devices (
      email text not null,
      device_id text not null,
      window_started_at timestamptz not null,
      sent_in_window integer not null default 0,
      last_sent_at timestamptz not null,
      primary key (email, device_id)
    )
  `.execute(db);
  await sql`create index email_send_devices_window_idx on email_send_devices (window_started_at)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table email_send_devices`.execute(db);
  await sql`alter table email_send_log drop column reserve_sent_at`.execute(db);
}
