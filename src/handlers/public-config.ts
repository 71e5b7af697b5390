import { etagMatches } from '../auth/public-config.ts';
import type { AppContext } from '../context.ts';
import type { HandlersFor } from './types.ts';

/** The public auth configuration (tag `auth`): no authentication, revalidated by ETag. */
export function publicConfigHandlers(ctx: AppContext): HandlersFor<'getPublicAuthConfig'> {
  return {
    async getPublicAuthConfig(request, reply) {
      const { body, etag } = ctx.auth.publicConfig;
      // Caches may keep it, but must ask again each time: a changed configuration shows at once.
      reply.header('etag', etag).header('cache-control', 'public, no-cache');
      if (etagMatches(request.headers['if-none-match'], etag)) {
        reply.code(304);
        return undefined;
      }
      return body;
    },
  } satisfies HandlersFor<'getPublicAuthConfig'>;
}
