import * as users from '../db/repositories/users.ts';
import { ApiError } from '../errors.ts';
import {
  type AuthDeps,
  type ClientInfo,
  invalidCredentials,
  knownDeviceFor,
  offersDevice,
  recordFailedSignIn,
} from './auth-context.ts';
import { dummyPasswordHash, verifyPassword } from './crypto.ts';
import type { IssuedSession, SessionIssuer } from './session-issuer.ts';
import { signInThrottledError } from './sign-in-throttle.ts';

/** Password sign-in, slowed per address after repeated failures. */
export function createSignIn(deps: AuthDeps, sessions: SessionIssuer) {
  const { db, config, signInThrottle } = deps;

  return async function signIn(input: { email: string; password: string }, client: ClientInfo): Promise<IssuedSession> {
    const email = input.email.toLowerCase();
    // A known device of the account has a back-off of its own (known-device.ts); its signal is
    // checked against the account before anything else, so that strangers' failures do not count.
    const offered = offersDevice(client, deps.clock.now());
    let user = offered ? await users.findUserByEmail(db, email) : undefined;
    const device = knownDeviceFor(deps.keys, client, user, deps.clock.now());
    // Known and unknown addresses alike, before the password is looked at.
    const wait = await signInThrottle.beginAttempt(email, device);
    if (wait !== undefined) {
      deps.events?.signInThrottled();
      throw signInThrottledError(wait);
    }
    if (!offered) user = await users.findUserByEmail(db, email);
    // A sign-up's password waits for its verification outside the account, so an account signed up
    // for but not verified has none: it answers like a wrong password. (Telling "right password,
    // not verified yet" from a wrong one would tell whoever signed up that the address had no
    // account before.)
    const ok = await verifyPassword(input.password, user?.password_hash ?? (await dummyPasswordHash));
    // A disabled account answers exactly as a wrong password does (and counts as a failure), so
    // that neither the answer nor the back-off tells whether the password was right.
    if (!user?.password_hash || !ok || user.disabled_at !== null) {
      await signInThrottle.recordFailure(email, device);
      // The account when there is one; never the address typed (it may be a password typed in the wrong field).
      await recordFailedSignIn(deps, user?.id ?? null, 'password', client);
      throw invalidCredentials();
    }
    await signInThrottle.recordSuccess(email, device);
    if (config.requireEmailVerification && !user.email_verified) {
      // Only an account made while verification was not required has a password before it.
      throw new ApiError('EMAIL_NOT_VERIFIED', 'Verify your email address before signing in');
    }
    const session = await sessions.startAfterPasswordCheck({ ...user, password_hash: user.password_hash }, client);
    // The password or the role changed while the password was being checked.
    if (session === undefined) throw invalidCredentials();
    return session;
  };
}
