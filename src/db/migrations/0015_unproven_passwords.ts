import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // The SHA-256 of the binding handed to the client that made the sign-up: a verification that
  // carries it proves that whoever chose the pending password also holds the mailbox.
  await sql`alter table email_verifications add column binding_hash text`.execute(db);
  // Set when a verification activated a sign-up's password without that sign-up's binding: the
  // mailbox was proven, not who chose the password. Cleared when the owner proves the mailbox
  // again (the password goes then) or resets the password.
  await sql`alter table users add column password_unproven_since timestamptz`.execute(db);
  // Known-device signals are bound to it (known-device.ts): raised when the password is removed,
  // reset or changed, so that devices known before (perhaps someone else's) are known no more.
  await sql`alter table users add column device_epoch integer not null default 0`.execute(db);
  // A consumed verification's pending password has done its work: kept, a re-send to the account
  // (when it has no password) would let that password in again.
  await sql`update email_verifications set pending_password_hash = null where consumed_at is not null`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`alter table users drop column device_epoch`.execute(db);
  await sql`alter table users drop column password_unproven_since`.execute(db);
  await sql`alter table email_verifications drop column binding_hash`.execute(db);
}
