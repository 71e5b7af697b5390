import type { FastifyBaseLogger } from 'fastify';
import type { Kysely } from 'kysely';
import type { Database } from '../db/schema.ts';
import { startPeriodicJob } from '../periodic-job.ts';

const BATCH = 10_000;
const DAY_MS = 86_400_000;
/** How often each instance looks for expired messages (several instances deleting is harmless). */
export const RETENTION_INTERVAL_MS = 3_600_000;

/** Deletes messages created before `days` days ago, in batches; returns how many went. */
export async function deleteExpiredMessages(db: Kysely<Database>, days: number, now: Date): Promise<number> {
  const cutoff = new Date(now.getTime() - days * DAY_MS);
  let deleted = 0;
  for (;;) {
    const result = await db
      .deleteFrom('realtime.messages')
      .where('id', 'in', (q) =>
        q.selectFrom('realtime.messages').select('id').where('created_at', '<', cutoff).limit(BATCH),
      )
      .executeTakeFirst();
    const n = Number(result.numDeletedRows);
    deleted += n;
    if (n < BATCH) return deleted;
  }
}

/** Runs deleteExpiredMessages soon after start and then every RETENTION_INTERVAL_MS; returns the stop. */
export function startRetention(
  db: Kysely<Database>,
  days: number,
  now: () => Date,
  log: FastifyBaseLogger,
): () => Promise<void> {
  const job = async () => {
    const n = await deleteExpiredMessages(db, days, now());
    if (n > 0) log.info({ deleted: n, retentionDays: days }, 'realtime: expired messages deleted');
  };
  return startPeriodicJob('realtime: deleting expired messages', job, RETENTION_INTERVAL_MS, log);
}
