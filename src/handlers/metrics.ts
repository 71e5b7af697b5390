import type { AppContext } from '../context.ts';
import { ApiError } from '../errors.ts';
import type { HandlersFor } from './types.ts';

/** Handlers of the `metrics` tag. The `metricsToken` security handler has let the request through. */
export function metricsHandlers(ctx: AppContext): HandlersFor<'getMetrics'> {
  return {
    async getMetrics(request, reply) {
      if (ctx.metrics === null) throw new ApiError('NOT_FOUND', `No route for ${request.method} /metrics`);
      const text = await ctx.metrics.render();
      reply.type(ctx.metrics.contentType);
      return text;
    },
  } satisfies HandlersFor<'getMetrics'>;
}
