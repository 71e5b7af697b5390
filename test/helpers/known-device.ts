import type { LightMyRequestResponse } from 'fastify';
import { type AuthTestApp, buildAuthTestApp, newEmail, PASSWORD, pause, QUIET_MS, setCookieHeaders } from './auth.ts';

type Teardown = Parameters<typeof buildAuthTestApp>[0];

export const JWT_SECRET = 'known-device-test-secret-0f3c9a7e2b5d8164-aa';
export const STRANGERS = ['198.51.100.1', '198.51.100.2', '198.51.100.3', '198.51.100.4'] as const;
export const OWNER_IP = '203.0.113.9';

/** The value of the device_id cookie a response sets ('' when it sets none: the tests then fail on what it is for). */
export function deviceCookie(res: LightMyRequestResponse): string {
  const line = setCookieHeaders(res).find((l) => l.startsWith('device_id=') && !l.startsWith('device_id=;'));
  return line === undefined ? '' : (line.slice('device_id='.length).split(';')[0] as string);
}

/** An app for known-device tests, with shorthands: accounts with their device signals, sign-ins, emails. */
export async function setUpKnownDevices(t: Teardown, label: string) {
  const s = await buildAuthTestApp(t, {
    label,
    env: { REQUIRE_EMAIL_VERIFICATION: 'false', JWT_SECRET },
  });
  /** A new account signed up by web (its device cookie) and signed in by mobile (its deviceToken). */
  async function account(name: string) {
    const email = newEmail(name);
    const up = await s.signUp(email, {}, '');
    if (up.statusCode !== 201) throw new Error(`sign-up: ${up.statusCode} ${up.body}`);
    // The owner has proven the address (its email is left out of the counts these tests make): a
    // code sign-in on an unverified account would remove the password and the devices it signed in.
    await s.database.handle.db.updateTable('users').set({ email_verified: true }).where('email', '=', email).execute();
    const cookie = deviceCookie(up);
    const mobile = await signIn(email, PASSWORD, { client: 'mobile', ip: OWNER_IP });
    const body = mobile.json() as { deviceToken?: string; user: { id: string } };
    if (mobile.statusCode !== 200) throw new Error(`sign-in: ${mobile.body}`);
    // '' when the session hands out no device signal: the tests then fail on what it is for.
    return { email, cookie, token: body.deviceToken ?? '', userId: body.user.id };
  }
  function signIn(
    email: string,
    password: string,
    options: { client?: 'web' | 'mobile'; ip?: string; headers?: Record<string, string> } = {},
  ): Promise<LightMyRequestResponse> {
    return s.app.inject({
      method: 'POST',
      url: `/api/auth/sessions?client_type=${options.client ?? 'web'}`,
      payload: { email, password },
      remoteAddress: options.ip ?? STRANGERS[0],
      headers: options.headers ?? {},
    });
  }
  const send = (
    kind: 'send-otp' | 'send-reset-password',
    email: string,
    ip: string,
    headers: Record<string, string> = {},
  ): Promise<LightMyRequestResponse> =>
    s.app.inject({ method: 'POST', url: `/api/auth/email/${kind}`, payload: { email }, remoteAddress: ip, headers });
  return { s, account, signIn, send };
}

/** Whether the `n`-th email to `email` arrives (waits a few seconds), and then that nothing more came. */
export async function arrives(s: AuthTestApp, email: string, n: number): Promise<boolean> {
  try {
    await s.smtp.waitFor(email, n, 5_000);
    return true;
  } catch {
    return false;
  }
}

/** The number of emails to `email` once nothing more is on its way. */
export async function settled(s: AuthTestApp, email: string): Promise<number> {
  await pause(QUIET_MS);
  return s.smtp.to(email).length;
}
