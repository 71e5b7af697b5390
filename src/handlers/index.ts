import type { AppContext } from '../context.ts';
import { authHandlers } from './auth.ts';
import { embeddingHandlers } from './embeddings.ts';
import { healthHandlers } from './health.ts';
import { metricsHandlers } from './metrics.ts';
import { realtimeHandlers } from './realtime.ts';
import type { ServiceHandlers } from './types.ts';
import { userHandlers } from './users.ts';

/** The service handlers bound by fastify-openapi-glue, one per operationId, grouped by tag. */
export function createServiceHandlers(ctx: AppContext): ServiceHandlers {
  return {
    ...healthHandlers(ctx),
    ...metricsHandlers(ctx),
    ...authHandlers(ctx),
    ...userHandlers(ctx),
    ...embeddingHandlers(ctx),
    ...realtimeHandlers(ctx),
  };
}
