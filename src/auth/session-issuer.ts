import type { Kysely } from 'kysely';
import type { EventClient } from '../audit/audit-trail.ts';
import * as sessions from '../db/repositories/sessions.ts';
import type { UserRow } from '../db/repositories/users.ts';
import type { Aal, AuthMethod, ClientType, Database } from '../db/schema.ts';
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

/** Why a session ends, as the audit log records it. */
export interface SessionEnding {
  type: 'logout' | 'refresh_token_reused' | 'session_ended';
  /** Who ended it: the account itself unless given (an administrator's id; null: the service). */
  actorId?: string | null | undefined;
  /** For `session_ended`: from where (`self`: the owner's other session; `administrator`). */
  by?: 'self' | 'administrator' | undefined;
  client?: EventClient | undefined;
}

/** The most proofs a session's `amr` keeps (the latest). */
const MAX_AMR_ENTRIES = 5;

/** Opens, re-issues and ends sessions; every revocation is announced to every instance. */
export function createSessionIssuer(deps: AuthDeps) {
  const { db, config, clock, keys, revocations, audit } = deps;
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
        aal: session.aal,
        amr: session.amr,
        ...(session.mfa_pending && session.aal === 'aal1' ? { next_aal: 'aal2' as const } : {}),
      }),
      refreshToken,
      csrfToken: csrfFor(session.id),
      clientType,
      refreshTokenMaxAge: Math.max(0, Math.floor((session.expires_at.getTime() - now.getTime()) / 1000)),
    };
  }

  function newSession(user: UserRow, client: ClientInfo, methods: readonly AuthMethod['method'][], aal: Aal = 'aal1') {
    const now = clock.now();
    const refreshToken = newOpaqueToken();
    const timestamp = Math.floor(now.getTime() / 1000);
    const row: sessions.NewSession = {
      aal,
      amr: methods.map((method) => ({ method, timestamp })),
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

  /**
   * Opens a session for `user`, proven by `method` (in `executor`'s transaction when given). It owes
   * a second step when the account has a verified factor: read from the account's row as the session
   * is inserted (FOR SHARE), so that a factor verified meanwhile either commits first (and this
   * session owes the step) or waits, and then ends this session with the account's others.
   */
  async function start(
    user: UserRow,
    client: ClientInfo,
    method: AuthMethod['method'],
    executor: Kysely<Database> = db,
    aal: Aal = 'aal1',
  ): Promise<IssuedSession> {
    const { row, refreshToken, now } = newSession(user, client, [method], aal);
    const opened = async (trx: Kysely<Database>) => {
      const session = await sessions.insertSession(trx, row);
      await recordSignIn(trx, user, session, method, client);
      return session;
    };
    const session = executor === db ? await db.transaction().execute(opened) : await opened(executor);
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
    const { row, refreshToken, now } = newSession(user, client, ['password']);
    const checked = { passwordHash: user.password_hash, role: user.role };
    const session = await db.transaction().execute(async (trx) => {
      const inserted = await sessions.insertSessionIfCredentialsHold(trx, row, checked);
      if (inserted !== undefined) await recordSignIn(trx, user, inserted, 'password', client);
      return inserted;
    });
    if (session === undefined) return undefined;
    return {
      ...issued(user, session, refreshToken, client.clientType, now),
      deviceToken: deviceTokenFor(user, client, now),
    };
  }

  /** The audit event of a session opened by a first factor (announced as `session.created`). */
  function recordSignIn(
    trx: Kysely<Database>,
    user: UserRow,
    session: sessions.SessionRow,
    method: AuthMethod['method'],
    client: ClientInfo,
  ): Promise<void> {
    return audit.record(trx, {
      type: 'sign_in',
      method,
      userId: user.id,
      sessionId: session.id,
      client,
      details: { clientType: session.client_type, aal: session.aal },
      opensSession: true,
    });
  }

  /**
   * Records committed revocations here at once (other instances learn of them by notification).
   * Pass the ids a revoking repository call returned, after its transaction has committed.
   */
  function revoked(ids: readonly string[]): void {
    if (ids.length > 0) revocations.add(ids);
  }

  /**
   * Ends one session of `userId` everywhere, recording why in the audit log in the same
   * transaction: true when it was live, false when it had already ended (or is not the account's).
   */
  async function endSession(userId: string, sessionId: string, ending: SessionEnding): Promise<boolean> {
    const ids = await db.transaction().execute(async (trx) => {
      const ended = await sessions.revokeSession(trx, sessionId, clock.now(), userId);
      if (ended.length > 0) {
        await audit.record(trx, {
          type: ending.type,
          userId,
          actorId: ending.actorId,
          sessionId,
          client: ending.client,
          details: ending.by === undefined ? undefined : { by: ending.by },
        });
      }
      return ended;
    });
    revoked(ids);
    return ids.length > 0;
  }

  /**
   * Replaces a session that proved a second factor with a new one at aal2 (in `trx`): the old one
   * ends, so that every token issued before the step stops working, everywhere.
   */
  async function stepUp(
    trx: Kysely<Database>,
    user: UserRow,
    previous: sessions.SessionRow,
    method: AuthMethod['method'],
    client: ClientInfo,
  ): Promise<{ issued: IssuedSession; ended: string[] }> {
    // The same kind of client and the same end: a second factor proves who holds the session, it
    // does not lengthen it (nor turn a web session into one whose refresh token is in a body).
    const { row, refreshToken, now } = newSession(user, { ...client, clientType: previous.client_type }, [], 'aal2');
    row.expiresAt = previous.expires_at;
    row.amr = [...previous.amr, { method, timestamp: Math.floor(now.getTime() / 1000) }].slice(-MAX_AMR_ENTRIES);
    const ended = await sessions.revokeSession(trx, previous.id, now);
    const session = await sessions.insertSession(trx, row);
    await audit.record(trx, {
      type: 'mfa_verified',
      method,
      userId: user.id,
      sessionId: session.id,
      client,
      details: { replacedSessionId: previous.id, clientType: session.client_type, aal: session.aal },
      opensSession: true,
    });
    return {
      issued: {
        ...issued(user, session, refreshToken, previous.client_type, now),
        deviceToken: deviceTokenFor(user, client, now),
      },
      ended,
    };
  }

  return { issued, start, startAfterPasswordCheck, stepUp, csrfFor, revoked, endSession };
}

export type SessionIssuer = ReturnType<typeof createSessionIssuer>;
