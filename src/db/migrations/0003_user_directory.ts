import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`create extension if not exists pg_trgm`.execute(db);

  // Newest first, id as tiebreaker: the directory's only order. Covering, so paging can skip rows
  // with an index-only scan.
  await sql`create index users_created_at_id_idx on users (created_at desc, id desc)`.execute(db);
  // Substring search (ILIKE '%…%') on email or profile name: one trigram index over both, so a
  // search is one bitmap scan (two indexes ORed cost twice as much). A match that only spans the
  // joining space is a false positive, removed by the exact condition the query adds.
  await sql`
    create index users_search_trgm_idx on users
    using gin ((email || ' ' || coalesce(profile->>'name', '')) gin_trgm_ops)
  `.execute(db);

  // The exact number of users, kept by the database itself, so that an unfiltered total never
  // scans the table. Statement-level triggers count whole batches (COPY, INSERT … SELECT) at once.
  await sql`create table user_count (singleton boolean primary key default true check (singleton), n bigint not null)`.execute(
    db,
  );
  await sql`insert into user_count (n) select count(*) from users`.execute(db);
  await sql`
    create function user_count_after_insert() returns trigger language plpgsql as $$
    begin
      update user_count set n = n + (select count(*) from inserted_rows);
      return null;
    end
    $$
  `.execute(db);
  await sql`
    create function user_count_after_delete() returns trigger language plpgsql as $$
    begin
      update user_count set n = n - (select count(*) from deleted_rows);
      return null;
    end
    $$
  `.execute(db);
  await sql`
    create trigger users_count_insert after insert on users
    referencing new table as inserted_rows for each statement execute function user_count_after_insert()
  `.execute(db);
  await sql`
    create trigger users_count_delete after delete on users
    referencing old table as deleted_rows for each statement execute function user_count_after_delete()
  `.execute(db);
  // TRUNCATE bypasses row triggers: reset the count with it.
  await sql`
    create function user_count_after_truncate() returns trigger language plpgsql as $$
    begin
      update user_count set n = 0;
      return null;
    end
    $$
  `.execute(db);
  await sql`
    create trigger users_count_truncate after truncate on users
    for each statement execute function user_count_after_truncate()
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop trigger users_count_truncate on users`.execute(db);
  await sql`drop trigger users_count_delete on users`.execute(db);
  await sql`drop trigger users_count_insert on users`.execute(db);
  await sql`drop function user_count_after_truncate()`.execute(db);
  await sql`drop function user_count_after_delete()`.execute(db);
  await sql`drop function user_count_after_insert()`.execute(db);
  await sql`drop table user_count`.execute(db);
  await sql`drop index users_search_trgm_idx`.execute(db);
  await sql`drop index users_created_at_id_idx`.execute(db);
}
