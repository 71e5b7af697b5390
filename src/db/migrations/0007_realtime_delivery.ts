import { type Kysely, sql } from 'kysely';

/**
 * What the realtime server needs on top of 0006: an order for history, read access for history, the
 * columns the service stamps on a message, and the service's own access to both tables.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  // The service (the tables' owner) manages channels, reads messages back and deletes expired ones.
  // Callers never act as the owner: every caller statement runs as anon or authenticated, where row-level
  // security applies whether or not it is forced on the owner.
  for (const table of ['channels', 'messages']) {
    await sql`alter table ${sql.table(`realtime.${table}`)} no force row level security`.execute(db);
  }

  // Publishes on one channel are serialized (src/realtime/publisher.ts), so `seq` is commit order per channel:
  // history pages by it, and a reconnecting client asks for what came after the last id it saw.
  await sql`alter table realtime.messages add column seq bigint generated always as identity`.execute(db);
  await sql`alter table realtime.messages add column sender_type text not null default 'user'
    check (sender_type in ('user', 'system'))`.execute(db);
  await sql`drop index realtime.messages_channel_name_created_at_idx`.execute(db);
  await sql`create index messages_channel_name_seq_idx on realtime.messages (channel_name, seq)`.execute(db);
  await sql`create index messages_created_at_idx on realtime.messages (created_at)`.execute(db);

  // The service stamps each message with its id and time (reported to subscribers as messageId and
  // timestamp) so that nothing has to be read back. sender_type and seq stay the database's.
  await sql`revoke insert on realtime.messages from authenticated`.execute(db);
  await sql`grant insert (id, channel_id, channel_name, event, payload, sender_id, created_at)
    on realtime.messages to anon, authenticated`.execute(db);
  await sql`grant select on realtime.messages to anon, authenticated`.execute(db);

  // The socket.io Postgres adapter passes messages larger than a notification (presence lists of big
  // channels) through this table; it deletes rows after 30 seconds.
  await sql`
    create table realtime.socket_io_attachments (
      id bigserial unique,
      created_at timestamptz default now(),
      payload bytea
    )
  `.execute(db);

  // One publish in one statement (its own transaction when sent alone): act as the caller, take the
  // channel's lock when asked, queue the notification that carries the message to every instance (it
  // is delivered only if the transaction commits), and insert the message, which the publish
  // policies check. Statements after set_config('role') run as the caller: this function must stay
  // SECURITY INVOKER. The settings are those of callerSettings (src/realtime/as-user.ts).
  await sql`
    create function realtime.publish_as_caller(
      p_user_id uuid, p_channel text, p_id uuid, p_event text, p_payload jsonb, p_sender_id uuid,
      p_created_at timestamptz, p_lock boolean, p_notify_channel text, p_notify text
    ) returns void language plpgsql security invoker as $$
    declare
      caller_role text := case when p_user_id is null then 'anon' else 'authenticated' end;
    begin
      perform set_config('lock_timeout', '5s', true);
      perform set_config('request.user_id', coalesce(p_user_id::text, ''), true);
      perform set_config('request.role', caller_role, true);
      perform set_config('realtime.channel_name', p_channel, true);
      if p_lock then
        perform pg_advisory_xact_lock(hashtextextended('realtime:' || p_channel, 0));
      end if;
      if p_notify is not null then
        perform pg_notify(p_notify_channel, p_notify);
      end if;
      perform set_config('role', caller_role, true);
      insert into realtime.messages (id, channel_name, event, payload, sender_id, created_at)
        values (p_id, p_channel, p_event, p_payload, p_sender_id, p_created_at);
    end
    $$
  `.execute(db);

  // History: signed-in users read the messages of the channel they name, if they may subscribe to it.
  await sql`
    create policy authenticated_can_read_subscribable_channels on realtime.messages
      for select to authenticated
      using (
        channel_name = realtime.channel_name()
        and exists (
          select 1 from realtime.channels c
          where c.enabled and realtime.channel_name() like c.pattern
        )
      )
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop function realtime.publish_as_caller`.execute(db);
  await sql`drop table realtime.socket_io_attachments`.execute(db);
  await sql`drop policy authenticated_can_read_subscribable_channels on realtime.messages`.execute(db);
  await sql`revoke select on realtime.messages from anon, authenticated`.execute(db);
  await sql`revoke insert on realtime.messages from anon, authenticated`.execute(db);
  await sql`grant insert (channel_id, channel_name, event, payload, sender_id) on realtime.messages to authenticated`.execute(
    db,
  );
  await sql`drop index realtime.messages_created_at_idx`.execute(db);
  await sql`drop index realtime.messages_channel_name_seq_idx`.execute(db);
  await sql`create index messages_channel_name_created_at_idx on realtime.messages (channel_name, created_at)`.execute(
    db,
  );
  await sql`alter table realtime.messages drop column sender_type`.execute(db);
  await sql`alter table realtime.messages drop column seq`.execute(db);
  for (const table of ['channels', 'messages']) {
    await sql`alter table ${sql.table(`realtime.${table}`)} force row level security`.execute(db);
  }
}
