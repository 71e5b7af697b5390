import type { EventClient } from '../../audit/audit-trail.ts';
// The second step: a TOTP code of one of the account's factors, or a recovery code, raises the
// caller's session to aal2 (as a new session: every token issued before the step stops working).
import * as mfa from '../../db/repositories/mfa.ts';
import * as sessions from '../../db/repositories/sessions.ts';
import * as users from '../../db/repositories/users.ts';
import type { Executor } from '../../db/schema.ts';
import { ApiError } from '../../errors.ts';
import { secondFactorNotice } from '../../mail/templates.ts';
import type { AuthDeps, ClientInfo } from '../auth-context.ts';
import { invalidOtp, sessionEnded } from '../auth-context.ts';
import type { BackgroundMail } from '../background-mail.ts';
import { unseal } from '../crypto.ts';
import type { OneTimeCodes } from '../one-time-codes.ts';
import type { IssuedSession, SessionIssuer } from '../session-issuer.ts';
import { matchTotpStep } from './totp.ts';

/** Wrong codes allowed per factor (recovery codes together) in MFA_ATTEMPT_WINDOW_MS. */
export const MAX_MFA_FAILURES = 5;
export const MFA_ATTEMPT_WINDOW_MS = 5 * 60_000;
const RECOVERY_KEY = 'recovery';

export type SecondStepInput = { factorId: string; code: string } | { recoveryCode: string };

const factorNotFound = () => new ApiError('NOT_FOUND', 'No such factor');

export function createSecondStep(deps: AuthDeps, issuer: SessionIssuer, codes: OneTimeCodes, mail: BackgroundMail) {
  const { db, clock, keys } = deps;

  /**
   * Counts the attempt before the code is compared, committed whatever the answer: past
   * MAX_MFA_FAILURES in the window, every code is refused (429, the right one too).
   */
  async function takeAttempt(userId: string, factorKey: string): Promise<void> {
    const now = clock.now();
    const taken = await mfa.takeMfaAttempt(db, userId, factorKey, now, MFA_ATTEMPT_WINDOW_MS);
    if (taken === undefined) throw sessionEnded();
    const { attempts, windowEndsAt } = taken;
    if (attempts > MAX_MFA_FAILURES) {
      const seconds = Math.max(1, Math.ceil((windowEndsAt.getTime() - now.getTime()) / 1000));
      throw new ApiError('RATE_LIMITED', `Too many wrong codes; try again in ${seconds} s`, {
        'retry-after': String(seconds),
      });
    }
  }

  async function verify(
    caller: { userId: string; sessionId: string; owesSecondStep: boolean },
    input: SecondStepInput,
    client: ClientInfo,
  ): Promise<IssuedSession & { recoveryCodes?: string[] }> {
    try {
      return await verifyOnce(caller, input, client);
    } catch (err) {
      if (err instanceof ApiError && err.code === 'INVALID_OTP') {
        await deps.audit.record(db, {
          type: 'mfa_verified',
          outcome: 'failure',
          method: 'factorId' in input ? 'totp' : 'recovery_code',
          userId: caller.userId,
          sessionId: caller.sessionId,
          client,
        });
      }
      throw err;
    }
  }

  async function verifyOnce(
    caller: { userId: string; sessionId: string; owesSecondStep: boolean },
    input: SecondStepInput,
    client: ClientInfo,
  ): Promise<IssuedSession & { recoveryCodes?: string[] }> {
    const { userId } = caller;
    let step: number | undefined;
    let factorKey = RECOVERY_KEY;
    if ('factorId' in input) {
      const factor = await mfa.findFactor(db, userId, input.factorId, clock.now());
      // A session that owes its second step proves a verified factor, never one it enrolls now.
      if (factor === undefined || (factor.status !== 'verified' && caller.owesSecondStep)) throw factorNotFound();
      factorKey = factor.id;
      await takeAttempt(userId, factorKey);
      step = matchTotpStep(unseal(keys.mfa, factor.secret_sealed, `mfa-factor:${factor.id}`), input.code, clock.now());
      if (step === undefined) throw invalidOtp();
    } else {
      await takeAttempt(userId, factorKey);
    }
    return raise(
      caller,
      client,
      'factorId' in input ? 'totp' : 'recovery_code',
      async (trx, account, previous, now) => {
        if ('factorId' in input) {
          const accepted = await mfa.acceptTotpStep(trx, userId, input.factorId, step as number, now);
          if (accepted === undefined) throw invalidOtp(); // replayed, or the factor went meanwhile
          // Checked again under the account's lock: its first factor may have been verified meanwhile.
          if (!accepted.wasVerified && account.mfa_enabled && previous.aal !== 'aal2') throw factorNotFound();
          await mfa.clearMfaAttempts(trx, userId, factorKey);
          if (accepted.wasVerified) return {};
          // A factor's first code: the account has a second factor from now on.
          const added = { kind: 'totp' as const, sessionId: caller.sessionId, client };
          return { ...(await factorAdded(trx, account, input.factorId, now, added)), notice: 'added' };
        }
        if (!account.mfa_enabled || !(await codes.useRecoveryCode(trx, userId, input.recoveryCode, now))) {
          throw invalidOtp();
        }
        await mfa.clearMfaAttempts(trx, userId, factorKey);
        return { notice: 'recovery code used' };
      },
    );
  }

  /**
   * A factor was added to the account (a TOTP factor's first code, a passkey's registration): when
   * it is the account's first, the account gets its recovery codes, enrollments begun before are
   * void (one of them may be someone else's), and its sessions that did not prove a second factor
   * end. In the transaction that holds the account's lock.
   */
  async function factorAdded(
    trx: Executor,
    account: { id: string; email: string; mfa_enabled: boolean },
    keepFactor: string,
    now: Date,
    added: { kind: 'totp' | 'passkey'; sessionId: string; client: EventClient },
  ): Promise<{ recoveryCodes?: string[]; ended: string[] }> {
    await deps.audit.record(trx, {
      type: added.kind === 'passkey' ? 'passkey_added' : 'factor_verified',
      method: added.kind,
      userId: account.id,
      sessionId: added.sessionId,
      client: added.client,
      details: { factorId: keepFactor, firstFactor: !account.mfa_enabled },
    });
    let recoveryCodes: string[] | undefined;
    if (!account.mfa_enabled) {
      recoveryCodes = await codes.issueRecoveryCodes(trx, { id: account.id, email: account.email }, now);
      await mfa.deleteUnverifiedFactors(trx, account.id, keepFactor);
    }
    await mfa.refreshMfaEnabled(trx, account.id);
    const ended = await sessions.revokeUserSessionsBelowAal2(trx, account.id, now);
    await deps.audit.recordSessionsEnded(trx, {
      userId: account.id,
      sessionIds: ended,
      by: 'second_factor',
      client: added.client,
    });
    return recoveryCodes === undefined ? { ended } : { recoveryCodes, ended };
  }

  /**
   * Raises the caller's session to aal2 once `prove` (in the transaction, under the account's lock,
   * with the session still live) has accepted the proof: a new session replaces the caller's.
   */
  async function raise(
    caller: { userId: string; sessionId: string },
    client: ClientInfo,
    method: 'totp' | 'recovery_code' | 'passkey',
    prove: (
      trx: Executor,
      account: { id: string; email: string; mfa_enabled: boolean },
      previous: sessions.SessionRow,
      now: Date,
    ) => Promise<{ recoveryCodes?: string[]; ended?: string[]; notice?: 'added' | 'recovery code used' }>,
  ): Promise<IssuedSession & { recoveryCodes?: string[] }> {
    const { userId } = caller;
    const now = clock.now();
    const { result, ended, notice } = await db.transaction().execute(async (trx) => {
      // The account's row first: verifications of one account, and sessions opening meanwhile, are ordered.
      const account = await mfa.lockAccountMfa(trx, userId);
      if (account === undefined) throw sessionEnded();
      const previous = await sessions.findSessionForShare(trx, caller.sessionId);
      if (previous === undefined || previous.revoked_at !== null || previous.user_id !== userId) throw sessionEnded();
      const proven = await prove(trx, account, previous, now);
      const user = await users.findUserById(trx, userId);
      if (user === undefined) throw sessionEnded();
      const stepped = await issuer.stepUp(trx, user, previous, method, client);
      return {
        result:
          proven.recoveryCodes === undefined
            ? stepped.issued
            : { ...stepped.issued, recoveryCodes: proven.recoveryCodes },
        ended: [...(proven.ended ?? []), ...stepped.ended],
        notice: proven.notice === undefined ? undefined : secondFactorNotice(account.email, proven.notice),
      };
    });
    issuer.revoked(ended);
    if (notice !== undefined) mail.send(notice, undefined);
    return result;
  }

  return { verify, raise, factorAdded };
}

export type SecondStep = ReturnType<typeof createSecondStep>;
