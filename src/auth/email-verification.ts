import type { Transaction } from 'kysely';
import type { EventClient } from '../audit/audit-trail.ts';
import * as addressLimits from '../db/repositories/address-limits.ts';
import * as oneTimeCodes from '../db/repositories/one-time-codes.ts';
import * as users from '../db/repositories/users.ts';
import type { Database } from '../db/schema.ts';
import { ApiError } from '../errors.ts';
import { verificationEmail } from '../mail/templates.ts';
import {
  type AuthDeps,
  type ClientInfo,
  EMAIL_LIMITED,
  EMAIL_LIMITS,
  invalidOtp,
  requesterOf,
} from './auth-context.ts';
import type { BackgroundMail } from './background-mail.ts';
import { constantTimeEqual, sha256Hex } from './crypto.ts';
import type { NewCode, OneTimeCodeRow, OneTimeCodes } from './one-time-codes.ts';
import { linkWithRedirect } from './redirects.ts';
import type { IssuedSession, SessionIssuer } from './session-issuer.ts';

/** The verification email; `redirectTo` (already allowed, see redirects.ts) rides in the link for its page. */
export function verificationMail(
  config: AuthDeps['config'],
  to: string,
  issued: NewCode,
  contested: boolean,
  redirectTo?: string,
) {
  const link = linkWithRedirect(config.emailVerifyUrl, issued.token, redirectTo);
  return verificationEmail(to, issued.code, link, Math.round(config.emailOtpTtlSeconds / 60), contested);
}

/** Re-sending the verification email, and verifying an address by code or link. */
export function createEmailVerification(
  deps: AuthDeps,
  sessions: SessionIssuer,
  mail: BackgroundMail,
  codes: OneTimeCodes,
) {
  const { db, clock, config } = deps;

  /** Runs a verification, reporting it to the metrics: ok, or failed when it was refused (INVALID_OTP). */
  async function reported<T>(verification: () => Promise<T>): Promise<T> {
    try {
      const result = await verification();
      deps.events?.emailVerification('ok');
      return result;
    } catch (err) {
      if (err instanceof ApiError && err.code === 'INVALID_OTP') deps.events?.emailVerification('failed');
      throw err;
    }
  }

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
    const code = codes.next('verification', email, now);
    // The claim and the new code in one statement: one round trip and one commit for every address.
    const claimant = { requester, kind: 'verification' as const };
    const { claimed, issued: sent } = await codes.claimAndReissueVerification(
      db,
      email,
      claimant,
      EMAIL_LIMITS,
      code.stored,
      now,
    );
    if (!claimed) return deps.mailer.notSent(email, EMAIL_LIMITED);
    if (sent === undefined) return deps.mailer.notSent(email, 'no account awaits verification of this address');
    mail.send(verificationMail(config, email, code, sent.contested, redirectTo), { requester, claimedAt: now });
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
    v: OneTimeCodeRow,
    now: Date,
    bindings: readonly string[],
    proof: { method: 'code' | 'link'; client: EventClient | null },
  ) {
    // The address first, then the code and the account's row (addressLock).
    await addressLimits.lockAddresses(trx, [v.email]);
    // The row as consumed: a sign-up that competed after the code was read still counts.
    const consumed = await codes.consume(trx, v, now);
    if (consumed.user_id === null) throw invalidOtp();
    // An account verified meanwhile (by another flow that proved the mailbox, while a sign-up
    // wrote this row) keeps its password: markEmailVerified sets or removes one only on an
    // unverified account.
    const password = consumed.contested ? null : (consumed.pending_password_hash ?? undefined);
    const proven = bindings.some((b) => constantTimeEqual(sha256Hex(b), consumed.binding_hash ?? ''));
    await users.markEmailVerified(trx, consumed.user_id, password, proven ? null : now);
    await oneTimeCodes.forgetPendingSignUp(trx, consumed);
    const user = await users.findUserById(trx, consumed.user_id);
    // A disabled account is not verified and gets no session: the answer of a wrong code, and
    // the rollback leaves the code unused.
    if (!user || user.disabled_at !== null) throw invalidOtp();
    await deps.audit.record(trx, {
      type: 'email_verified',
      method: proof.method,
      userId: user.id,
      client: proof.client,
      email: user.email,
      details: { passwordSet: user.password_hash !== null, passwordProven: proven },
      // Its sign-up was not announced (sign-up.ts): the account is, now that the mailbox is proven.
      alsoAnnounce: config.requireEmailVerification ? ['user.created'] : [],
    });
    return { user, hasPassword: user.password_hash !== null };
  }

  /** A code comes with its address, a link token alone (the contract's two forms of the body). */
  async function verifyEmail(
    input: { otp: string; email: string } | { otp: string },
    client: ClientInfo,
    bindings: readonly string[] = [],
  ): Promise<IssuedSession> {
    return reported(async () => {
      const v =
        'email' in input
          ? await codes.check('verification', input.email.toLowerCase(), input.otp)
          : await codes.checkToken('verification', input.otp);
      const now = clock.now();
      return db.transaction().execute(async (trx) => {
        const proof = { method: 'email' in input ? ('code' as const) : ('link' as const), client };
        return sessions.start((await consume(trx, v, now, bindings, proof)).user, client, 'otp', trx);
      });
    });
  }

  /**
   * Proves the mailbox by a link token without opening a session: the service's own link page,
   * which belongs to no app that could use one. The same checks and answers as verifyEmail. Says
   * whether the account has a password to sign in with (none after competing sign-ups).
   */
  async function confirmEmail(
    token: string,
    bindings: readonly string[] = [],
    client: EventClient | null = null,
  ): Promise<{ hasPassword: boolean }> {
    return reported(async () => {
      const v = await codes.checkToken('verification', token);
      const now = clock.now();
      const proof = { method: 'link' as const, client };
      return db
        .transaction()
        .execute(async (trx) => ({ hasPassword: (await consume(trx, v, now, bindings, proof)).hasPassword }));
    });
  }

  return { sendVerification, verifyEmail, confirmEmail };
}
