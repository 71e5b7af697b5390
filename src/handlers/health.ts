import { sql } from 'kysely';
import type { AppContext } from '../context.ts';
import { withTimeout } from '../deadline.ts';
import { ApiError } from '../errors.ts';
import { redisStatus } from '../redis.ts';
import { version } from '../version.ts';
import type { HandlersFor } from './types.ts';

/**
 * How long the health check waits for the database. A stopped server refuses at once, but a frozen
 * or unreachable one may never answer a connection the pool already holds: the check must still
 * say so, in a time a load balancer waits.
 */
export const HEALTH_DEADLINE_MS = 2_000;
/** How long the health check waits for Redis's PING; Redis does not decide the status. */
export const REDIS_HEALTH_DEADLINE_MS = 1_000;

/** Handlers of the `health` tag. */
export function healthHandlers(ctx: AppContext): HandlersFor<'getHealth'> {
  return {
    async getHealth() {
      const redis = redisStatus(ctx.redis, REDIS_HEALTH_DEADLINE_MS); // meanwhile; it never rejects
      // The answer is checked, not only its arrival: an embedded database whose session broke
      // (a PANIC inside PGlite) answers every query with no rows.
      const answered = await withTimeout(
        sql<{ one: number }>`select 1 as one`.execute(ctx.db),
        HEALTH_DEADLINE_MS,
      ).then(
        (result) => result.rows[0]?.one === 1,
        () => false,
      );
      if (!answered) {
        throw new ApiError('SERVICE_UNAVAILABLE', 'The database is not answering', { 'retry-after': '5' });
      }
      const replica = ctx.replicaStatus?.();
      return {
        status: 'ok',
        database: 'up',
        ...(replica === undefined ? {} : { replica }),
        redis: await redis,
        embeddingsBreaker: ctx.embeddings.breakerState() ?? 'not configured',
        version,
        uptimeSeconds: Math.round((Date.now() - ctx.startedAt) / 1000),
      };
    },
  } satisfies HandlersFor<'getHealth'>;
}
