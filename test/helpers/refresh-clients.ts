// Web (cookie + CSRF), mobile and desktop clients refreshing and logging out, for the refresh tests.
import type { LightMyRequestResponse } from 'fastify';
import type { Test } from 'tap';
import { buildAuthTestApp, type ClientType, newEmail, PASSWORD, refreshCookies } from './auth.ts';

export const CLIENTS: ClientType[] = ['web', 'mobile', 'desktop'];
export const INTERVAL_SECONDS = 10;

/** What a client holds between calls. */
export interface Held {
  client: ClientType;
  refreshToken: string;
  csrfToken: string | null;
  accessToken: string;
}

export function held(client: ClientType, res: LightMyRequestResponse): Held {
  if (res.statusCode !== 200) throw new Error(`expected a session, got ${res.statusCode} ${res.body}`);
  const body = res.json() as { accessToken: string; csrfToken: string | null; refreshToken: string | null };
  const refreshToken = client === 'web' ? refreshCookies(res)[0]?.value : body.refreshToken;
  if (!refreshToken) throw new Error(`no refresh token in ${res.body}`);
  return { client, refreshToken, csrfToken: body.csrfToken, accessToken: body.accessToken };
}

export async function buildRefreshTestApp(t: Test) {
  const built = await buildAuthTestApp(t, { label: 'reuse-interval' });
  const { app, signUp, verify, firstMail, clock } = built;

  async function account(label: string): Promise<string> {
    const email = newEmail(label);
    if ((await signUp(email)).statusCode !== 202) throw new Error('sign-up');
    const mail = await firstMail(email);
    if ((await verify({ otp: mail.token })).statusCode !== 200) throw new Error('verify');
    return email;
  }

  const signIn = (email: string, client: ClientType) =>
    app.inject({
      method: 'POST',
      url: `/api/auth/sessions?client_type=${client}`,
      payload: { email, password: PASSWORD },
    });

  /** Refresh or logout the way each client does: web sends the cookie (every value given, in order) and the CSRF header. */
  const call = (path: 'refresh' | 'logout', h: Held, cookies: string[] = [h.refreshToken]) =>
    h.client === 'web'
      ? app.inject({
          method: 'POST',
          url: `/api/auth/${path}?client_type=web`,
          headers: {
            cookie: cookies.map((c) => `refresh_token=${c}`).join('; '),
            'x-csrf-token': h.csrfToken ?? '',
          },
        })
      : app.inject({
          method: 'POST',
          url: `/api/auth/${path}?client_type=${h.client}`,
          payload: { refreshToken: h.refreshToken },
        });

  const current = (h: Held) =>
    app.inject({ url: '/api/auth/sessions/current', headers: { authorization: `Bearer ${h.accessToken}` } });

  /** A new session of one account per client type (made once: sign-up and verification are slow). */
  const accounts = new Map<ClientType, Promise<string>>();
  async function session(_label: string, client: ClientType): Promise<Held> {
    let email = accounts.get(client);
    if (email === undefined) {
      email = account(`reuse-${client}`);
      accounts.set(client, email);
    }
    return held(client, await signIn(await email, client));
  }

  return { ...built, app, clock, account, signIn, call, current, session };
}

export type RefreshTestApp = Awaited<ReturnType<typeof buildRefreshTestApp>>;
