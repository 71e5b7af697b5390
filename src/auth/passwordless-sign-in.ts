import * as addressLimits from '../db/repositories/address-limits.ts';
import * as accounts from '../db/repositories/mailbox-accounts.ts';
import * as oneTimeCodes from '../db/repositories/one-time-codes.ts';
import * as sessions from '../db/repositories/sessions.ts';
import * as users from '../db/repositories/users.ts';
import { ApiError } from '../errors.ts';
import { signInCodeEmail } from '../mail/templates.ts';
import {
  type AuthDeps,
  type ClientInfo,
  EMAIL_LIMITED,
  EMAIL_LIMITS,
  invalidOtp,
  knownDeviceOfAddress,
  recordFailedSignIn,
  requesterOf,
} from './auth-context.ts';
import type { BackgroundMail } from './background-mail.ts';
import type { OneTimeCodeRow, OneTimeCodes } from './one-time-codes.ts';
import type { IssuedSession, SessionIssuer } from './session-issuer.ts';
import { signInThrottledError } from './sign-in-throttle.ts';
import { createUnprovenPasswords, type UnprovenPasswordRemoval } from './unproven-password.ts';

/** Passwordless sign-in: a 6-digit code by email, then a session for it (an account for a new address). */
export function createPasswordlessSignIn(
  deps: AuthDeps,
  issuer: SessionIssuer,
  mail: BackgroundMail,
  codes: OneTimeCodes,
) {
  const { db, config, clock, signInThrottle } = deps;
  const unproven = createUnprovenPasswords(issuer, mail, deps.audit);

  /**
   * Emails a fresh sign-in code (voiding the one before) to any address but a disabled account's,
   * and, when sign-ups are not allowed, an address without an account. The email limits are
   * claimed and the same statements run for every address, and the email goes out after the
   * answer, so that nothing tells the cases apart.
   */
  async function sendSignInCode(emailInput: string, client: Pick<ClientInfo, 'ip' | 'devices'>): Promise<void> {
    const email = emailInput.toLowerCase();
    const now = clock.now();
    const requester = requesterOf(client);
    const issued = codes.next('sign_in', email, now);
    let claim: addressLimits.EmailClaim | undefined;
    const sent = await db.transaction().execute(async (trx) => {
      // A device that signed in to the address's account has a budget of its own (known-device.ts).
      const device = await knownDeviceOfAddress(trx, deps.keys, client, email, now);
      claim = await addressLimits.claimEmailSend(trx, email, { requester, device, kind: 'sign_in' }, now, EMAIL_LIMITS);
      if (claim === undefined) return 'limited' as const;
      return codes.issueSignInCode(trx, email, issued.stored, config.allowSignUp, now);
    });
    if (sent === 'limited') return deps.mailer.notSent(email, EMAIL_LIMITED);
    if (!sent) return deps.mailer.notSent(email, 'sign-in by email code is not available for this address');
    mail.send(signInCodeEmail(email, issued.code, Math.round(config.emailOtpTtlSeconds / 60)), {
      requester,
      claimedAt: now,
      claim,
    });
  }

  /**
   * Spends the code (one atomic UPDATE: of concurrent submissions exactly one wins) and opens a
   * session in the same transaction. A new address becomes a verified account without a password
   * (when sign-ups are allowed); an account whose address was not verified is verified, loses any
   * password it held or waited for (the code proves the mailbox, not who signed up before) and
   * its earlier sessions end; so does a verified account's unproven password (unproven-password.ts).
   * A disabled account, and a new address while sign-ups are not allowed, are refused like a wrong
   * code.
   */
  async function consume(
    row: OneTimeCodeRow,
    input: { email: string; name?: string | undefined },
    client: ClientInfo,
  ): Promise<{ session: IssuedSession; ended: string[]; removal: UnprovenPasswordRemoval | undefined } | undefined> {
    const { email } = input;
    const now = clock.now();
    return db.transaction().execute(async (trx) => {
      // The address first, then the code and the account's row (addressLock).
      await addressLimits.lockAddresses(trx, [email]);
      await codes.consume(trx, row, now);
      let account = await accounts.lockUserByEmail(trx, email);
      if (account === undefined) {
        if (!config.allowSignUp) return undefined;
        await accounts.insertPasswordlessUser(trx, email, input.name ?? null);
        account = await accounts.lockUserByEmail(trx, email);
        if (account === undefined) return undefined;
        await users.addProvider(trx, account.id, 'email', email);
        await deps.audit.record(trx, { type: 'sign_up', method: 'otp', userId: account.id, client, email });
      }
      if (account.disabled_at !== null) return undefined;
      let ended: string[] = [];
      if (!account.email_verified) {
        await accounts.proveMailboxWithoutPassword(trx, account.id, input.name ?? null);
        await oneTimeCodes.deleteAccountCodes(trx, account, ['verification']);
        ended = await sessions.revokeUserSessions(trx, account.id, now);
        await deps.audit.recordSessionsEnded(trx, {
          userId: account.id,
          sessionIds: ended,
          by: 'mailbox_proof',
          client,
        });
        // The account's first verification: a sign-up awaiting it was not announced (sign-up.ts).
        await deps.audit.record(trx, {
          type: 'email_verified',
          method: 'otp',
          userId: account.id,
          client,
          email,
          details: { passwordSet: false, passwordProven: false },
          alsoAnnounce: config.requireEmailVerification ? ['user.created'] : [],
        });
      }
      const removal = await unproven.removeOnProof(trx, account, 'sign-in code', now);
      const user = await users.findUserById(trx, account.id);
      if (user === undefined) return undefined;
      return { session: await issuer.start(user, client, 'otp', trx), ended, removal };
    });
  }

  /**
   * Signs in with an emailed code. Counted like a password sign-in of the address: the back-off
   * applies before the code is looked at, a refused code is a failure, a session clears it (and
   * both are reported as sign-ins to the metrics).
   */
  async function signInWithCode(
    input: { email: string; otp: string; name?: string | undefined },
    client: ClientInfo,
  ): Promise<IssuedSession> {
    const email = input.email.toLowerCase();
    // A known device of the account has a back-off of its own (known-device.ts).
    const device = await knownDeviceOfAddress(db, deps.keys, client, email, clock.now());
    const wait = await signInThrottle.beginAttempt(email, device);
    if (wait !== undefined) {
      deps.events?.signInThrottled();
      throw signInThrottledError(wait);
    }
    let outcome: Awaited<ReturnType<typeof consume>>;
    try {
      const row = await codes.check('sign_in', email, input.otp);
      outcome = await consume(row, { email, name: input.name }, client);
      if (outcome === undefined) throw invalidOtp();
    } catch (err) {
      if (err instanceof ApiError && err.code === 'INVALID_OTP') {
        await signInThrottle.recordFailure(email, device);
        deps.events?.signIn('failed');
        await recordFailedSignIn(deps, (await users.findUserByEmail(db, email))?.id ?? null, 'otp', client);
      }
      throw err;
    }
    issuer.revoked(outcome.ended);
    unproven.announce(outcome.removal);
    await signInThrottle.recordSuccess(email, device);
    deps.events?.signIn('ok');
    return outcome.session;
  }

  return { sendSignInCode, signInWithCode };
}
