import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // The audit log: one row per account event, written in the transaction of the change it records.
  // Rows outlive the accounts they name (no foreign keys): a deleted account's history stays until
  // AUDIT_RETENTION_DAYS. Newest first by id; never a secret, code, token or password.
  await sql`
    create table audit_log (
      id bigint generated always as identity primary key,
      occurred_at timestamptz not null,
      type text not null,
      outcome text not null check (outcome in ('success', 'failure')),
      method text,
      actor_id uuid,
      user_id uuid,
      session_id uuid,
      ip text,
      user_agent text,
      details jsonb not null default '{}'::jsonb
    )
  `.execute(db);
  await sql`create index audit_log_user_id_idx on audit_log (user_id, id desc) where user_id is not null`.execute(db);
  await sql`create index audit_log_type_idx on audit_log (type, id desc)`.execute(db);
  await sql`create index audit_log_occurred_at_idx on audit_log (occurred_at)`.execute(db);
  // The webhook outbox: an event to deliver, written in the transaction of the change it announces.
  // Its id is the webhook-id header, the same on every attempt.
  await sql`
    create table webhook_outbox (
      id uuid primary key default gen_random_uuid(),
      event_type text not null,
      payload jsonb not null,
      created_at timestamptz not null,
      status text not null default 'pending' check (status in ('pending', 'delivered', 'failed')),
      attempts integer not null default 0,
      next_attempt_at timestamptz not null,
      last_attempt_at timestamptz,
      last_status integer,
      last_error text,
      delivered_at timestamptz
    )
  `.execute(db);
  await sql`create index webhook_outbox_due_idx on webhook_outbox (next_attempt_at) where status = 'pending'`.execute(
    db,
  );
  await sql`create index webhook_outbox_status_idx on webhook_outbox (status, created_at desc)`.execute(db);
  // Linked identities get an id of their own (the identities operations name them by it) and the
  // address the provider vouched for when it was linked.
  await sql`alter table user_providers add column id uuid not null default gen_random_uuid()`.execute(db);
  await sql`alter table user_providers add constraint user_providers_id_key unique (id)`.execute(db);
  await sql`alter table user_providers add column email text`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`alter table user_providers drop column email`.execute(db);
  await sql`alter table user_providers drop column id`.execute(db);
  await sql`drop table webhook_outbox`.execute(db);
  await sql`drop table audit_log`.execute(db);
}
