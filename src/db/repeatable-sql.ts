import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { type Kysely, sql } from 'kysely';
import { projectFile } from '../project-file.ts';
import type { Database } from './schema.ts';

/** A repeatable SQL file: its name (under src/db/sql/) and its text. */
export interface RepeatableFile {
  name: string;
  text: string;
}

/** The repeatable files, in the order they are applied. Read from the source tree, which ships with the service. */
export const REPEATABLE_FILE_NAMES = ['realtime.sql'] as const;

/** Serialises the appliers of every instance starting at once (a transaction-level advisory lock). */
const APPLY_LOCK_KEY = 'repeatable_sql';

export function readRepeatableFiles(): RepeatableFile[] {
  return REPEATABLE_FILE_NAMES.map((name) => ({ name, text: readFileSync(projectFile(`src/db/sql/${name}`), 'utf8') }));
}

export function hashOf(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/** The hashes recorded as applied, by file name; empty before the first application. */
async function appliedHashes(db: Kysely<Database>): Promise<Map<string, string>> {
  const { rows: table } = await sql<{ present: boolean }>`
    select to_regclass('repeatable_sql') is not null as present`.execute(db);
  if (!table[0]?.present) return new Map();
  const { rows } = await sql<{ name: string; hash: string }>`select name, hash from repeatable_sql`.execute(db);
  return new Map(rows.map((row) => [row.name, row.hash]));
}

/**
 * Applies each repeatable file whose text differs from the one last applied (by SHA-256), after the
 * migrations: its statements, and the record of its hash, in one transaction. Instances starting at
 * once take turns on an advisory lock, and one that finds the file applied meanwhile leaves it.
 * Returns the names of the files applied.
 */
export async function applyRepeatableSql(
  db: Kysely<Database>,
  files: readonly RepeatableFile[] = readRepeatableFiles(),
): Promise<string[]> {
  const known = await appliedHashes(db);
  const pending = files.filter((file) => known.get(file.name) !== hashOf(file.text));
  if (pending.length === 0) return [];
  return db.transaction().execute(async (trx) => {
    await sql`select pg_advisory_xact_lock(hashtextextended(${APPLY_LOCK_KEY}, 0))`.execute(trx);
    await sql`
      create table if not exists repeatable_sql (
        name text primary key,
        hash text not null,
        applied_at timestamptz not null default now()
      )`.execute(trx);
    const applied: string[] = [];
    for (const file of pending) {
      const hash = hashOf(file.text);
      const { rows } = await sql<{ hash: string }>`
        select hash from repeatable_sql where name = ${file.name}`.execute(trx);
      if (rows[0]?.hash === hash) continue;
      // Without parameters the statement goes by the simple protocol, which runs every statement of the file.
      await sql.raw(file.text).execute(trx);
      await sql`
        insert into repeatable_sql (name, hash) values (${file.name}, ${hash})
        on conflict (name) do update set hash = excluded.hash, applied_at = now()`.execute(trx);
      applied.push(file.name);
    }
    return applied;
  });
}
