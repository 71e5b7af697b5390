import * as users from '../db/repositories/users.ts';
import { ApiError } from '../errors.ts';
import { type AuthDeps, type ClientInfo, invalidCredentials } from './auth-context.ts';
import { dummyPasswordHash, verifyPassword } from './crypto.ts';
import type { IssuedSession, SessionIssuer } from './session-issuer.ts';
import { signInThrottledError } from './sign-in-throttle.ts';

/** Password sign-in, slowed per address after repeated failures. */
export function createSignIn(deps: AuthDeps, sessions: SessionIssuer) {
  const { db, config, signInThrottle } = deps;

  return async function signIn(input: { email: string; password: string }, client: ClientInfo): Promise<IssuedSession> {
    const email = input.email.toLowerCase();
    // Known and unknown addresses alike, before the password is looked at; the attempt counts as a
    // failure until the password proves right.
    const wait = await signInThrottle.beginAttempt(email);
    if (wait !== undefined) throw signInThrottledError(wait);
    const user = await users.findUserForSignIn(db, email);
    // An unverified account holds no password yet: its sign-up's pending one is what the person typed.
    const hash = user?.password_hash ?? (user?.email_verified === false ? user.pending_password_hash : null);
    const ok = await verifyPassword(input.password, hash ?? (await dummyPasswordHash));
    if (!user || hash === null || !ok) throw invalidCredentials();
    await signInThrottle.recordSuccess(email);
    if (config.requireEmailVerification && !user.email_verified) {
      throw new ApiError(403, 'EMAIL_NOT_VERIFIED', 'Verify your email address before signing in');
    }
    // A password held only as a pending sign-up's (verification not required any more) signs in nobody.
    if (user.password_hash === null) throw invalidCredentials();
    return sessions.start(user, client);
  };
}
