import { sql } from 'kysely';
import type { Executor } from '../schema.ts';

/** One entry of the audit log as read back: its id as a decimal string (int8 is a string from `pg`, a number from PGlite). */
export interface AuditEntry {
  id: string;
  occurredAt: Date;
  type: string;
  outcome: 'success' | 'failure';
  method: string | null;
  actorId: string | null;
  userId: string | null;
  sessionId: string | null;
  ip: string | null;
  userAgent: string | null;
  details: Record<string, unknown>;
}

export interface NewAuditRow {
  occurredAt: Date;
  type: string;
  outcome: 'success' | 'failure';
  method: string | null;
  actorId: string | null;
  userId: string | null;
  sessionId: string | null;
  ip: string | null;
  userAgent: string | null;
  details: Record<string, string | number | boolean | null>;
}

export async function insertAuditRow(db: Executor, row: NewAuditRow): Promise<void> {
  await insertAuditRows(db, [row]);
}

/** Rows per INSERT: 10 parameters each, well within PostgreSQL's 65,535 per statement. */
const ROWS_PER_STATEMENT = 1000;

/** Writes entries in as few statements as it can (an account's ended sessions, say). */
export async function insertAuditRows(db: Executor, rows: readonly NewAuditRow[]): Promise<void> {
  for (let at = 0; at < rows.length; at += ROWS_PER_STATEMENT)
    await insertChunk(db, rows.slice(at, at + ROWS_PER_STATEMENT));
}

async function insertChunk(db: Executor, rows: readonly NewAuditRow[]): Promise<void> {
  await db
    .insertInto('audit_log')
    .values(
      rows.map((row) => ({
        occurred_at: row.occurredAt,
        type: row.type,
        outcome: row.outcome,
        method: row.method,
        actor_id: row.actorId,
        user_id: row.userId,
        session_id: row.sessionId,
        ip: row.ip,
        user_agent: row.userAgent,
        details: JSON.stringify(row.details),
      })),
    )
    .execute();
}

export interface AuditQuery {
  userId?: string | undefined;
  types?: readonly string[] | undefined;
  /** Only rows that occurred at or after this instant. */
  since?: Date | undefined;
  /** Only rows that occurred before this instant. */
  until?: Date | undefined;
  /** Only rows older than this id (the cursor: the last id of the previous page). */
  before?: bigint | undefined;
  limit: number;
}

/**
 * One page of the log, newest first (by id, the order of recording), matching every filter given.
 * Keyset paging on the id: rows recorded while a reader pages get larger ids and never shift its pages.
 */
export async function listAuditRows(db: Executor, q: AuditQuery): Promise<AuditEntry[]> {
  let query = db
    .selectFrom('audit_log')
    .select([
      sql<string>`id::text`.as('id'),
      'occurred_at as occurredAt',
      'type',
      'outcome',
      'method',
      'actor_id as actorId',
      'user_id as userId',
      'session_id as sessionId',
      'ip',
      'user_agent as userAgent',
      'details',
    ]);
  if (q.userId !== undefined) query = query.where('user_id', '=', q.userId);
  if (q.types !== undefined && q.types.length > 0) query = query.where('type', 'in', q.types);
  if (q.since !== undefined) query = query.where('occurred_at', '>=', q.since);
  if (q.until !== undefined) query = query.where('occurred_at', '<', q.until);
  if (q.before !== undefined) query = query.where(sql<boolean>`id < ${q.before.toString()}::bigint`);
  // `audit_log.id`, not `id`: a bare name in ORDER BY is the output column, the id as text.
  return query.orderBy('audit_log.id', 'desc').limit(q.limit).execute();
}

/**
 * Deletes rows that occurred before `cutoff`, the oldest first, at most `batch` of them in one
 * statement (so that it holds its locks briefly); returns how many went.
 */
export async function deleteAuditRowsBefore(db: Executor, cutoff: Date, batch: number): Promise<number> {
  const result = await sql<{ n: number }>`
    with gone as (
      delete from audit_log where id in (
        select id from audit_log where occurred_at < ${cutoff} order by occurred_at limit ${batch}
      ) returning 1
    )
    select count(*)::int as n from gone
  `.execute(db);
  return result.rows[0]?.n ?? 0;
}
