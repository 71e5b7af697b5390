import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // A ledger of successful embeddings calls: who, which model, how much. No foreign key to users:
  // rows are written in batches after the answer has gone out, and a user deleted in between must
  // not make the whole batch fail (nor erase what was spent).
  await sql`
    create table embedding_usage (
      id bigint generated always as identity primary key,
      user_id uuid not null,
      model text not null,
      inputs integer not null check (inputs > 0),
      prompt_tokens integer not null check (prompt_tokens >= 0),
      total_tokens integer not null check (total_tokens >= 0),
      created_at timestamptz not null default now()
    )
  `.execute(db);
  await sql`create index embedding_usage_user_created_idx on embedding_usage (user_id, created_at)`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop table embedding_usage`.execute(db);
}
