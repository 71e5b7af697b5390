import * as users from '../db/repositories/users.ts';
import { ApiError, type ErrorCode } from '../errors.ts';
import { createAccessTokenLogout } from './access-token-logout.ts';
import { createAdminAccount } from './admin-account.ts';
import type { AuthDeps } from './auth-context.ts';
import { createBackgroundMail } from './background-mail.ts';
import { createChangePassword } from './change-password.ts';
import { createEmailVerification } from './email-verification.ts';
import { createFactors } from './mfa/factors.ts';
import { createSecondStep } from './mfa/second-step.ts';
import { createOAuthSignIn } from './oauth/oauth-sign-in.ts';
import { createOneTimeCodes } from './one-time-codes.ts';
import { createOwnSessions } from './own-sessions.ts';
import { createPasskeys } from './passkeys.ts';
import { createPasswordReset } from './password-reset.ts';
import { createPasswordlessSignIn } from './passwordless-sign-in.ts';
import { createProfiles } from './profiles.ts';
import { createPublicAuthConfig } from './public-config.ts';
import { createSessionIssuer } from './session-issuer.ts';
import { createSessionRefresh } from './session-refresh.ts';
import { createSignIn } from './sign-in.ts';
import { createSignUp } from './sign-up.ts';
import { createUserAdministration } from './user-administration.ts';
import { type ApiUser, toApiUser } from './user-view.ts';

export type { AuthDeps, ClientInfo } from './auth-context.ts';
export type { IssuedSession } from './session-issuer.ts';

/**
 * `flow`, reporting how each call ended: `ok`, or `failed` when it was refused with one of
 * `refusals`. Other errors (input, limits, outages) are not outcomes of the flow.
 */
function reporting<Args extends unknown[], Result>(
  flow: (...args: Args) => Promise<Result>,
  report: ((result: 'ok' | 'failed') => void) | undefined,
  refusals: readonly ErrorCode[],
): (...args: Args) => Promise<Result> {
  if (report === undefined) return flow;
  return async (...args) => {
    try {
      const result = await flow(...args);
      report('ok');
      return result;
    } catch (err) {
      if (err instanceof ApiError && refusals.includes(err.code)) report('failed');
      throw err;
    }
  };
}

/** The account flows (one module each), over shared sessions and background mail. Knows nothing of HTTP. */
export function createAuthService(deps: AuthDeps) {
  const mail = createBackgroundMail(deps.mailer, deps.db, deps.log);
  const sessions = createSessionIssuer(deps);
  const codes = createOneTimeCodes(deps);
  const { sendVerification, verifyEmail, confirmEmail } = createEmailVerification(deps, sessions, mail, codes);
  const { refresh, logout } = createSessionRefresh(deps, sessions);
  const passwordReset = createPasswordReset(deps, sessions, mail, codes);
  const passwordless = createPasswordlessSignIn(deps, sessions, mail, codes);
  const events = deps.events;

  async function currentUser(userId: string): Promise<ApiUser> {
    const user = await users.findUserById(deps.db, userId);
    if (!user) throw new ApiError('UNAUTHORIZED', 'The account of this token no longer exists');
    return toApiUser(user);
  }

  const factors = createFactors(deps, sessions, codes, mail);
  const secondStep = createSecondStep(deps, sessions, codes, mail);

  return {
    signUp: createSignUp(deps, sessions, mail, codes),
    signIn: reporting(createSignIn(deps, sessions), events && ((r) => events.signIn(r)), [
      'INVALID_CREDENTIALS',
      'EMAIL_NOT_VERIFIED',
    ]),
    sendSignInCode: passwordless.sendSignInCode,
    signInWithCode: passwordless.signInWithCode,
    sendPasswordReset: passwordReset.sendPasswordReset,
    exchangeResetCode: passwordReset.exchangeResetCode,
    resetPassword: passwordReset.resetPassword,
    resetLinkIsLive: passwordReset.resetLinkIsLive,
    sendVerification,
    verifyEmail,
    confirmEmail,
    refresh,
    logout,
    logoutByAccessToken: createAccessTokenLogout(sessions),
    changePassword: createChangePassword(deps, sessions),
    currentUser,
    oauth: createOAuthSignIn(deps, sessions, mail),
    ensureAdmin: createAdminAccount(deps, sessions),
    profiles: createProfiles(deps),
    administration: createUserAdministration(deps, sessions),
    ownSessions: createOwnSessions(deps, sessions),
    publicConfig: createPublicAuthConfig(deps.config),
    factors,
    secondStep,
    passkeys: createPasskeys(deps, sessions, codes, mail, factors, secondStep),
    drainMail: mail.drain,
  };
}

export type AuthService = ReturnType<typeof createAuthService>;
