import { type Kysely, sql } from 'kysely';

// Frozen in time: migrations speak SQL of their own day and never import the live schema types.

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`
    create function public.touch_updated_at() returns trigger language plpgsql as $$
    begin
      new.updated_at := now();
      return new;
    end
    $$
  `.execute(db);
  await sql`
    create table app_settings (
      key text primary key,
      value text not null,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now()
    )
  `.execute(db);
  await sql`
    create trigger app_settings_touch before update on app_settings
    for each row execute function public.touch_updated_at()
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table app_settings`.execute(db);
  await sql`drop function public.touch_updated_at()`.execute(db);
}
