import type { FastifyBaseLogger } from 'fastify';
import type { Kysely } from 'kysely';
import type { Clock } from '../clock.ts';
import type { Config } from '../config.ts';
import * as sessions from '../db/repositories/sessions.ts';
import * as users from '../db/repositories/users.ts';
import * as verifications from '../db/repositories/verifications.ts';
import type { ClientType, Database } from '../db/schema.ts';
import { ApiError } from '../errors.ts';
import type { Mailer } from '../mail/mailer.ts';
import { existingAccountNotice, verificationEmail } from '../mail/templates.ts';
import type { AccessTokenClaims } from './access-token.ts';
import {
  constantTimeEqual,
  type DerivedKeys,
  dummyPasswordHash,
  hashPassword,
  hmacHex,
  newHexToken,
  newOpaqueToken,
  newOtpCode,
  sha256Hex,
  verifyPassword,
} from './crypto.ts';
import { type ApiUser, toApiUser } from './user-view.ts';

/** Failed code attempts after which a verification is void. */
export const MAX_CODE_FAILURES = 5;
/** Minimum gap between two verification emails to one address, and how many it gets per day. */
export const EMAIL_LIMITS = { cooldownSeconds: 60, perDay: 10 };

export interface AuthDeps {
  db: Kysely<Database>;
  config: Readonly<Config>;
  clock: Clock;
  mailer: Mailer;
  keys: DerivedKeys;
  signAccessToken(claims: Omit<AccessTokenClaims, 'iss' | 'aud' | 'iat' | 'exp'>): string;
  log: FastifyBaseLogger;
}

export interface ClientInfo {
  clientType: ClientType;
  userAgent: string | null;
  ip: string | null;
}

/** A new or refreshed session: what the handler turns into a Session result (and a cookie for web). */
export interface IssuedSession {
  user: ApiUser;
  accessToken: string;
  refreshToken: string;
  csrfToken: string;
  clientType: ClientType;
  /** Seconds the session (and so the refresh token) has left. */
  refreshTokenMaxAge: number;
}

const invalidOtp = () => new ApiError(400, 'INVALID_OTP', 'The code or link is invalid or has expired');
const invalidCredentials = () => new ApiError(401, 'INVALID_CREDENTIALS', 'Email or password is incorrect');
const invalidRefresh = () => new ApiError(401, 'REFRESH_TOKEN_INVALID', 'The refresh token is invalid or has expired');
const refreshReused = () =>
  new ApiError(401, 'REFRESH_TOKEN_REUSED', 'This refresh token was already used; the session has been ended');

/** Sign-up, sign-in, email verification and session lifecycle. Knows nothing of HTTP. */
export function createAuthService(deps: AuthDeps) {
  const { db, config, clock, mailer, keys, log } = deps;
  const codeHmac = (userId: string, code: string) => hmacHex(keys.otp, `${userId}:${code}`);
  const csrfFor = (sessionId: string) => hmacHex(keys.csrf, sessionId);
  const inSeconds = (now: Date, seconds: number) => new Date(now.getTime() + seconds * 1000);

  // Mail goes out after the answer is decided and never delays it, so that timing says nothing
  // about whether an address exists. Sends in flight are awaited at shutdown; a failed one gives
  // its cooldown claim back (so the person can ask again at once) and is logged without secrets.
  const pendingSends = new Set<Promise<void>>();
  const sendInBackground = (message: Parameters<Mailer['send']>[0], claimedAt: Date) => {
    const sending: Promise<void> = mailer
      .send(message)
      .catch(async (err: Error) => {
        log.error({ err: { message: err.message }, to: message.to }, 'sending email failed');
        await verifications.releaseEmailSend(db, message.to, claimedAt).catch(() => {});
      })
      .finally(() => pendingSends.delete(sending));
    pendingSends.add(sending);
  };
  /** Waits for the emails still being sent (called when the app closes). */
  const drainMail = async () => {
    await Promise.allSettled([...pendingSends]);
  };

  /** What a new or refreshed session hands back: a fresh access token and the session's current refresh token. */
  function issued(
    user: users.UserRow,
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

  async function startSession(
    user: users.UserRow,
    client: ClientInfo,
    executor: Kysely<Database> = db,
  ): Promise<IssuedSession> {
    const now = clock.now();
    const refreshToken = newOpaqueToken();
    const session = await sessions.insertSession(executor, {
      userId: user.id,
      refreshTokenHash: sha256Hex(refreshToken),
      clientType: client.clientType,
      now,
      expiresAt: inSeconds(now, config.refreshTokenTtlSeconds),
      userAgent: client.userAgent?.slice(0, 512) ?? null,
      ip: client.ip,
    });
    return issued(user, session, refreshToken, client.clientType, now);
  }

  /**
   * Issues a fresh code and link (voiding earlier ones) and mails them, unless the cooldown or the
   * daily cap says no. A sign-up passes its password hash, which the account gets on verification.
   */
  async function sendVerificationTo(user: users.UserRow, pendingPasswordHash?: string): Promise<void> {
    const now = clock.now();
    if (!(await verifications.claimEmailSend(db, user.email, now, EMAIL_LIMITS))) return;
    const code = newOtpCode();
    const token = newHexToken();
    await verifications.replaceVerification(db, {
      userId: user.id,
      codeHmac: codeHmac(user.id, code),
      tokenHash: sha256Hex(token),
      codeExpiresAt: inSeconds(now, config.emailOtpTtlSeconds),
      tokenExpiresAt: inSeconds(now, config.emailLinkTtlSeconds),
      pendingPasswordHash,
      now,
    });
    const link = `${config.emailVerifyUrl}?token=${token}`;
    sendInBackground(verificationEmail(user.email, code, link, Math.round(config.emailOtpTtlSeconds / 60)), now);
  }

  async function signUp(
    input: { email: string; password: string; name?: string | undefined },
    client: ClientInfo,
  ): Promise<{ kind: 'verification-required' } | { kind: 'session'; session: IssuedSession }> {
    const email = input.email.toLowerCase();
    // Hash before looking anything up, so that new and existing addresses cost the same.
    const passwordHash = await hashPassword(input.password);
    const newUser = { email, passwordHash, name: input.name ?? null, emailVerified: false };
    if (!config.requireEmailVerification) {
      // Account and session in one transaction: a sign-up that fails (say, the database goes away)
      // leaves nothing behind, so retrying it is safe.
      const session = await db.transaction().execute(async (trx) => {
        const created = await users.insertPasswordUser(trx, newUser);
        return created ? startSession(created, client, trx) : undefined;
      });
      if (!session) throw new ApiError(409, 'USER_ALREADY_EXISTS', 'An account with this email already exists');
      return { kind: 'session', session };
    }
    const created = await db.transaction().execute((trx) => users.insertPasswordUser(trx, newUser));
    const account = created ?? (await users.findUserByEmail(db, email));
    if (account && !account.email_verified) {
      // New, or registered but never verified: whoever proves they own the address with this
      // email's code gets this sign-up's password (not that of an earlier, unproven sign-up).
      await sendVerificationTo(account, passwordHash);
    } else if (account) {
      const now = clock.now();
      if (await verifications.claimEmailSend(db, email, now, EMAIL_LIMITS))
        sendInBackground(existingAccountNotice(email), now);
    }
    return { kind: 'verification-required' };
  }

  async function signIn(input: { email: string; password: string }, client: ClientInfo): Promise<IssuedSession> {
    const user = await users.findUserByEmail(db, input.email.toLowerCase());
    const ok = await verifyPassword(input.password, user?.password_hash ?? (await dummyPasswordHash));
    if (!user?.password_hash || !ok) throw invalidCredentials();
    if (config.requireEmailVerification && !user.email_verified) {
      throw new ApiError(403, 'EMAIL_NOT_VERIFIED', 'Verify your email address before signing in');
    }
    return startSession(user, client);
  }

  async function sendVerification(emailInput: string): Promise<void> {
    const user = await users.findUserByEmail(db, emailInput.toLowerCase());
    if (user && !user.email_verified) await sendVerificationTo(user);
  }

  async function verifyEmail(
    input: { otp: string; email?: string | undefined },
    client: ClientInfo,
  ): Promise<IssuedSession> {
    const isCode = /^\d{6}$/.test(input.otp);
    if (isCode && input.email === undefined) {
      throw new ApiError(400, 'INVALID_INPUT', 'body.email is required with a 6-digit code');
    }
    if (!isCode && input.email !== undefined) {
      throw new ApiError(400, 'INVALID_INPUT', 'body.email must not be sent with a link token');
    }
    const now = clock.now();
    let verification: verifications.VerificationRow | undefined;
    if (isCode) {
      const email = (input.email as string).toLowerCase();
      const found = await verifications.findVerificationByEmail(db, email);
      const v = found?.verification;
      const expected = codeHmac(found?.userId ?? '00000000-0000-0000-0000-000000000000', input.otp);
      const matches = constantTimeEqual(v?.code_hmac ?? '0'.repeat(64), expected);
      const live =
        v !== undefined && v.consumed_at === null && v.code_expires_at > now && v.failed_attempts < MAX_CODE_FAILURES;
      if (!matches || !live) {
        await verifications.recordFailedCodeAttempt(db, email);
        throw invalidOtp();
      }
      verification = v;
    } else {
      const v = await verifications.findVerificationByTokenHash(db, sha256Hex(input.otp.toLowerCase()));
      // Failed code attempts do not void the link: guessing codes must not lock the owner out.
      const live = v !== undefined && v.consumed_at === null && v.token_expires_at > now;
      if (!live) throw invalidOtp();
      verification = v;
    }
    const v = verification as verifications.VerificationRow;
    return db.transaction().execute(async (trx) => {
      if (!(await verifications.consumeVerification(trx, v, now, isCode ? MAX_CODE_FAILURES : undefined))) {
        throw invalidOtp();
      }
      await users.markEmailVerified(trx, v.user_id, v.pending_password_hash);
      const user = await users.findUserById(trx, v.user_id);
      if (!user) throw invalidOtp();
      return startSession(user, client, trx);
    });
  }

  /**
   * Finds the session a refresh token belongs to (current or already rotated) and, for web clients,
   * checks the CSRF token bound to that session before anything changes.
   */
  async function resolveRefresh(refreshToken: string, client: ClientInfo, csrfToken: string | undefined) {
    const hash = sha256Hex(refreshToken);
    const current = await sessions.findSessionByRefreshHash(db, hash);
    const rotated = current ? undefined : await sessions.findSessionOfRotatedToken(db, hash);
    const session = current ?? rotated;
    if (!session) throw invalidRefresh();
    if (client.clientType === 'web' && !constantTimeEqual(csrfToken ?? '', csrfFor(session.id))) {
      throw new ApiError(403, 'CSRF_INVALID', 'The X-CSRF-Token header is missing or does not match this session');
    }
    return { hash, session, reused: rotated !== undefined };
  }

  async function refresh(
    refreshToken: string,
    client: ClientInfo,
    csrfToken: string | undefined,
  ): Promise<IssuedSession> {
    const { hash, session, reused } = await resolveRefresh(refreshToken, client, csrfToken);
    const now = clock.now();
    const reuse = async () => {
      // A rotated token presented again: someone else may hold the session. End it for everyone.
      await sessions.revokeSession(db, session.id, now);
      log.warn({ sessionId: session.id, userId: session.user_id }, 'refresh token reuse: session revoked');
      return refreshReused();
    };
    if (reused) throw await reuse();
    if (session.revoked_at !== null || session.expires_at <= now) throw invalidRefresh();
    const next = newOpaqueToken();
    const user = await db.transaction().execute(async (trx) => {
      if (!(await sessions.rotateRefreshToken(trx, session.id, hash, sha256Hex(next), now))) return undefined;
      return users.findUserById(trx, session.user_id);
    });
    if (user === undefined) throw await reuse(); // lost a race with another refresh of the same token
    return issued(user, session, next, client.clientType, now);
  }

  async function logout(refreshToken: string, client: ClientInfo, csrfToken: string | undefined): Promise<void> {
    const { session, reused } = await resolveRefresh(refreshToken, client, csrfToken);
    // Logging out with a rotated token still ends the session: its holder may not be the owner.
    await sessions.revokeSession(db, session.id, clock.now());
    if (reused) throw refreshReused();
    if (session.revoked_at !== null) throw invalidRefresh();
  }

  async function currentUser(userId: string): Promise<ApiUser> {
    const user = await users.findUserById(db, userId);
    if (!user) throw new ApiError(401, 'UNAUTHORIZED', 'The account of this token no longer exists');
    return toApiUser(user);
  }

  /** Creates or updates the configured administrator (idempotent; runs at every start). */
  async function ensureAdmin(): Promise<void> {
    if (!config.admin) return;
    const existing = await users.findUserByEmail(db, config.admin.email);
    const samePassword = existing?.password_hash
      ? await verifyPassword(config.admin.password, existing.password_hash)
      : false;
    const hash =
      samePassword && existing?.password_hash ? existing.password_hash : await hashPassword(config.admin.password);
    await users.upsertAdmin(db, config.admin.email, hash);
  }

  return { signUp, signIn, sendVerification, verifyEmail, refresh, logout, currentUser, ensureAdmin, drainMail };
}

export type AuthService = ReturnType<typeof createAuthService>;
