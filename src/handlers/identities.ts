import type { FastifyRequest } from 'fastify';
import type { IdentityCaller } from '../auth/oauth/identities.ts';
import { allowedRedirect } from '../auth/redirects.ts';
import type { AppContext } from '../context.ts';
import { clientInfo } from './auth.ts';
import type { HandlersFor } from './types.ts';

type IdentityOperations = 'listIdentities' | 'startIdentityLink' | 'unlinkIdentity';

/** The caller of an identities operation: its account, its session and the session's proofs. */
const identityCaller = (request: FastifyRequest): IdentityCaller => ({
  userId: request.user.sub,
  sessionId: request.user.sid,
  amr: request.user.amr,
});

/** Handlers of the `identities` tag. */
export function identityHandlers(ctx: AppContext): HandlersFor<IdentityOperations> {
  // Read when called: the handlers are made before the context is complete (and in tests, without one).
  const oauth = () => ctx.auth.oauth;
  return {
    async listIdentities(request) {
      return { identities: await oauth().identities.list(request.user.sub) };
    },

    async startIdentityLink(request) {
      const { provider, redirect_uri } = request.body;
      // The schema's pattern refuses a fragment (RFC 6749 3.1.2).
      const redirectUri = allowedRedirect(ctx.config, redirect_uri, 'body.redirect_uri') ?? redirect_uri;
      return { authUrl: await oauth().startLink(identityCaller(request), provider, redirectUri) };
    },

    async unlinkIdentity(request, reply) {
      const { ip, userAgent } = clientInfo(request, undefined);
      await oauth().identities.unlink(identityCaller(request), request.params.identityId, { ip, userAgent });
      reply.code(204);
      return undefined;
    },
  } satisfies HandlersFor<IdentityOperations>;
}
