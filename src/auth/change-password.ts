import type { EventClient } from '../audit/audit-trail.ts';
import * as accounts from '../db/repositories/account-admin.ts';
import * as addressLimits from '../db/repositories/address-limits.ts';
import * as oneTimeCodes from '../db/repositories/one-time-codes.ts';
import * as sessions from '../db/repositories/sessions.ts';
import * as users from '../db/repositories/users.ts';
import { ApiError } from '../errors.ts';
import { type AuthDeps, sessionEnded } from './auth-context.ts';
import { hashPassword, verifyPassword } from './crypto.ts';
import type { SessionIssuer } from './session-issuer.ts';
import { signInThrottledError } from './sign-in-throttle.ts';

/** Changing (or first setting) the password of the signed-in account. */
export function createChangePassword(deps: AuthDeps, issuer: SessionIssuer) {
  const { db, clock, signInThrottle } = deps;

  /**
   * Requires the current password when the account has one (wrong ones slow this session down like
   * failed sign-ins, so a stolen access token cannot be used to guess it); sets the new one and
   * ends every other session of the account, in one transaction.
   */
  return async function changePassword(
    caller: { userId: string; sessionId: string },
    input: { currentPassword?: string | undefined; newPassword: string },
    client: EventClient | null = null,
  ): Promise<void> {
    const user = await users.findUserById(db, caller.userId);
    if (!user) throw new ApiError('UNAUTHORIZED', 'The account of this token no longer exists');
    if (user.password_hash !== null) {
      // Counted per session, not per address: failed sign-ins by others must not keep the owner,
      // signed in, from changing the password, while a stolen access token still gets few guesses.
      const key = `session:${caller.sessionId}`;
      const wait = await signInThrottle.beginAttempt(key);
      if (wait !== undefined) throw signInThrottledError(wait);
      const ok =
        input.currentPassword !== undefined && (await verifyPassword(input.currentPassword, user.password_hash));
      if (!ok) {
        await signInThrottle.recordFailure(key);
        throw new ApiError('PASSWORD_INCORRECT', 'The current password is missing or wrong');
      }
      await signInThrottle.recordSuccess(key);
    }
    const hash = await hashPassword(input.newPassword);
    const ended = await db.transaction().execute(async (trx) => {
      // The address first (it deletes the address's codes: addressLock), then the account's row,
      // then its session: the order the administrator actions and the reset take too, so that none
      // of them can deadlock with this one.
      await addressLimits.lockAddresses(trx, [user.email]);
      await accounts.lockAccounts(trx, [user.id]);
      // Two changes at once: the first to commit ends the other's session, and the other must then
      // change nothing (else whoever lost the race would silently undo the winner's password).
      if (!(await sessions.lockLiveSession(trx, caller.sessionId))) throw sessionEnded();
      if (!(await users.replacePassword(trx, user.id, user.password_hash, hash))) {
        throw new ApiError('PASSWORD_INCORRECT', 'The password changed meanwhile; sign in again');
      }
      // Codes and links sent before (verification, sign-in, reset) must not undo this one.
      await oneTimeCodes.deleteAccountCodes(trx, user);
      const ended = await sessions.revokeUserSessions(trx, user.id, clock.now(), caller.sessionId);
      await deps.audit.recordSessionsEnded(trx, { userId: user.id, sessionIds: ended, by: 'password_change', client });
      await deps.audit.record(trx, {
        type: 'password_changed',
        userId: user.id,
        sessionId: caller.sessionId,
        client,
        details: { sessionsEnded: ended.length, hadPassword: user.password_hash !== null },
      });
      return ended;
    });
    issuer.revoked(ended);
  };
}
