import type { Kysely } from 'kysely';
import * as sessions from '../db/repositories/sessions.ts';
import type { UserRow } from '../db/repositories/users.ts';
import type { ClientType, Database } from '../db/schema.ts';
import { type AuthDeps, type ClientInfo, inSeconds, knownDeviceFor } from './auth-context.ts';
import { hmacHex, newOpaqueToken, sha256Hex } from './crypto.ts';
import { deviceAccount, newDeviceId, signDevice } from './known-device.ts';
import { type ApiUser, toApiUser } from './user-view.ts';

/** A new or refreshed session: what the handler turns into a Session result (and a cookie for web). */
export interface IssuedSession {
  user: ApiUser;
  accessToken: string;
  refreshToken: string;
  csrfToken: string;
  clientType: ClientType;
  /** Seconds the session (and so the refresh token) has left. */
  refreshTokenMaxAge: number;
  /**
   * When a session opened (not on refresh): the signal that this device has signed in to the
   * account (known-device.ts), for the device cookie (web) or the body (mobile, desktop).
   */
  deviceToken?: string | undefined;
}

/** Opens, re-issues and ends sessions; every revocation is announced to every instance. */
export function createSessionIssuer(deps: AuthDeps) {
  const { db, config, clock, keys, revocations } = deps;
  const csrfFor = (sessionId: string) => hmacHex(keys.csrf, sessionId);

  /** What a new or refreshed session hands back: a fresh access token and the session's current refresh token. */
  function issued(
    user: UserRow,
    session: sessions.SessionRow,
    refreshToken: string,
    clientType: ClientType,
    now: Date,
  ): IssuedSession {
    return {
      user: toApiUser(user),
      accessToken: deps.signAccessToken({
        sub: user.id,
        email: user.email,
        role: user.role,
        sid: session.id,
        token_use: 'access',
      }),
      refreshToken,
      csrfToken: csrfFor(session.id),
      clientType,
      refreshTokenMaxAge: Math.max(0, Math.floor((session.expires_at.getTime() - now.getTime()) / 1000)),
    };
  }

  function newSession(user: UserRow, client: ClientInfo) {
    const now = clock.now();
    const refreshToken = newOpaqueToken();
    const row: sessions.NewSession = {
      userId: user.id,
      refreshTokenHash: sha256Hex(refreshToken),
      clientType: client.clientType,
      now,
      expiresAt: inSeconds(now, config.refreshTokenTtlSeconds),
      userAgent: client.userAgent?.slice(0, 512) ?? null,
      ip: client.ip,
    };
    return { row, refreshToken, now };
  }

  /**
   * The device signal a new session hands out: the device's id kept when it already was a known
   * device of this account, a new one otherwise; valid a year from now.
   */
  function deviceTokenFor(user: UserRow, client: ClientInfo, now: Date): string {
    const deviceId = knownDeviceFor(keys, client, user, now) ?? newDeviceId();
    return signDevice(keys.device, deviceId, deviceAccount(user), now);
  }

  /** Opens a session for `user` (in `executor`'s transaction when given). */
  async function start(user: UserRow, client: ClientInfo, executor: Kysely<Database> = db): Promise<IssuedSession> {
    const { row, refreshToken, now } = newSession(user, client);
    const session = await sessions.insertSession(executor, row);
    return {
      ...issued(user, session, refreshToken, client.clientType, now),
      deviceToken: deviceTokenFor(user, client, now),
    };
  }

  /**
   * Opens a session for a password sign-in, only if the account still has the password hash and
   * role that were checked and is not disabled; undefined when that changed meanwhile.
   */
  async function startAfterPasswordCheck(user: UserRow & { password_hash: string }, client: ClientInfo) {
    if (user.disabled_at !== null) return undefined;
    const { row, refreshToken, now } = newSession(user, client);
    const checked = { passwordHash: user.password_hash, role: user.role };
    const session = await sessions.insertSessionIfCredentialsHold(db, row, checked);
    if (session === undefined) return undefined;
    return {
      ...issued(user, session, refreshToken, client.clientType, now),
      deviceToken: deviceTokenFor(user, client, now),
    };
  }

  /**
   * Records committed revocations here at once (other instances learn of them by notification).
   * Pass the ids a revoking repository call returned, after its transaction has committed.
   */
  function revoked(ids: readonly string[]): void {
    if (ids.length > 0) revocations.add(ids);
  }

  /** Ends one session everywhere: true when it was live, false when it had already ended. */
  async function endSession(sessionId: string): Promise<boolean> {
    const ids = await sessions.revokeSession(db, sessionId, clock.now());
    revoked(ids);
    return ids.length > 0;
  }

  return { issued, start, startAfterPasswordCheck, csrfFor, revoked, endSession };
}

export type SessionIssuer = ReturnType<typeof createSessionIssuer>;
