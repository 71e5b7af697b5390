import { sql } from 'kysely';
import type { AppContext } from '../context.ts';
import { ApiError } from '../errors.ts';
import { version } from '../version.ts';
import type { HandlersFor } from './types.ts';

/** Handlers of the `health` tag. */
export function healthHandlers(ctx: AppContext): HandlersFor<'getHealth'> {
  return {
    async getHealth() {
      try {
        await sql`select 1`.execute(ctx.db);
      } catch {
        throw new ApiError(503, 'SERVICE_UNAVAILABLE', 'The database is not answering', { 'retry-after': '5' });
      }
      return {
        status: 'ok',
        database: 'up',
        version,
        uptimeSeconds: Math.round((Date.now() - ctx.startedAt) / 1000),
      };
    },
  } satisfies HandlersFor<'getHealth'>;
}
