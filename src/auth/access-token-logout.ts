import * as sessions from '../db/repositories/sessions.ts';
import { ApiError } from '../errors.ts';
import type { AccessTokenClaims } from './access-token.ts';
import type { AuthDeps } from './auth-context.ts';
import type { SessionIssuer } from './session-issuer.ts';

/**
 * Logging out with an access token instead of a refresh token (clients that keep only the access
 * token, such as InsForge's SDK in server mode, post no body): the session the verified token names
 * (`sid`) ends, everywhere, as any other revocation does.
 */
export function createAccessTokenLogout(deps: AuthDeps, issuer: SessionIssuer) {
  const { db, clock } = deps;

  /** `claims` must come from a verified access token (verifyAccessToken): its `sid` is trusted as signed. */
  return async function logoutByAccessToken(claims: Pick<AccessTokenClaims, 'sid' | 'sub'>): Promise<void> {
    const ended = await sessions.revokeSession(db, claims.sid, clock.now());
    issuer.revoked(ended);
    // Nothing to end: another request (or instance) ended the session after the token was checked.
    if (ended.length === 0) throw new ApiError('SESSION_REVOKED', 'This session has ended; sign in again');
  };
}
