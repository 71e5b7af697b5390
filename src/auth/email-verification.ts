import type { Transaction } from 'kysely';
import * as addressLimits from '../db/repositories/address-limits.ts';
import * as emailCodes from '../db/repositories/email-codes.ts';
import * as users from '../db/repositories/users.ts';
import * as verifications from '../db/repositories/verifications.ts';
import type { Database } from '../db/schema.ts';
import { verificationEmail } from '../mail/templates.ts';
import {
  type AuthDeps,
  type ClientInfo,
  codeHmacWith,
  EMAIL_LIMITED,
  EMAIL_LIMITS,
  inSeconds,
  invalidOtp,
  MAX_CODE_ATTEMPTS_PER_DAY,
  MAX_CODE_FAILURES,
  requesterOf,
} from './auth-context.ts';
import type { BackgroundMail } from './background-mail.ts';
import { constantTimeEqual, newHexToken, newOtpCode, sha256Hex } from './crypto.ts';
import { linkWithRedirect } from './redirects.ts';
import type { IssuedSession, SessionIssuer } from './session-issuer.ts';

/** A code and a link token, before they are stored (as an HMAC and a hash) and mailed. */
export interface NewCode {
  code: string;
  token: string;
  /** How the code and token are stored for the address `email` (lower-cased). */
  stored(email: string): verifications.IssuedCode;
}

/** Makes verification codes and links and the emails that carry them. */
export function createCodeIssuer(deps: AuthDeps) {
  const { config } = deps;
  const codeHmac = codeHmacWith(deps.keys);
  return {
    /** A fresh code and token; `unusable` ones are expired from the start (they are never mailed). */
    next(now: Date, options: { unusable?: boolean } = {}): NewCode {
      const code = newOtpCode();
      const token = newHexToken();
      const expiry = (seconds: number) => (options.unusable ? now : inSeconds(now, seconds));
      return {
        code,
        token,
        stored: (email) => ({
          codeHmac: codeHmac(email, code),
          tokenHash: sha256Hex(token),
          codeExpiresAt: expiry(config.emailOtpTtlSeconds),
          tokenExpiresAt: expiry(config.emailLinkTtlSeconds),
        }),
      };
    },
    /** The verification email; `redirectTo` (already allowed, see redirects.ts) rides in the link for its page. */
    email(to: string, issued: NewCode, contested: boolean, redirectTo?: string) {
      const link = linkWithRedirect(config.emailVerifyUrl, issued.token, redirectTo);
      return verificationEmail(to, issued.code, link, Math.round(config.emailOtpTtlSeconds / 60), contested);
    },
    codeHmac,
  };
}

export type CodeIssuer = ReturnType<typeof createCodeIssuer>;

/** Re-sending the verification email, and verifying an address by code or link. */
export function createEmailVerification(
  deps: AuthDeps,
  sessions: SessionIssuer,
  mail: BackgroundMail,
  codes: CodeIssuer,
) {
  const { db, clock } = deps;

  /**
   * Sends a fresh code and link to an unverified account's address (voiding the earlier ones). The
   * email limits are claimed for every address, known or not, so that all cost the same.
   */
  async function sendVerification(
    emailInput: string,
    client: Pick<ClientInfo, 'ip'>,
    redirectTo?: string,
  ): Promise<void> {
    const email = emailInput.toLowerCase();
    const now = clock.now();
    const requester = requesterOf(client);
    const code = codes.next(now);
    const sent = await db.transaction().execute(async (trx) => {
      const claimant = { requester, kind: 'verification' as const };
      if (!(await addressLimits.claimEmailSend(trx, email, claimant, now, EMAIL_LIMITS))) return 'limited' as const;
      return verifications.reissueVerification(trx, email, code.stored(email), now);
    });
    if (sent === 'limited') return deps.mailer.notSent(email, EMAIL_LIMITED);
    if (sent === undefined) return deps.mailer.notSent(email, 'no account awaits verification of this address');
    mail.send(codes.email(email, code, sent.contested, redirectTo), { requester, claimedAt: now });
  }

  /**
   * A code submission: the code's attempt is taken and the address's attempt counted (one writing
   * statement, account or not; a guess at a live code only) before comparing, so that concurrent
   * guesses cannot share attempts.
   */
  async function checkCode(emailInput: string, otp: string): Promise<verifications.VerificationRow> {
    const email = emailInput.toLowerCase();
    const now = clock.now();
    const { attempts, v } = await db.transaction().execute(async (trx) => {
      const taken = await verifications.takeCodeAttempt(trx, email);
      // No unused code: one row written instead, so that time does not tell whether there was one.
      await emailCodes.recordAttemptWithoutCode(trx, email, 'verification', taken !== undefined, now);
      const againstLiveCode = taken !== undefined && taken.code_expires_at > now;
      return { attempts: await addressLimits.recordCodeAttempt(trx, email, now, againstLiveCode), v: taken };
    });
    const matches = constantTimeEqual(v?.code_hmac ?? '0'.repeat(64), codes.codeHmac(email, otp));
    const live =
      v !== undefined &&
      v.code_expires_at > now &&
      v.failed_attempts <= MAX_CODE_FAILURES &&
      attempts <= MAX_CODE_ATTEMPTS_PER_DAY;
    if (!matches || !live) throw invalidOtp();
    return v;
  }

  async function checkLink(token: string): Promise<verifications.VerificationRow> {
    const v = await verifications.findVerificationByTokenHash(db, sha256Hex(token.toLowerCase()));
    // Failed code attempts do not void the link: guessing codes must not lock the owner out.
    if (v === undefined || v.consumed_at !== null || v.token_expires_at <= clock.now()) throw invalidOtp();
    return v;
  }

  /**
   * Consumes a checked code or link and proves the mailbox, in `trx`. The pending password becomes
   * the account's only when a single sign-up asked for it; after competing sign-ups the account has
   * none until its owner sets one. The password is proven when one of `bindings` (what the client
   * carried: see sign-up-binding.ts) is the binding of the sign-up that chose it; otherwise it is
   * unproven from now on (unproven-password.ts). Returns the verified account, and whether its
   * password is set.
   */
  async function consume(
    trx: Transaction<Database>,
    v: verifications.VerificationRow,
    now: Date,
    bindings: readonly string[],
  ) {
    // The row as consumed: a sign-up that competed after the code was read still counts.
    const consumed = await verifications.consumeVerification(trx, v, now);
    if (consumed === undefined) throw invalidOtp();
    const password = consumed.contested ? null : (consumed.pending_password_hash ?? undefined);
    const proven = bindings.some((b) => constantTimeEqual(sha256Hex(b), consumed.binding_hash ?? ''));
    await users.markEmailVerified(trx, consumed.user_id, password, proven ? null : now);
    await verifications.forgetPendingSignUp(trx, consumed.user_id);
    const user = await users.findUserById(trx, consumed.user_id);
    // A disabled account is not verified and gets no session: the answer of a wrong code, and
    // the rollback leaves the code unused.
    if (!user || user.disabled_at !== null) throw invalidOtp();
    return { user, hasPassword: user.password_hash !== null };
  }

  /** A code comes with its address, a link token alone (the contract's two forms of the body). */
  async function verifyEmail(
    input: { otp: string; email: string } | { otp: string },
    client: ClientInfo,
    bindings: readonly string[] = [],
  ): Promise<IssuedSession> {
    const v = 'email' in input ? await checkCode(input.email, input.otp) : await checkLink(input.otp);
    const now = clock.now();
    return db
      .transaction()
      .execute(async (trx) => sessions.start((await consume(trx, v, now, bindings)).user, client, trx));
  }

  /**
   * Proves the mailbox by a link token without opening a session: the service's own link page,
   * which belongs to no app that could use one. The same checks and answers as verifyEmail. Says
   * whether the account has a password to sign in with (none after competing sign-ups).
   */
  async function confirmEmail(token: string, bindings: readonly string[] = []): Promise<{ hasPassword: boolean }> {
    const v = await checkLink(token);
    const now = clock.now();
    return db
      .transaction()
      .execute(async (trx) => ({ hasPassword: (await consume(trx, v, now, bindings)).hasPassword }));
  }

  return { sendVerification, verifyEmail, confirmEmail };
}
