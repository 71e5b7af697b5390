import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // The webhook deliveries' listing pages newest first by (created_at, id), with or without a
  // status: both orders are read from an index, whatever the size of the outbox.
  await sql`drop index webhook_outbox_status_idx`.execute(db);
  await sql`create index webhook_outbox_status_idx on webhook_outbox (status, created_at desc, id desc)`.execute(db);
  await sql`create index webhook_outbox_created_at_idx on webhook_outbox (created_at desc, id desc)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop index webhook_outbox_created_at_idx`.execute(db);
  await sql`drop index webhook_outbox_status_idx`.execute(db);
  await sql`create index webhook_outbox_status_idx on webhook_outbox (status, created_at desc)`.execute(db);
}
