import type { FastifyBaseLogger } from 'fastify';
import type { Kysely } from 'kysely';
import { deleteStaleAddressRecords } from '../db/repositories/address-limits.ts';
import { deleteExpiredOAuthRecords } from '../db/repositories/oauth.ts';
import { deleteExpiredCodes } from '../db/repositories/one-time-codes.ts';
import type { Database } from '../db/schema.ts';
import { startPeriodicJob } from '../periodic-job.ts';
import { EMAIL_LIMITS } from './auth-context.ts';

const HOUR_MS = 3_600_000;

/**
 * Deletes, every hour, the per-address and per-requester email records whose day is over (they are
 * made for every address asked about, known or not). Returns the stop.
 */
export function startAuthHousekeeping(
  db: Kysely<Database>,
  now: () => Date,
  log: FastifyBaseLogger,
): () => Promise<void> {
  const job = async () => {
    const n = await deleteStaleAddressRecords(db, now(), EMAIL_LIMITS.cooldownSeconds);
    if (n > 0) log.debug({ deleted: n }, 'auth: stale email records deleted');
    const codes = await deleteExpiredCodes(db, now());
    if (codes > 0) log.debug({ deleted: codes }, 'auth: expired sign-in and reset codes deleted');
    const oauth = await deleteExpiredOAuthRecords(db, now());
    if (oauth > 0) log.debug({ deleted: oauth }, 'auth: expired OAuth sign-ins, codes and ID-token records deleted');
  };
  return startPeriodicJob('auth: deleting stale email records', job, HOUR_MS, log);
}
