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

-- One publish in one statement, as the previous version sends it: kept so that its instances keep
-- publishing during a rolling upgrade (this version sends realtime.publish_as_callers below). Take the
-- channel's lock when asked, queue the notification that carries the message to every instance
-- (delivered only if the transaction commits), then act as the caller and insert the message, which
-- the publish policies check. It must stay SECURITY INVOKER.
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

-- The messages waiting on one channel, in one statement (its own transaction when sent alone): take
-- the channel's lock once when asked, then for each message in turn act as its caller and insert it,
-- which the publish policies check, and queue its notification (delivered only if the transaction
-- commits, in the order queued). Returns one word per message: 'stored'; 'refused' when row-level
-- security refused it; or the SQLSTATE of an error its insert met (a value the database cannot take,
-- such as a sender id that is no uuid; an error a policy raised). Such a message is left out, and
-- only it: its insert and notification are undone together (a subtransaction). Errors that are not
-- one message's doing (a conflict, a lock timeout, the server) end the statement. The callers are
-- those of one user (the publisher batches per caller): whatever a policy leaves in the transaction
-- reaches that user's next message only. `seq` follows the order given, which is the order of
-- delivery. The arrays are parallel, one element per message
-- (the payloads one JSON array, sender ids and times as text, cast per message); the caller keeps
-- them at most 32 long (each stored message holds a subtransaction id until the commit, and
-- PostgreSQL tracks 64 per transaction cheaply). It leaves the role and settings as it found them,
-- and must stay SECURITY INVOKER.
create or replace function realtime.publish_as_callers(
  p_channel text, p_user_ids uuid[], p_ids uuid[], p_events text[], p_payloads jsonb,
  p_sender_ids text[], p_created_at text[], p_lock boolean, p_notify_channel text, p_notifies text[]
) returns text[] language plpgsql security invoker as $$
declare
  own_role text := current_setting('role');
  own_user_id text := current_setting('request.user_id', true);
  own_request_role text := current_setting('request.role', true);
  own_channel text := current_setting('realtime.channel_name', true);
  total integer := coalesce(array_length(p_ids, 1), 0);
  outcomes text[] := '{}';
  state text;
begin
  if coalesce(array_length(p_user_ids, 1), 0) <> total or coalesce(array_length(p_events, 1), 0) <> total
    or jsonb_array_length(p_payloads) <> total or coalesce(array_length(p_sender_ids, 1), 0) <> total
    or coalesce(array_length(p_created_at, 1), 0) <> total
    or (p_notifies is not null and coalesce(array_length(p_notifies, 1), 0) <> total) then
    raise exception 'realtime.publish_as_callers: one element per message in every array is needed';
  end if;
  perform set_config('lock_timeout', '5s', true);
  if p_lock then
    perform pg_advisory_xact_lock(hashtextextended('realtime:' || p_channel, 0));
  end if;
  for i in 1 .. total loop
    begin
      perform realtime.act_as_caller(p_user_ids[i], p_channel);
      insert into realtime.messages (id, channel_name, event, payload, sender_id, created_at)
        values (p_ids[i], p_channel, p_events[i], p_payloads -> (i - 1), p_sender_ids[i]::uuid,
                p_created_at[i]::timestamptz);
      perform set_config('role', own_role, true);
      if p_notifies[i] is not null then
        perform pg_notify(p_notify_channel, p_notifies[i]);
      end if;
      outcomes := outcomes || 'stored'::text;
    exception when others then
      get stacked diagnostics state = returned_sqlstate;
      -- What is not the message's doing ends the statement: a conflict to retry (class 40), a lock
      -- not had in time (55P03), resources (53), the server (57, 58, XX), the transaction (25).
      if left(state, 2) in ('40', '53', '57', '58', 'XX', '25') or state = '55P03' then
        raise;
      end if;
      -- Row-level security's refusal is the policies' answer; anything else (a policy's own error,
      -- a value the database cannot take) fails this message alone, with its SQLSTATE.
      if state = '42501' and sqlerrm like '%row-level security%' then
        state := 'refused';
      end if;
      outcomes := outcomes || state;
    end;
  end loop;
  perform set_config('role', own_role, true);
  perform set_config('request.user_id', coalesce(own_user_id, ''), true);
  perform set_config('request.role', coalesce(own_request_role, ''), true);
  perform set_config('realtime.channel_name', coalesce(own_channel, ''), true);
  return outcomes;
end
$$;
revoke execute on function realtime.publish_as_callers(text, uuid[], uuid[], text[], jsonb, text[], text[], boolean, text, text[]) from public;
grant execute on function realtime.publish_as_callers(text, uuid[], uuid[], text[], jsonb, text[], text[], boolean, text, text[]) to current_user;
