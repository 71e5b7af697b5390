import type { EventClient } from '../audit/audit-trail.ts';
import * as addressLimits from '../db/repositories/address-limits.ts';
import * as accounts from '../db/repositories/mailbox-accounts.ts';
import * as oneTimeCodes from '../db/repositories/one-time-codes.ts';
import * as sessions from '../db/repositories/sessions.ts';
import { findUserById } from '../db/repositories/users.ts';
import { ApiError } from '../errors.ts';
import { passwordResetEmail } from '../mail/templates.ts';
import {
  type AuthDeps,
  type ClientInfo,
  EMAIL_LIMITED,
  EMAIL_LIMITS,
  inSeconds,
  invalidOtp,
  knownDeviceOfAddress,
  requesterOf,
} from './auth-context.ts';
import type { BackgroundMail } from './background-mail.ts';
import { hashPassword, newHexToken, sha256Hex } from './crypto.ts';
import type { OneTimeCodes } from './one-time-codes.ts';
import type { SessionIssuer } from './session-issuer.ts';
import { createUnprovenPasswords } from './unproven-password.ts';

/** The link of a reset email: the reset page (the service's or the app's) with the token, and the allowed redirect. */
export function resetLink(page: string, token: string, redirectTo: string | undefined): string {
  const url = new URL(page);
  if (redirectTo !== undefined) url.searchParams.set('redirect_to', redirectTo);
  // Last, so that a link cut short after the token still carries all it needs.
  url.searchParams.set('token', token);
  return url.href;
}

/**
 * Password reset: a code and an independent link token by email, a code exchanged for a reset
 * token, and the reset itself (a new password, the address verified, every session ended).
 */
export function createPasswordReset(deps: AuthDeps, issuer: SessionIssuer, mail: BackgroundMail, codes: OneTimeCodes) {
  const { db, config, clock, signInThrottle } = deps;
  const unproven = createUnprovenPasswords(issuer, mail, deps.audit);

  /**
   * Emails a fresh code and link to the account with this address unless it has none or is
   * disabled. The email limits are claimed and the same statements run for every address, and
   * the email goes out after the answer, so that nothing tells the cases apart. `redirectTo` must
   * already be allowed (redirects.ts).
   */
  async function sendPasswordReset(
    emailInput: string,
    client: Pick<ClientInfo, 'ip' | 'devices'>,
    redirectTo: string | undefined,
  ): Promise<void> {
    const email = emailInput.toLowerCase();
    const now = clock.now();
    const requester = requesterOf(client);
    const issued = codes.next('password_reset', email, now);
    let claim: addressLimits.EmailClaim | undefined;
    const sent = await db.transaction().execute(async (trx) => {
      // A device that signed in to the address's account has a budget of its own (known-device.ts).
      const device = await knownDeviceOfAddress(trx, deps.keys, client, email, now);
      claim = await addressLimits.claimEmailSend(trx, email, { requester, device, kind: 'reset' }, now, EMAIL_LIMITS);
      if (claim === undefined) return 'limited' as const;
      return codes.issueResetCode(trx, email, issued.stored, now);
    });
    if (sent === 'limited') return deps.mailer.notSent(email, EMAIL_LIMITED);
    if (sent === undefined) return deps.mailer.notSent(email, 'no account has this address');
    const link = resetLink(config.resetPasswordUrl, issued.token, redirectTo);
    mail.send(passwordResetEmail(email, issued.code, link, Math.round(config.emailOtpTtlSeconds / 60)), {
      requester,
      claimedAt: now,
      claim,
    });
  }

  /**
   * Spends a right reset code for a reset token (stored as SHA-256, valid as long as a link
   * token). A code of an account disabled since it was sent is refused like a wrong one.
   */
  async function exchangeResetCode(emailInput: string, code: string): Promise<{ token: string; expiresAt: string }> {
    const email = emailInput.toLowerCase();
    const row = await codes.check('password_reset', email, code);
    const now = clock.now();
    const token = newHexToken();
    const expiresAt = inSeconds(now, config.emailLinkTtlSeconds);
    await db.transaction().execute(async (trx) => {
      // The address first, then the code and the account's row (addressLock).
      await addressLimits.lockAddresses(trx, [email]);
      const consumed = await codes.consume(trx, row, now);
      if (consumed.user_id === null) throw invalidOtp();
      await codes.insertToken(trx, {
        purpose: 'password_reset_token',
        email: consumed.email,
        userId: consumed.user_id,
        tokenHash: sha256Hex(token),
        expiresAt,
        now,
      });
    });
    return { token, expiresAt: expiresAt.toISOString() };
  }

  /**
   * Sets a new password with a reset token (the link's or an exchanged one), in one transaction:
   * the token is taken (deleted) first, after the address's lock, so of two resets with one token
   * exactly one goes on; the address is marked verified; every other reset, sign-in and
   * verification code of the account is deleted (a competing sign-up's pending password with
   * them); every session ends, on every instance. A password left unproven by a verification goes
   * with every provider identity linked since, and the owner is told (unproven-password.ts). A
   * token of a disabled account is spent and refused like an unknown one.
   */
  async function resetPassword(
    tokenInput: string,
    newPassword: string,
    client: EventClient | null = null,
  ): Promise<void> {
    // Hashed first: the slow part never runs while the account's row is locked.
    const hash = await hashPassword(newPassword);
    const now = clock.now();
    // Read first for its address, then taken under the address's lock (addressLock).
    const token = await codes.checkToken('password_reset_token', tokenInput);
    if (token.user_id === null) throw invalidOtp();
    const { email, user_id: owner } = token;
    const done = await db.transaction().execute(async (trx) => {
      await addressLimits.lockAddresses(trx, [email]);
      if ((await codes.takeToken(trx, 'password_reset_token', tokenInput, now)) !== owner) return undefined;
      const user = await accounts.lockUserById(trx, owner);
      if (user === undefined || user.disabled_at !== null) return undefined;
      const removal = await unproven.removeOnProof(trx, user, 'password reset', now);
      await accounts.setPasswordAfterReset(trx, user.id, hash);
      await oneTimeCodes.deleteAccountCodes(trx, user);
      const ended = await sessions.revokeUserSessions(trx, user.id, now);
      await deps.audit.recordSessionsEnded(trx, { userId: user.id, sessionIds: ended, by: 'password_reset', client });
      await deps.audit.record(trx, {
        type: 'password_reset',
        userId: user.id,
        client,
        details: { sessionsEnded: ended.length },
      });
      return { email: user.email, ended, removal };
    });
    if (done === undefined) throw invalidOtp();
    issuer.revoked(done.ended);
    unproven.announce(done.removal);
    // The mailbox's owner chose this password: failed guesses by others must not hold them back.
    await signInThrottle.recordSuccess(done.email);
  }

  /**
   * Whether a reset link's token would be taken: unused, unexpired, of an account that is not
   * disabled (read only: the link's page asks before its form, as resetPassword decides).
   */
  async function resetLinkIsLive(token: string): Promise<boolean> {
    try {
      const row = await codes.checkToken('password_reset_token', token);
      const owner = row.user_id === null ? undefined : await findUserById(db, row.user_id);
      return owner !== undefined && owner.disabled_at === null;
    } catch (err) {
      if (err instanceof ApiError && err.code === 'INVALID_OTP') return false;
      throw err;
    }
  }

  return { sendPasswordReset, exchangeResetCode, resetPassword, resetLinkIsLive };
}

export type PasswordReset = ReturnType<typeof createPasswordReset>;
