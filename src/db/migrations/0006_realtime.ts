import { type Kysely, sql } from 'kysely';

/**
 * The realtime facility's tables and the row-level-security policies that govern them:
 * subscribing is SELECT on realtime.channels, publishing is INSERT on realtime.messages.
 * Policies speak of the caller through transaction-local settings, read by auth.uid(),
 * auth.role() and realtime.channel_name(); src/realtime/as-user.ts sets them (with SET LOCAL ROLE).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`create schema if not exists realtime`.execute(db);
  await sql`create schema if not exists auth`.execute(db);

  // Roles belong to the whole cluster, so they may exist already (made by an operator, for another
  // database, or by a migration running at the same moment). Only a missing one is created, so an
  // owner without CREATEROLE can migrate once an operator has made them.
  for (const role of ['anon', 'authenticated']) {
    await sql`
      do $$ begin
        if not exists (select from pg_roles where rolname = ${sql.lit(role)}) then
          create role ${sql.id(role)} nologin;
        end if;
      exception when duplicate_object or unique_violation then null;
      end $$
    `.execute(db);
    // The service switches to these roles with SET LOCAL ROLE, which needs membership (implicit for
    // a superuser). Without it, every run-as-caller statement would fail: say so now.
    await sql`
      do $$ begin
        if not pg_has_role(current_user, ${sql.lit(role)}, 'member') then
          execute format('grant %I to %I', ${sql.lit(role)}, current_user);
        end if;
      exception when others then
        raise warning 'realtime: % cannot be granted to %: %', ${sql.lit(role)}, current_user, sqlerrm;
      end $$
    `.execute(db);
  }

  await sql`
    create function auth.uid() returns uuid language sql stable as $$
      select nullif(current_setting('request.user_id', true), '')::uuid
    $$
  `.execute(db);
  await sql`
    create function auth.role() returns text language sql stable as $$
      select coalesce(nullif(current_setting('request.role', true), ''), 'anon')
    $$
  `.execute(db);
  await sql`
    create function realtime.channel_name() returns text language sql stable as $$
      select nullif(current_setting('realtime.channel_name', true), '')
    $$
  `.execute(db);

  await sql`
    create table realtime.channels (
      id uuid primary key default gen_random_uuid(),
      pattern text not null unique,
      description text,
      enabled boolean not null default true,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now()
    )
  `.execute(db);
  await sql`
    create table realtime.messages (
      id uuid primary key default gen_random_uuid(),
      channel_id uuid references realtime.channels (id) on delete set null,
      channel_name text not null,
      event text not null,
      payload jsonb not null default '{}',
      sender_id uuid,
      created_at timestamptz not null default now()
    )
  `.execute(db);
  await sql`create index messages_channel_name_created_at_idx on realtime.messages (channel_name, created_at)`.execute(
    db,
  );

  for (const table of ['channels', 'messages']) {
    await sql`alter table ${sql.table(`realtime.${table}`)} enable row level security`.execute(db);
    await sql`alter table ${sql.table(`realtime.${table}`)} force row level security`.execute(db);
  }
  await sql`grant usage on schema realtime, auth to anon, authenticated`.execute(db);
  await sql`grant select on realtime.channels to anon, authenticated`.execute(db);
  // Callers name the channel, event, payload and sender; id and created_at are the database's.
  await sql`grant insert (channel_id, channel_name, event, payload, sender_id) on realtime.messages to authenticated`.execute(
    db,
  );

  // Signed-in users may subscribe to enabled channels whose pattern (LIKE) matches the channel.
  await sql`
    create policy authenticated_can_subscribe_enabled_channels on realtime.channels
      for select to authenticated
      using (enabled and realtime.channel_name() like pattern)
  `.execute(db);
  // ... and publish to such a channel, only as themselves, only under its name, and (when the
  // message names a channel row) only into that row.
  await sql`
    create policy authenticated_can_publish_as_self on realtime.messages
      for insert to authenticated
      with check (
        sender_id = auth.uid()
        and channel_name = realtime.channel_name()
        and exists (
          select 1 from realtime.channels c
          where c.enabled and realtime.channel_name() like c.pattern
            and (messages.channel_id is null or c.id = messages.channel_id)
        )
      )
  `.execute(db);

  // Every instance caches the policies; a change to them is announced on this channel, so that
  // each one (LISTEN) reloads at once. Creating an event trigger needs a superuser: without one,
  // the instances fall back to their time-to-live (so does PGlite, which never fires them).
  await sql`
    create function realtime.notify_policy_change() returns event_trigger language plpgsql as $$
    begin
      perform pg_notify('realtime_policies_changed', tg_tag);
    end
    $$
  `.execute(db);
  await sql`
    do $$ begin
      create event trigger realtime_policy_change on ddl_command_end
        when tag in ('CREATE POLICY', 'ALTER POLICY', 'DROP POLICY', 'ALTER TABLE', 'DROP TABLE')
        execute function realtime.notify_policy_change();
    exception when insufficient_privilege then
      raise notice 'realtime: no event trigger (needs a superuser); policy changes are seen after the cache time-to-live';
    end $$
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop event trigger if exists realtime_policy_change`.execute(db);
  await sql`drop function realtime.notify_policy_change()`.execute(db);
  await sql`drop table realtime.messages`.execute(db);
  await sql`drop table realtime.channels`.execute(db);
  await sql`drop function realtime.channel_name()`.execute(db);
  await sql`drop function auth.role()`.execute(db);
  await sql`drop function auth.uid()`.execute(db);
  await sql`drop schema realtime`.execute(db);
  await sql`drop schema auth`.execute(db);
}
