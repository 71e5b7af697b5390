import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // The caller's own end-user identifier (OpenAI's `user` field), when it sent one.
  await sql`alter table embedding_usage add column end_user text check (char_length(end_user) between 1 and 256)`.execute(
    db,
  );
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`alter table embedding_usage drop column end_user`.execute(db);
}
