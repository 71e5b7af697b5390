import { sql } from 'kysely';
import type { Executor } from '../schema.ts';

export interface PolicyRow {
  policyName: string;
  tableName: string;
  command: 'SELECT' | 'INSERT' | 'UPDATE' | 'DELETE' | 'ALL';
  roles: string[];
  using: string | null;
  withCheck: string | null;
}

/**
 * The row-level-security policies on realtime.channels and realtime.messages, from pg_policies,
 * ordered by table and name. `roles` is cast to text[] in SQL: the driver would hand the catalogue's
 * name[] back as a literal such as "{authenticated}".
 */
export async function listRealtimePolicies(db: Executor): Promise<PolicyRow[]> {
  const result = await sql<PolicyRow>`
    select policyname::text as "policyName", tablename::text as "tableName", cmd as "command",
      roles::text[] as "roles", qual as "using", with_check as "withCheck"
    from pg_policies
    where schemaname = 'realtime' and tablename in ('channels', 'messages')
    order by tablename, policyname
  `.execute(db);
  return result.rows;
}
