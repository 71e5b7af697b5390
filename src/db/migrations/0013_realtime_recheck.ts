import { type Kysely, sql } from 'kysely';

/**
 * May these callers subscribe to these channels? One statement for any number of (user, channel)
 * pairs: subscribing checks one, and the server re-checks its live subscriptions in batches. For
 * each pair the function acts as the caller (the settings of callerSettings in
 * src/realtime/as-user.ts, then the role) and asks whether a SELECT of realtime.channels finds a
 * row, so the subscribe policies decide and nothing else; it then returns to the role and settings
 * it was called with. It must stay SECURITY INVOKER, and only the service may execute it.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create function realtime.subscribable(p_user_ids uuid[], p_channels text[])
    returns table (ordinal integer, allowed boolean) language plpgsql security invoker as $$
    declare
      own_role text := current_setting('role');
      own_user_id text := current_setting('request.user_id', true);
      own_request_role text := current_setting('request.role', true);
      own_channel text := current_setting('realtime.channel_name', true);
      caller_role text;
    begin
      if coalesce(array_length(p_user_ids, 1), 0) <> coalesce(array_length(p_channels, 1), 0) then
        raise exception 'realtime.subscribable: as many user ids as channels are needed';
      end if;
      for i in 1 .. coalesce(array_length(p_channels, 1), 0) loop
        caller_role := case when p_user_ids[i] is null then 'anon' else 'authenticated' end;
        perform set_config('request.user_id', coalesce(p_user_ids[i]::text, ''), true);
        perform set_config('request.role', caller_role, true);
        perform set_config('realtime.channel_name', p_channels[i], true);
        perform set_config('role', caller_role, true);
        ordinal := i;
        allowed := exists (select 1 from realtime.channels);
        perform set_config('role', own_role, true);
        return next;
      end loop;
      -- Called inside a longer transaction, the function leaves the settings as it found them.
      perform set_config('request.user_id', coalesce(own_user_id, ''), true);
      perform set_config('request.role', coalesce(own_request_role, ''), true);
      perform set_config('realtime.channel_name', coalesce(own_channel, ''), true);
    end
    $$
  `.execute(db);
  // It answers for any user: only the service (the role that migrates) may call it.
  await sql`revoke execute on function realtime.subscribable(uuid[], text[]) from public`.execute(db);
  await sql`grant execute on function realtime.subscribable(uuid[], text[]) to current_user`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop function realtime.subscribable(uuid[], text[])`.execute(db);
}
