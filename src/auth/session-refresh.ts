import * as sessions from '../db/repositories/sessions.ts';
import * as users from '../db/repositories/users.ts';
import { ApiError } from '../errors.ts';
import type { AuthDeps, ClientInfo } from './auth-context.ts';
import { constantTimeEqual, newOpaqueToken, sha256Hex } from './crypto.ts';
import type { IssuedSession, SessionIssuer } from './session-issuer.ts';

const invalidRefresh = () => new ApiError(401, 'REFRESH_TOKEN_INVALID', 'The refresh token is invalid or has expired');
const refreshReused = () =>
  new ApiError(401, 'REFRESH_TOKEN_REUSED', 'This refresh token was already used; the session has been ended');

/** Refreshing a session (rotating its refresh token) and logging out. */
export function createSessionRefresh(deps: AuthDeps, issuer: SessionIssuer) {
  const { db, clock, log } = deps;

  /**
   * Finds the session a refresh token belongs to (current or already rotated). A session refreshes
   * only through the client type it was created for (a web session's cookie value is refused on
   * the mobile path, which has no CSRF check); for web clients the CSRF token bound to the session
   * is checked before anything changes.
   */
  async function resolveRefresh(refreshToken: string, client: ClientInfo, csrfToken: string | undefined) {
    const hash = sha256Hex(refreshToken);
    const current = await sessions.findSessionByRefreshHash(db, hash);
    const rotated = current ? undefined : await sessions.findSessionOfRotatedToken(db, hash);
    const session = current ?? rotated;
    if (!session || session.client_type !== client.clientType) throw invalidRefresh();
    if (client.clientType === 'web' && !constantTimeEqual(csrfToken ?? '', issuer.csrfFor(session.id))) {
      throw new ApiError(403, 'CSRF_INVALID', 'The X-CSRF-Token header is missing or does not match this session');
    }
    return { hash, session, reused: rotated !== undefined };
  }

  /**
   * A rotated token presented again: someone else may hold the session. It ends, everywhere; the
   * reuse is counted and logged when it ended a live session (not again for an old token replayed
   * after the session was over).
   */
  async function reuse(session: sessions.SessionRow) {
    if (await issuer.endSession(session.id)) {
      deps.events?.refreshTokenReused();
      log.warn({ sessionId: session.id, userId: session.user_id }, 'refresh token reuse: session revoked');
    }
    return refreshReused();
  }

  async function refresh(
    refreshToken: string,
    client: ClientInfo,
    csrfToken: string | undefined,
  ): Promise<IssuedSession> {
    const { hash, session, reused } = await resolveRefresh(refreshToken, client, csrfToken);
    const now = clock.now();
    if (reused) throw await reuse(session);
    if (session.revoked_at !== null || session.expires_at <= now) throw invalidRefresh();
    const next = newOpaqueToken();
    const user = await db.transaction().execute(async (trx) => {
      if (!(await sessions.rotateRefreshToken(trx, session.id, hash, sha256Hex(next), now))) return undefined;
      const user = await users.findUserById(trx, session.user_id);
      // Disabling ends the account's sessions; this refuses (and rolls back) a refresh racing it.
      if (user !== undefined && user.disabled_at !== null) throw invalidRefresh();
      return user;
    });
    if (user === undefined) throw await reuse(session); // lost a race with another refresh of the same token
    return issuer.issued(user, session, next, client.clientType, now);
  }

  /**
   * Ends the session a refresh token names, whatever its state: logging out twice, or with a token
   * already rotated, succeeds, since what the caller asked for holds. A rotated token is still reuse
   * (counted and logged): its holder may not be the owner, and the session ends for everyone.
   */
  async function logout(refreshToken: string, client: ClientInfo, csrfToken: string | undefined): Promise<void> {
    const { session, reused } = await resolveRefresh(refreshToken, client, csrfToken);
    if (reused) await reuse(session);
    else await issuer.endSession(session.id);
  }

  return { refresh, logout };
}
