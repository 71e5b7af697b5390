import { type Kysely, sql } from 'kysely';

/**
 * A second search index for terms of four characters or more. Trigram posting lists of common
 * names ("smi", "ith", "es ") are long, and intersecting them dominated a specific search such as
 * "james.smith". Four-character grams, punctuation kept ("s.sm", "es.s"), are far rarer, so the
 * same search reads a fraction of the index. The grams only select candidates: the query always
 * adds the exact ILIKE condition, so results stay exact.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  // Every four-character substring of lower(t). IMMUTABLE so that it can back an index; PL/pgSQL
  // because it computes about twice as fast as the set-returning SQL equivalent.
  await sql`
    create function directory_grams(t text) returns text[]
    language plpgsql immutable strict parallel safe as $$
    declare
      s text := lower(t);
      grams text[] := '{}';
    begin
      for i in 1 .. length(s) - 3 loop
        grams := grams || substr(s, i, 4);
      end loop;
      return grams;
    end
    $$
  `.execute(db);
  await sql`
    create index users_search_grams_idx on users
    using gin ((directory_grams(email) || directory_grams(coalesce(profile->>'name', ''))))
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop index users_search_grams_idx`.execute(db);
  await sql`drop function directory_grams(text)`.execute(db);
}
