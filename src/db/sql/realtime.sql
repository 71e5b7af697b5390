-- Realtime authorization: who the caller is, and how subscribing and publishing act as the caller.
--
-- A repeatable file: applied after the migrations at every start whose copy of this file differs
-- from the last one applied (src/db/repeatable-sql.ts records its hash). Only `create or replace`
-- belongs here; tables, grants and policies stay in migrations. The row-level-security policies
-- (migrations 0006 and 0007, or the operator's own) decide; these functions only make a transaction
-- act as the caller before the policies are asked.

-- What the policies read: the caller's user id and role, and the channel subscribed to or published
-- on. They read the transaction-local settings that realtime.act_as_caller writes.
create or replace function auth.uid() returns uuid language sql stable as $$
  select nullif(current_setting('request.user_id', true), '')::uuid
$$;

create or replace function auth.role() returns text language sql stable as $$
  select coalesce(nullif(current_setting('request.role', true), ''), 'anon')
$$;

create or replace function realtime.channel_name() returns text language sql stable as $$
  select nullif(current_setting('realtime.channel_name', true), '')
$$;

-- Makes the rest of the transaction act as the caller: the settings above, then the role itself
-- (set_config('role') is SET LOCAL ROLE): `authenticated` for a user, `anon` without one. Every
-- statement after it runs as that role, so row-level security applies, until the transaction ends
-- or the role is set back. It must stay SECURITY INVOKER (a SECURITY DEFINER function may not change
-- the role), and only the service may execute it.
create or replace function realtime.act_as_caller(p_user_id uuid, p_channel text)
returns void language plpgsql security invoker as $$
declare
  caller_role text := case when p_user_id is null then 'anon' else 'authenticated' end;
begin
  perform set_config('request.user_id', coalesce(p_user_id::text, ''), true);
  perform set_config('request.role', caller_role, true);
  perform set_config('realtime.channel_name', p_channel, true);
  perform set_config('role', caller_role, true);
end
$$;
revoke execute on function realtime.act_as_caller(uuid, text) from public;
grant execute on function realtime.act_as_caller(uuid, text) to current_user;

-- May these callers subscribe to these channels? One statement for any number of (user, channel)
-- pairs: subscribing asks one, and the server re-checks its live subscriptions in batches. For each
-- pair it acts as the caller and asks whether a SELECT of realtime.channels finds a row, so the
-- subscribe policies decide and nothing else; it then returns to the role and settings it was called
-- with. It must stay SECURITY INVOKER, and only the service may execute it.
create or replace function realtime.subscribable(p_user_ids uuid[], p_channels text[])
returns table (ordinal integer, allowed boolean) language plpgsql security invoker as $$
declare
  own_role text := current_setting('role');
  own_user_id text := current_setting('request.user_id', true);
  own_request_role text := current_setting('request.role', true);
  own_channel text := current_setting('realtime.channel_name', true);
begin
  if coalesce(array_length(p_user_ids, 1), 0) <> coalesce(array_length(p_channels, 1), 0) then
    raise exception 'realtime.subscribable: as many user ids as channels are needed';
  end if;
  for i in 1 .. coalesce(array_length(p_channels, 1), 0) loop
    perform realtime.act_as_caller(p_user_ids[i], p_channels[i]);
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
$$;
revoke execute on function realtime.subscribable(uuid[], text[]) from public;
grant execute on function realtime.subscribable(uuid[], text[]) to current_user;

-- One publish in one statement (its own transaction when sent alone): take the channel's lock when
-- asked, queue the notification that carries the message to every instance (delivered only if the
-- transaction commits), then act as the caller and insert the message, which the publish policies
-- check. It must stay SECURITY INVOKER.
create or replace function realtime.publish_as_caller(
  p_user_id uuid, p_channel text, p_id uuid, p_event text, p_payload jsonb, p_sender_id uuid,
  p_created_at timestamptz, p_lock boolean, p_notify_channel text, p_notify text
) returns void language plpgsql security invoker as $$
begin
  perform set_config('lock_timeout', '5s', true);
  if p_lock then
    perform pg_advisory_xact_lock(hashtextextended('realtime:' || p_channel, 0));
  end if;
  if p_notify is not null then
    perform pg_notify(p_notify_channel, p_notify);
  end if;
  perform realtime.act_as_caller(p_user_id, p_channel);
  insert into realtime.messages (id, channel_name, event, payload, sender_id, created_at)
    values (p_id, p_channel, p_event, p_payload, p_sender_id, p_created_at);
end
$$;
