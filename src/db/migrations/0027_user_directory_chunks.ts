import { type Kysely, sql } from 'kysely';

// Exact bookmarks for deep directory pages. The directory's order (created_at desc, id desc) is cut
// into chunks of about CHUNK_TARGET users; each chunk is named by its start key, the newest key it
// may hold (inclusive), and knows how many users it holds. The newest chunk starts at the largest
// key there is ('infinity', ffffffff-…), so every user falls in exactly one chunk: the one with the
// smallest start key at or above the user's key. A page at offset N sums the counts from the newest
// chunk down to the one holding position N, then walks the index from that chunk's start key for
// fewer than 2 × CHUNK_TARGET entries: the cost of any depth is that of a shallow page plus a sum
// over a few hundred small rows, and it stays exact because the counts change in the same
// transactions as the users (statement-level triggers, under the lock of the user_count row, which
// every writer of users takes first, so that writers of the chunks queue in one order).
//
// Chunks split when they pass 2 × CHUNK_TARGET users and merge into the chunk above (newer) when
// they fall under CHUNK_TARGET / 4 (the newest chunk, which has none above, stays). A user's
// created_at and id never change in the service, but an UPDATE that changes them moves the count
// (a row trigger, called only when one of them changes) and rebalances afterwards.

const CHUNK_TARGET = 1000;
const TOP = "'infinity'::timestamptz, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid";

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create table user_directory_chunks (
      start_created_at timestamptz not null,
      start_id uuid not null,
      n integer not null check (n >= 0),
      primary key (start_created_at, start_id)
    )
  `.execute(db);
  // Backfill: one chunk per CHUNK_TARGET users (the newest chunk starts at the top key).
  await sql`
    insert into user_directory_chunks (start_created_at, start_id, n)
    select ${sql.raw(TOP)}, least(count(*), ${CHUNK_TARGET}) from users
  `.execute(db);
  await sql`
    insert into user_directory_chunks (start_created_at, start_id, n)
    select created_at, id, least(total - i, ${CHUNK_TARGET})
    from (
      select created_at, id, row_number() over (order by created_at desc, id desc) - 1 as i, count(*) over () as total
      from users
    ) numbered
    where i > 0 and i % ${CHUNK_TARGET} = 0
  `.execute(db);

  // Splits a chunk that holds more than twice the target into pieces of the target or more (the
  // chunk keeps its start key and its newest piece). The pieces are counted on the index: the
  // trigger that calls it holds the user_count lock, so no other writer's counted rows are pending.
  const splitBelow = (lowerBound: string) => `
      with numbered as (
        select row_number() over (order by u.created_at desc, u.id desc) - 1 as i, u.created_at, u.id
        from users u where (u.created_at, u.id) <= (c_created_at, c_id) ${lowerBound}
      ), sized as (
        select count(*) as total, greatest(count(*) / ${CHUNK_TARGET}, 1) as pieces from numbered
      ), kept as (
        update user_directory_chunks set n = (select total / pieces from sized)
        where start_created_at = c_created_at and start_id = c_id
      )
      insert into user_directory_chunks (start_created_at, start_id, n)
      select r.created_at, r.id, (k + 1) * s.total / s.pieces - k * s.total / s.pieces
      from sized s
      cross join generate_series(1, s.pieces - 1) as k
      join numbered r on r.i = k * s.total / s.pieces;`;
  await sql
    .raw(`
    create function user_directory_split(c_created_at timestamptz, c_id uuid) returns void
    language plpgsql as $$
    declare
      below_created_at timestamptz;
      below_id uuid;
    begin
      select start_created_at, start_id into below_created_at, below_id from user_directory_chunks
      where (start_created_at, start_id) < (c_created_at, c_id)
      order by start_created_at desc, start_id desc limit 1;
      -- Piece k (0-based, newest first) holds positions [k * total / pieces, (k + 1) * total / pieces).
      if below_created_at is null then
        ${splitBelow('')}
      else
        ${splitBelow('and (u.created_at, u.id) > (below_created_at, below_id)')}
      end if;
    end
    $$
  `)
    .execute(db);

  // Merges a chunk that fell under a quarter of the target into the chunk above it, when the two
  // together stay within twice the target; a chunk left empty always goes.
  await sql
    .raw(`
    create function user_directory_merge(c_created_at timestamptz, c_id uuid) returns void
    language plpgsql as $$
    declare
      mine bigint;
      above_created_at timestamptz;
      above_id uuid;
      above_n bigint;
    begin
      select n into mine from user_directory_chunks where start_created_at = c_created_at and start_id = c_id;
      if mine is null or mine >= ${CHUNK_TARGET / 4} then return; end if;
      select start_created_at, start_id, n into above_created_at, above_id, above_n from user_directory_chunks
      where (start_created_at, start_id) > (c_created_at, c_id)
      order by start_created_at, start_id limit 1;
      if above_created_at is null or (mine > 0 and above_n + mine > ${2 * CHUNK_TARGET}) then return; end if;
      delete from user_directory_chunks where start_created_at = c_created_at and start_id = c_id;
      update user_directory_chunks set n = n + mine where start_created_at = above_created_at and start_id = above_id;
    end
    $$
  `)
    .execute(db);

  // The chunk of each (created_at, id): the one with the smallest start key at or above it.
  const chunkOf = (table: string) => `
    select k.start_created_at, k.start_id, count(*) as d
    from ${table} r
    cross join lateral (
      select c.start_created_at, c.start_id from user_directory_chunks c
      where (c.start_created_at, c.start_id) >= (r.created_at, r.id)
      order by c.start_created_at, c.start_id limit 1
    ) k
    group by k.start_created_at, k.start_id`;

  // The counter and the chunks, by the same statement-level triggers (the counter first: its row
  // lock orders every writer of the chunks).
  await sql
    .raw(`
    create or replace function user_count_after_insert() returns trigger language plpgsql as $$
    declare
      chunk record;
    begin
      update user_count set n = n + (select count(*) from inserted_rows);
      for chunk in
        with d as (${chunkOf('inserted_rows')})
        update user_directory_chunks u set n = u.n + d.d from d
        where u.start_created_at = d.start_created_at and u.start_id = d.start_id
        returning u.start_created_at, u.start_id, u.n
      loop
        if chunk.n > ${2 * CHUNK_TARGET} then perform user_directory_split(chunk.start_created_at, chunk.start_id); end if;
      end loop;
      return null;
    end
    $$
  `)
    .execute(db);
  await sql
    .raw(`
    create or replace function user_count_after_delete() returns trigger language plpgsql as $$
    declare
      chunk record;
    begin
      update user_count set n = n - (select count(*) from deleted_rows);
      for chunk in
        with d as (${chunkOf('deleted_rows')})
        update user_directory_chunks u set n = u.n - d.d from d
        where u.start_created_at = d.start_created_at and u.start_id = d.start_id
        returning u.start_created_at, u.start_id, u.n
      loop
        if chunk.n < ${CHUNK_TARGET / 4} then perform user_directory_merge(chunk.start_created_at, chunk.start_id); end if;
      end loop;
      return null;
    end
    $$
  `)
    .execute(db);
  await sql
    .raw(`
    create or replace function user_count_after_truncate() returns trigger language plpgsql as $$
    begin
      update user_count set n = 0;
      delete from user_directory_chunks;
      insert into user_directory_chunks (start_created_at, start_id, n) values (${TOP}, 0);
      return null;
    end
    $$
  `)
    .execute(db);

  // A changed key moves its count (row by row: the rebalancing waits for the statement's end).
  await sql
    .raw(`
    create function user_directory_key_update() returns trigger language plpgsql as $$
    begin
      perform 1 from user_count for update;
      update user_directory_chunks set n = n - 1 where (start_created_at, start_id) = (
        select c.start_created_at, c.start_id from user_directory_chunks c
        where (c.start_created_at, c.start_id) >= (old.created_at, old.id)
        order by c.start_created_at, c.start_id limit 1
      );
      update user_directory_chunks set n = n + 1 where (start_created_at, start_id) = (
        select c.start_created_at, c.start_id from user_directory_chunks c
        where (c.start_created_at, c.start_id) >= (new.created_at, new.id)
        order by c.start_created_at, c.start_id limit 1
      );
      return null;
    end
    $$
  `)
    .execute(db);
  await sql
    .raw(`
    create function user_directory_rebalance() returns trigger language plpgsql as $$
    declare
      chunk record;
    begin
      perform 1 from user_count for update;
      for chunk in select start_created_at, start_id from user_directory_chunks where n > ${2 * CHUNK_TARGET} loop
        perform user_directory_split(chunk.start_created_at, chunk.start_id);
      end loop;
      for chunk in select start_created_at, start_id from user_directory_chunks where n < ${CHUNK_TARGET / 4} loop
        perform user_directory_merge(chunk.start_created_at, chunk.start_id);
      end loop;
      return null;
    end
    $$
  `)
    .execute(db);
  await sql`
    create trigger users_directory_key_update after update of created_at, id on users for each row
    when (old.created_at is distinct from new.created_at or old.id is distinct from new.id)
    execute function user_directory_key_update()
  `.execute(db);
  await sql`
    create trigger users_directory_rebalance after update of created_at, id on users
    for each statement execute function user_directory_rebalance()
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop trigger users_directory_rebalance on users`.execute(db);
  await sql`drop trigger users_directory_key_update on users`.execute(db);
  await sql`drop function user_directory_rebalance()`.execute(db);
  await sql`drop function user_directory_key_update()`.execute(db);
  await sql
    .raw(`
    create or replace function user_count_after_insert() returns trigger language plpgsql as $$
    begin
      update user_count set n = n + (select count(*) from inserted_rows);
      return null;
    end
    $$
  `)
    .execute(db);
  await sql
    .raw(`
    create or replace function user_count_after_delete() returns trigger language plpgsql as $$
    begin
      update user_count set n = n - (select count(*) from deleted_rows);
      return null;
    end
    $$
  `)
    .execute(db);
  await sql
    .raw(`
    create or replace function user_count_after_truncate() returns trigger language plpgsql as $$
    begin
      update user_count set n = 0;
      return null;
    end
    $$
  `)
    .execute(db);
  await sql`drop function user_directory_merge(timestamptz, uuid)`.execute(db);
  await sql`drop function user_directory_split(timestamptz, uuid)`.execute(db);
  await sql`drop table user_directory_chunks`.execute(db);
}
