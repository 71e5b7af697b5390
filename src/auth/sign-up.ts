import * as addressLimits from '../db/repositories/address-limits.ts';
import * as users from '../db/repositories/users.ts';
import type { Executor } from '../db/schema.ts';
import { ApiError } from '../errors.ts';
import { existingAccountNotice } from '../mail/templates.ts';
import { type AuthDeps, type ClientInfo, EMAIL_LIMITED, EMAIL_LIMITS, requesterOf } from './auth-context.ts';
import type { BackgroundMail } from './background-mail.ts';
import { hashPassword, newOpaqueToken, sha256Hex } from './crypto.ts';
import { verificationMail } from './email-verification.ts';
import type { OneTimeCodes } from './one-time-codes.ts';
import type { IssuedSession, SessionIssuer } from './session-issuer.ts';

/**
 * A session at once, or a verification email on its way. `binding` goes back to the client that
 * signed up: a verification that carries it proves that the password's chooser holds the mailbox.
 */
export type SignUpOutcome =
  | { kind: 'verification-required'; binding: string }
  | { kind: 'session'; session: IssuedSession };

/** Sign-up: an account and a session at once, or (the usual configuration) a verification email. */
export function createSignUp(deps: AuthDeps, sessions: SessionIssuer, mail: BackgroundMail, codes: OneTimeCodes) {
  const { db, config, clock } = deps;

  /**
   * A sign-up in the audit log; a sign-up at an address that had an account already is recorded as
   * refused (its answer tells the requester nothing).
   */
  function recordSignUp(trx: Executor, userId: string, email: string, client: ClientInfo, created: boolean) {
    return deps.audit.record(trx, {
      // An account awaiting verification is announced (user.created) with its first verification:
      // until then it may be anyone's, and a sign-up at a new address and at a taken one must run
      // the same statements (the refused one queues nothing).
      announce: !config.requireEmailVerification,
      type: 'sign_up',
      outcome: created ? 'success' : 'failure',
      method: 'password',
      userId,
      actorId: created ? userId : null,
      client,
      email,
      ...(created ? {} : { details: { reason: 'address_taken' } }),
    });
  }

  /** Without verification: the account and its session in one transaction, so a failed sign-up leaves nothing. */
  async function signUpWithSession(
    input: { email: string; passwordHash: string; name: string | null },
    client: ClientInfo,
  ): Promise<SignUpOutcome> {
    const session = await db.transaction().execute(async (trx) => {
      const created = await users.insertPasswordUser(trx, { ...input, emailVerified: false });
      if (created === undefined) return undefined;
      await recordSignUp(trx, created.id, input.email, client, true);
      return sessions.start(created, client, 'password', trx);
    });
    if (!session) throw new ApiError('USER_ALREADY_EXISTS', 'An account with this email already exists');
    return { kind: 'session', session };
  }

  /**
   * With verification: the sign-up is recorded whatever the address (new, unverified, verified) and
   * whatever the email limits say, by the same statements in every case, so that neither the
   * answer nor its time tells the cases apart. The password waits for the verification, which
   * activates it only if no other sign-up competed for the address (see recordSignUp).
   */
  async function signUpWithVerification(
    input: { email: string; passwordHash: string; name: string | null },
    client: ClientInfo,
    redirectTo: string | undefined,
  ): Promise<SignUpOutcome> {
    const now = clock.now();
    const requester = requesterOf(client);
    const code = codes.next('verification', input.email, now);
    const unusable = codes.next('verification', input.email, now, { unusable: true });
    // Made for every sign-up, whatever the address, so that the answer tells nothing.
    const binding = newOpaqueToken();
    const { account, mailable, pending } = await db.transaction().execute(async (trx) => {
      // The claim first: it takes the address's lock, before the account's row (addressLock).
      const claimant = { requester, kind: 'verification' as const };
      const mailable =
        (await addressLimits.claimEmailSend(trx, input.email, claimant, now, EMAIL_LIMITS)) !== undefined;
      const created = await users.insertUnverifiedUser(trx, input.email, input.name);
      await users.ensureEmailProvider(trx, input.email);
      const account = await users.findUserByEmail(trx, input.email);
      if (account !== undefined) await recordSignUp(trx, account.id, input.email, client, created);
      const pending = await codes.recordSignUp(trx, {
        email: input.email,
        passwordHash: input.passwordHash,
        bindingHash: sha256Hex(binding),
        fresh: mailable ? code.stored : undefined,
        unusable: unusable.stored,
        now,
      });
      return { account, mailable, pending };
    });
    if (!mailable) deps.mailer.notSent(input.email, EMAIL_LIMITED);
    if (!mailable || account === undefined) return { kind: 'verification-required', binding };
    const claim = { requester, claimedAt: now };
    if (pending === undefined) mail.send(existingAccountNotice(input.email), claim);
    else mail.send(verificationMail(config, input.email, code, pending.contested, redirectTo), claim);
    return { kind: 'verification-required', binding };
  }

  /** `redirectTo` must already be allowed (redirects.ts); it rides in the verification link. */
  return async function signUp(
    input: { email: string; password: string; name?: string | undefined },
    client: ClientInfo,
    redirectTo?: string,
  ): Promise<SignUpOutcome> {
    // ALLOW_SIGN_UP=false: the same refusal for every address, before anything is looked up.
    if (!config.allowSignUp) throw new ApiError('SIGN_UP_DISABLED', 'Sign-ups are disabled on this service');
    // Hash before looking anything up, so that new and existing addresses cost the same.
    const fields = {
      email: input.email.toLowerCase(),
      passwordHash: await hashPassword(input.password),
      name: input.name ?? null,
    };
    return config.requireEmailVerification
      ? signUpWithVerification(fields, client, redirectTo)
      : signUpWithSession(fields, client);
  };
}
