import { createHmac } from 'node:crypto';
import * as sessions from '../db/repositories/sessions.ts';
import * as users from '../db/repositories/users.ts';
import { ApiError } from '../errors.ts';
import type { AuthDeps, ClientInfo } from './auth-context.ts';
import { constantTimeEqual, sha256Hex } from './crypto.ts';
import type { IssuedSession, SessionIssuer } from './session-issuer.ts';

const invalidRefresh = () => new ApiError('REFRESH_TOKEN_INVALID', 'The refresh token is invalid or has expired');
const refreshReused = () =>
  new ApiError('REFRESH_TOKEN_REUSED', 'This refresh token was already used; the session has been ended');

/**
 * At most this many refresh-token cookies of one request are looked at (a browser sends one per
 * path, domain and partition it holds: the real one and any planted beside it). A sibling host can
 * plant six that come before the real one: on /api/auth/refresh, /api/auth/ and /api/auth itself
 * (older than the real one), each partitioned or not.
 */
export const MAX_PRESENTED_REFRESH_TOKENS = 8;
/** How many rotations a token presented within the reuse interval may be behind the current one. */
const MAX_SUCCESSOR_STEPS = 8;

/** A presented refresh token and its session; `rotatedAt` is set when the token is no longer current. */
interface Presented {
  token: string;
  hash: string;
  session: sessions.SessionRow;
  rotatedAt: Date | undefined;
}

/** Refreshing a session (rotating its refresh token) and logging out. */
export function createSessionRefresh(deps: AuthDeps, issuer: SessionIssuer) {
  const { db, clock, log, config } = deps;
  const reuseIntervalMs = config.refreshTokenReuseIntervalSeconds * 1000;

  /**
   * The token that replaces `token` when it rotates: an HMAC of it under a server key. Only hashes
   * are stored, yet the holder of a token rotated a moment ago (a retry whose answer was lost, a
   * second tab refreshing with the same cookie) can be handed the very token that replaced it.
   */
  const successorOf = (token: string) => createHmac('sha256', deps.keys.refresh).update(token).digest('base64url');

  /** The session's current token when it descends from `token` by a few rotations; undefined otherwise. */
  function currentDescendant(token: string, currentHash: string): string | undefined {
    let next = token;
    for (let step = 0; step < MAX_SUCCESSOR_STEPS; step++) {
      next = successorOf(next);
      if (constantTimeEqual(sha256Hex(next), currentHash)) return next;
    }
    return undefined;
  }

  const withinReuseInterval = (rotatedAt: Date, now: Date) => now.getTime() - rotatedAt.getTime() < reuseIntervalMs;

  async function lookUp(token: string): Promise<Presented | undefined> {
    const hash = sha256Hex(token);
    const current = await sessions.findSessionByRefreshHash(db, hash);
    if (current !== undefined) return { token, hash, session: current, rotatedAt: undefined };
    const rotated = await sessions.findSessionOfRotatedToken(db, hash);
    return rotated && { token, hash, session: rotated, rotatedAt: rotated.rotated_at };
  }

  /**
   * Finds the session the presented refresh token belongs to (current or already rotated). A
   * session refreshes only through the client type it was created for (a web session's cookie value
   * is refused on the mobile path, which has no CSRF check); for web clients the CSRF token bound to
   * the session is checked before anything changes.
   *
   * A browser may send several refresh_token cookies: one planted by a sibling host on a longer path
   * (cookie tossing) comes before the real one. Each is looked at, in the order sent: the first
   * current token whose session matches the client and the CSRF token wins, then the first rotated
   * one; a planted cookie therefore never decides for the real one.
   */
  async function resolveRefresh(
    tokens: readonly string[],
    client: ClientInfo,
    csrfToken: string | undefined,
  ): Promise<Presented> {
    let csrfRefused = false;
    let rotated: Presented | undefined;
    for (const token of [...new Set(tokens)].slice(0, MAX_PRESENTED_REFRESH_TOKENS)) {
      const presented = await lookUp(token);
      if (presented === undefined || presented.session.client_type !== client.clientType) continue;
      if (client.clientType === 'web' && !constantTimeEqual(csrfToken ?? '', issuer.csrfFor(presented.session.id))) {
        csrfRefused = true;
        continue;
      }
      if (presented.rotatedAt === undefined) return presented;
      rotated ??= presented;
    }
    if (rotated !== undefined) return rotated;
    if (csrfRefused) {
      throw new ApiError('CSRF_INVALID', 'The X-CSRF-Token header is missing or does not match this session');
    }
    throw invalidRefresh();
  }

  /**
   * A rotated token presented again: someone else may hold the session. It ends, everywhere; the
   * reuse is counted and logged when it ended a live session (not again for an old token replayed
   * after the session was over).
   */
  async function reuse(session: sessions.SessionRow, client: ClientInfo) {
    if (await issuer.endSession(session.user_id, session.id, { type: 'refresh_token_reused', actorId: null, client })) {
      deps.events?.refreshTokenReused();
      log.warn({ sessionId: session.id, userId: session.user_id }, 'refresh token reuse: session revoked');
    }
    return refreshReused();
  }

  /**
   * A rotated token presented again. Within the reuse interval of its rotation, and while its
   * session is live, it is a retry whose answer was lost or a second tab that refreshed with the
   * same cookie: it gets a fresh access token and the session's current refresh token (the one the
   * first answer carried, or its successor), and nothing rotates. After the interval, or when the
   * current token does not descend from it, it is reuse: the session ends.
   */
  async function reissue(presented: Presented & { rotatedAt: Date }, client: ClientInfo, now: Date) {
    if (!withinReuseInterval(presented.rotatedAt, now)) throw await reuse(presented.session, client);
    const found = await db.transaction().execute(async (trx) => {
      const session = await sessions.findSessionForShare(trx, presented.session.id);
      if (session === undefined || session.revoked_at !== null || session.expires_at <= now) return undefined;
      const current = currentDescendant(presented.token, session.refresh_token_hash);
      if (current === undefined) return undefined;
      const user = await users.findUserById(trx, session.user_id);
      if (user === undefined || user.disabled_at !== null) return undefined;
      return { session, current, user };
    });
    // An ended session stays ended (not counted again); a token off the current line is reuse.
    if (found === undefined) throw await reuse(presented.session, client);
    return issuer.issued(found.user, found.session, found.current, client.clientType, now);
  }

  async function refresh(
    refreshTokens: readonly string[],
    client: ClientInfo,
    csrfToken: string | undefined,
  ): Promise<IssuedSession> {
    const presented = await resolveRefresh(refreshTokens, client, csrfToken);
    const now = clock.now();
    if (presented.rotatedAt !== undefined)
      return reissue({ ...presented, rotatedAt: presented.rotatedAt }, client, now);
    const { hash, session } = presented;
    if (session.revoked_at !== null || session.expires_at <= now) throw invalidRefresh();
    const next = successorOf(presented.token);
    const user = await db.transaction().execute(async (trx) => {
      if (!(await sessions.rotateRefreshToken(trx, session.id, hash, sha256Hex(next), now))) return undefined;
      const user = await users.findUserById(trx, session.user_id);
      // Disabling ends the account's sessions; this refuses (and rolls back) a refresh racing it.
      if (user !== undefined && user.disabled_at !== null) throw invalidRefresh();
      return user;
    });
    if (user === undefined) {
      // Another refresh of the same token rotated it a moment ago (a second tab, a retry): this
      // one is a rotated token within the interval. Not rotated at all: the session was revoked.
      const rotated = await sessions.findSessionOfRotatedToken(db, hash);
      if (rotated === undefined) throw invalidRefresh();
      return reissue({ ...presented, session: rotated, rotatedAt: rotated.rotated_at }, client, now);
    }
    return issuer.issued(user, session, next, client.clientType, now);
  }

  /**
   * Ends the session a refresh token names, whatever its state: logging out twice, or with a token
   * already rotated, succeeds, since what the caller asked for holds. A token rotated longer ago
   * than the reuse interval is still reuse (counted and logged): its holder may not be the owner,
   * and the session ends for everyone.
   */
  async function logout(
    refreshTokens: readonly string[],
    client: ClientInfo,
    csrfToken: string | undefined,
  ): Promise<void> {
    const { session, rotatedAt } = await resolveRefresh(refreshTokens, client, csrfToken);
    if (rotatedAt !== undefined && !withinReuseInterval(rotatedAt, clock.now())) await reuse(session, client);
    else await issuer.endSession(session.user_id, session.id, { type: 'logout', client });
  }

  return { refresh, logout };
}
