import type { FastifyBaseLogger } from 'fastify';
import type { Kysely } from 'kysely';
import { deleteStaleAddressRecords } from '../db/repositories/address-limits.ts';
import { deleteAuditRowsBefore } from '../db/repositories/audit-log.ts';
import { deleteExpiredOAuthRecords } from '../db/repositories/oauth.ts';
import { deleteExpiredCodes } from '../db/repositories/one-time-codes.ts';
import type { Database } from '../db/schema.ts';
import { startPeriodicJob } from '../periodic-job.ts';
import { EMAIL_LIMITS } from './auth-context.ts';

const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;

/** How the audit log is swept: rows per statement, statements per run (so one run is bounded). */
export interface AuditSweep {
  batch: number;
  maxBatches: number;
}

/** 5,000 rows per statement, at most 100,000 a run (2.4 million a day at one run an hour). */
export const AUDIT_SWEEP: AuditSweep = { batch: 5_000, maxBatches: 20 };

/**
 * Deletes the audit log's rows older than `retentionDays` before `now`, the oldest first, in
 * statements of `sweep.batch` rows, at most `sweep.maxBatches` of them: a backlog (a lowered
 * retention, a long outage) goes over several runs instead of one long one. Returns how many went
 * and whether older rows remain.
 */
export async function sweepAuditLog(
  db: Kysely<Database>,
  now: Date,
  retentionDays: number,
  sweep: AuditSweep = AUDIT_SWEEP,
): Promise<{ deleted: number; more: boolean }> {
  const cutoff = new Date(now.getTime() - retentionDays * DAY_MS);
  let deleted = 0;
  for (let i = 0; i < sweep.maxBatches; i++) {
    const n = await deleteAuditRowsBefore(db, cutoff, sweep.batch);
    deleted += n;
    if (n < sweep.batch) return { deleted, more: false };
  }
  return { deleted, more: true };
}

export interface AuthHousekeepingOptions {
  /** AUDIT_RETENTION_DAYS: audit log rows older than this are deleted. Absent: the audit log is left alone. */
  auditRetentionDays?: number | undefined;
}

/**
 * Deletes, every hour, the per-address and per-requester email records whose day is over (they are
 * made for every address asked about, known or not), expired codes and OAuth records, and the audit
 * log's rows past their retention. Returns the stop.
 */
export function startAuthHousekeeping(
  db: Kysely<Database>,
  now: () => Date,
  log: FastifyBaseLogger,
  options: AuthHousekeepingOptions = {},
): () => Promise<void> {
  const { auditRetentionDays } = options;
  const job = async () => {
    const n = await deleteStaleAddressRecords(db, now(), EMAIL_LIMITS.cooldownSeconds);
    if (n > 0) log.debug({ deleted: n }, 'auth: stale email records deleted');
    const codes = await deleteExpiredCodes(db, now());
    if (codes > 0) log.debug({ deleted: codes }, 'auth: expired sign-in and reset codes deleted');
    const oauth = await deleteExpiredOAuthRecords(db, now());
    if (oauth > 0) log.debug({ deleted: oauth }, 'auth: expired OAuth sign-ins, codes and ID-token records deleted');
    if (auditRetentionDays !== undefined) {
      const audit = await sweepAuditLog(db, now(), auditRetentionDays);
      if (audit.deleted > 0) {
        log.info(
          { deleted: audit.deleted, retentionDays: auditRetentionDays, more: audit.more },
          audit.more
            ? 'audit: old entries deleted; older ones remain for the next run'
            : 'audit: entries past their retention deleted',
        );
      }
    }
  };
  return startPeriodicJob('auth: deleting stale email records', job, HOUR_MS, log);
}
