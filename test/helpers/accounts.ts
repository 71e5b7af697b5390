import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import type { Env } from '../../src/config.ts';
import { type AuthTestApp, buildAuthTestApp, decodeClaims, newEmail, PASSWORD } from './auth.ts';

type Teardown = Parameters<typeof buildAuthTestApp>[0];

/** A mobile session: its tokens, the account's id and the session's id. */
export interface MobileSession {
  accessToken: string;
  refreshToken: string;
  userId: string;
  sessionId: string;
  email: string;
}

export const ADMIN_PASSWORD = 'the administrator passphrase';

export const bearer = (accessToken: string) => ({ authorization: `Bearer ${accessToken}` });

function toSession(res: LightMyRequestResponse, expected: number, email: string): MobileSession {
  if (res.statusCode !== expected) throw new Error(`expected ${expected}, got ${res.statusCode} ${res.body}`);
  const body = res.json() as { accessToken: string; refreshToken: string; user: { id: string } };
  const claims = decodeClaims(body.accessToken);
  return {
    accessToken: body.accessToken,
    refreshToken: body.refreshToken,
    userId: body.user.id,
    sessionId: String(claims.sid),
    email,
  };
}

/** Requests on one app (instance) that account tests share. */
export function accountCalls(app: FastifyInstance) {
  const signInRaw = (email: string, password = PASSWORD) =>
    app.inject({ method: 'POST', url: '/api/auth/sessions?client_type=mobile', payload: { email, password } });
  return {
    signInRaw,
    /** Signs in (mobile) and returns the session; throws unless 200. */
    signIn: async (email: string, password = PASSWORD) => toSession(await signInRaw(email, password), 200, email),
    /** Signs up (mobile, verification not required) and returns the session; throws unless 201. */
    signUp: async (email = newEmail('account'), extra: Record<string, unknown> = {}) =>
      toSession(
        await app.inject({
          method: 'POST',
          url: '/api/auth/users?client_type=mobile',
          payload: { email, password: PASSWORD, ...extra },
        }),
        201,
        email,
      ),
    refresh: (refreshToken: string) =>
      app.inject({ method: 'POST', url: '/api/auth/refresh?client_type=mobile', payload: { refreshToken } }),
    current: (accessToken: string) => app.inject({ url: '/api/auth/sessions/current', headers: bearer(accessToken) }),
    getUser: (accessToken: string, userId: string) =>
      app.inject({ url: `/api/auth/users/${userId}`, headers: bearer(accessToken) }),
    updateUser: (accessToken: string, userId: string, payload: Record<string, unknown>) =>
      app.inject({ method: 'PATCH', url: `/api/auth/users/${userId}`, headers: bearer(accessToken), payload }),
    deleteUsers: (accessToken: string, userIds: unknown) =>
      app.inject({ method: 'DELETE', url: '/api/auth/users', headers: bearer(accessToken), payload: { userIds } }),
    getProfile: (accessToken: string, userId: string) =>
      app.inject({ url: `/api/auth/profiles/${userId}`, headers: bearer(accessToken) }),
    setProfile: (accessToken: string, profile: unknown) =>
      app.inject({
        method: 'PATCH',
        url: '/api/auth/profiles/current',
        headers: bearer(accessToken),
        payload: { profile },
      }),
  };
}

export type AccountCalls = ReturnType<typeof accountCalls>;

/**
 * An auth test app where sign-up opens a session at once (verification not required, unless `env`
 * says otherwise) with a configured administrator (ADMIN_EMAIL), signed in as `admin`.
 */
export async function buildAccountsApp(
  t: Teardown,
  options: { env?: Env; label?: string } = {},
): Promise<Omit<AuthTestApp, keyof AccountCalls> & AccountCalls & { admin: MobileSession; adminEmail: string }> {
  const adminEmail = newEmail('admin');
  const built = await buildAuthTestApp(t, {
    label: options.label ?? 'accounts',
    env: {
      REQUIRE_EMAIL_VERIFICATION: 'false',
      ADMIN_EMAIL: adminEmail,
      ADMIN_PASSWORD,
      ...options.env,
    },
  });
  const calls = accountCalls(built.app);
  const admin = await calls.signIn(adminEmail, ADMIN_PASSWORD);
  return { ...built, ...calls, admin, adminEmail };
}
