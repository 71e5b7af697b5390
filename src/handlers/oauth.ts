import { allowedRedirect } from '../auth/redirects.ts';
import type { AppContext } from '../context.ts';
import { clientInfo, sessionResult } from './auth.ts';
import type { HandlersFor } from './types.ts';

type OAuthOperations =
  | 'getOAuthAuthorizationUrl'
  | 'getCustomOAuthAuthorizationUrl'
  | 'handleOAuthCallback'
  | 'exchangeOAuthCode'
  | 'signInWithIdToken';

/** The app's redirect URI for an OAuth sign-in: allowed (the schema's pattern refuses a fragment, RFC 6749 3.1.2). */
function oauthRedirectUri(config: AppContext['config'], value: string): string {
  return allowedRedirect(config, value, 'query.redirect_uri') ?? value;
}

/** Handlers of the `oauth` tag. */
export function oauthHandlers(ctx: AppContext): HandlersFor<OAuthOperations> {
  const { auth, config } = ctx;
  return {
    async getOAuthAuthorizationUrl(request) {
      const { redirect_uri, code_challenge } = request.query;
      const redirectUri = oauthRedirectUri(config, redirect_uri);
      return { authUrl: await auth.oauth.start(request.params.provider, 'built-in', redirectUri, code_challenge) };
    },

    async getCustomOAuthAuthorizationUrl(request) {
      const { redirect_uri, code_challenge } = request.query;
      const redirectUri = oauthRedirectUri(config, redirect_uri);
      return { authUrl: await auth.oauth.start(request.params.provider, 'custom', redirectUri, code_challenge) };
    },

    async handleOAuthCallback(request, reply) {
      const raw = request.raw.url ?? '';
      const query = raw.includes('?') ? raw.slice(raw.indexOf('?') + 1) : '';
      const { ip, userAgent } = clientInfo(request, undefined);
      const location = await auth.oauth.callback(request.params.provider, request.query, query, { ip, userAgent });
      reply.header('location', location).header('cache-control', 'no-store').code(302);
      return undefined;
    },

    async exchangeOAuthCode(request, reply) {
      const client = clientInfo(request, request.query.client_type);
      return sessionResult(
        config,
        reply,
        await auth.oauth.exchange(request.body.code, request.body.code_verifier, client),
      );
    },

    async signInWithIdToken(request, reply) {
      const client = clientInfo(request, request.query.client_type);
      return sessionResult(config, reply, await auth.oauth.signInWithIdToken(request.body, client));
    },
  } satisfies HandlersFor<OAuthOperations>;
}
