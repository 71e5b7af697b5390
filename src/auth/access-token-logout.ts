import type { AccessTokenClaims } from './access-token.ts';
import { type ClientInfo, sessionEnded } from './auth-context.ts';
import type { SessionIssuer } from './session-issuer.ts';

/**
 * Logging out with an access token instead of a refresh token (clients that keep only the access
 * token, such as InsForge's SDK in server mode, post no body): the session the verified token names
 * (`sid`) ends, everywhere, as any other revocation does.
 */
export function createAccessTokenLogout(issuer: SessionIssuer) {
  /** `claims` must come from a verified access token (verifyAccessToken): its `sid` is trusted as signed. */
  return async function logoutByAccessToken(
    claims: Pick<AccessTokenClaims, 'sid' | 'sub'>,
    client: ClientInfo,
  ): Promise<void> {
    // Nothing to end: another request (or instance) ended the session after the token was checked.
    if (!(await issuer.endSession(claims.sub, claims.sid, { type: 'logout', client }))) throw sessionEnded();
  };
}
