import { randomBytes, randomUUID } from 'node:crypto';
import type { LightMyRequestResponse } from 'fastify';
import type { Env } from '../../src/config.ts';
import { buildTestApp, type TestApp } from './app.ts';
import { TestClock } from './clock.ts';
import { type ReceivedMail, type SmtpCapture, startSmtpCapture } from './smtp.ts';

type Teardown = Parameters<typeof buildTestApp>[0];

/** Where a session's refresh token goes: a cookie (web) or the body (mobile, desktop). */
export type ClientType = 'web' | 'mobile' | 'desktop';

/** The password test accounts sign up with. */
export const PASSWORD = 'correct horse battery staple';

/** How long to wait before concluding that no email is coming. */
export const QUIET_MS = 750;

/** Rate limits high enough that tests of other rules never reach them. */
const GENEROUS_RATE_LIMITS: Env = {
  RATE_LIMIT_VERIFY: '1000',
  RATE_LIMIT_SIGN_IN: '1000',
  RATE_LIMIT_SIGN_UP: '1000',
  RATE_LIMIT_SEND_VERIFICATION: '1000',
  RATE_LIMIT_REFRESH: '1000',
};

/** A fresh address at example.com, tagged with `label`. */
export const newEmail = (label: string) => `${label}-${randomBytes(4).toString('hex')}@example.com`;

/** A REDIS_KEY_PREFIX of its own, so that apps do not share rate-limit counters by accident. */
export const newRedisKeyPrefix = (label: string) => `test-${label}-${randomUUID()}:`;

/** Resolves after `ms` milliseconds. */
/**
 * A sign-up answer's body with its binding blanked: every sign-up gets a fresh random one, whatever
 * the address, so bodies are compared without it.
 */
export const withoutBinding = (body: string) =>
  body.replace(/"signUpBinding":"[A-Za-z0-9_-]{43}"/, '"signUpBinding":"(random)"');

export const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A 6-digit code that differs from `code`. */
export const wrongCode = (code: string, k = 1) => String((Number(code) + k) % 1_000_000).padStart(6, '0');

/** The claims of a JWT, decoded without checking the signature. */
export function decodeClaims(jwt: string): Record<string, unknown> {
  const payload = jwt.split('.')[1] ?? '';
  return JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as Record<string, unknown>;
}

/** The Set-Cookie lines of a response. */
export function setCookieHeaders(res: Pick<LightMyRequestResponse, 'headers'>): string[] {
  const header = res.headers['set-cookie'];
  if (header === undefined) return [];
  return Array.isArray(header) ? header : [String(header)];
}

/**
 * The refresh_token Set-Cookie lines of a response, split into value and attributes (names
 * lower-cased), the one that sets a value first (the others expire the cookie's variants under
 * other settings; on the wire they come before it).
 */
export function refreshCookies(res: Pick<LightMyRequestResponse, 'headers'>) {
  return setCookieHeaders(res)
    .filter((line) => line.startsWith('refresh_token='))
    .sort((a, b) => Number(a.startsWith('refresh_token=;')) - Number(b.startsWith('refresh_token=;')))
    .map((line) => {
      const [pair = '', ...rest] = line.split(';').map((part) => part.trim());
      const attributes = new Map<string, string>();
      for (const attribute of rest) {
        const eq = attribute.indexOf('=');
        if (eq === -1) attributes.set(attribute.toLowerCase(), '');
        else attributes.set(attribute.slice(0, eq).toLowerCase(), attribute.slice(eq + 1));
      }
      return { value: pair.slice('refresh_token='.length), attributes, line };
    });
}

/** A session answer (sign-in or refresh) with the value of its refresh_token cookie (web clients). */
export interface SessionAnswer {
  accessToken: string;
  csrfToken: string | null;
  refreshToken: string | null;
  user: { id: string; email: string; emailVerified: boolean };
  redirectTo?: string;
  /** Web only: the value of the refresh_token cookie. */
  cookie: string | undefined;
}

/** The session of a 200 answer; throws on any other status. */
export function toSession(res: Pick<LightMyRequestResponse, 'statusCode' | 'body' | 'headers'>): SessionAnswer {
  if (res.statusCode !== 200) throw new Error(`expected a session, got ${res.statusCode} ${res.body}`);
  const body = JSON.parse(res.body) as Omit<SessionAnswer, 'cookie'>;
  return { ...body, cookie: refreshCookies(res)[0]?.value };
}

/** How buildAuthTestApp configures the app. */
export interface AuthTestAppOptions {
  /** Environment variables on top of the auth test defaults (they win over the generous rate limits). */
  env?: Env;
  /** Names the test file in REDIS_KEY_PREFIX. */
  label?: string;
  /** false leaves the rate limits at their configured values, for tests of the limits themselves. */
  generousRateLimits?: boolean;
}

type Reply = Promise<LightMyRequestResponse>;

/** A test app with its SMTP capture, its clock and the request shorthands the auth tests share. */
export interface AuthTestApp extends TestApp {
  smtp: SmtpCapture;
  clock: TestClock;
  /** POST /api/auth/users with PASSWORD, `extra` fields on top, and an optional query string. */
  signUp(email: string, extra?: Record<string, unknown>, query?: string): Reply;
  /**
   * POST /api/auth/email/verify as a mobile client, carrying the binding of the last sign-up made
   * with `signUp` (for the payload's address, or the last of all for a link token), as the client
   * that signed up would: its password is then proven (see src/auth/unproven-password.ts).
   */
  verify(payload: Record<string, unknown>): Reply;
  /** POST /api/auth/email/verify as a mobile client that did not sign up (no binding). */
  verifyElsewhere(payload: Record<string, unknown>): Reply;
  /** POST /api/auth/email/send-verification for an address. */
  sendVerification(email: string): Reply;
  /** GET /api/auth/sessions/current with a Bearer access token. */
  current(accessToken: string): Reply;
  /** Waits for the n-th email (1-based) to an address and returns it. */
  nthMail(email: string, n: number): Promise<ReceivedMail>;
  /** Waits for the first email to an address and returns it. */
  firstMail(email: string): Promise<ReceivedMail>;
  /** A new account at a `label`-tagged address, signed up with PASSWORD and verified by its link; returns the address. */
  verifiedAccount(label: string): Promise<string>;
}

/** A test app on a fresh database that mails to a local SMTP capture and runs on a TestClock; all closed when `t` ends. */
export async function buildAuthTestApp(t: Teardown, options: AuthTestAppOptions = {}): Promise<AuthTestApp> {
  const smtp = await startSmtpCapture();
  const clock = new TestClock();
  const built = await buildTestApp(t, {
    clock,
    env: {
      SMTP_URL: smtp.url,
      REDIS_KEY_PREFIX: newRedisKeyPrefix(options.label ?? 'auth'),
      ...(options.generousRateLimits === false ? {} : GENEROUS_RATE_LIMITS),
      ...options.env,
    },
  });
  t.teardown(() => smtp.close());
  const { app } = built;

  async function nthMail(email: string, n: number): Promise<ReceivedMail> {
    const mails = await smtp.waitFor(email, n);
    const mail = mails[n - 1];
    if (mail === undefined) throw new Error(`no mail ${n} for ${email}`);
    return mail;
  }

  // The bindings sign-ups answered with, by address (and the last one, for link tokens).
  const bindings = new Map<string, string>();
  let lastBinding: string | undefined;
  const verifyElsewhere = (payload: Record<string, unknown>) =>
    app.inject({ method: 'POST', url: '/api/auth/email/verify?client_type=mobile', payload });

  const auth: AuthTestApp = {
    ...built,
    smtp,
    clock,
    async signUp(email, extra = {}, query = '') {
      const res = await app.inject({
        method: 'POST',
        url: `/api/auth/users${query}`,
        payload: { email, password: PASSWORD, ...extra },
      });
      const binding = res.statusCode === 202 ? (res.json() as { signUpBinding?: string }).signUpBinding : undefined;
      if (binding !== undefined) {
        bindings.set(email.toLowerCase(), binding);
        lastBinding = binding;
      }
      return res;
    },
    verify(payload) {
      const binding = typeof payload.email === 'string' ? bindings.get(payload.email.toLowerCase()) : lastBinding;
      return verifyElsewhere(
        binding === undefined || 'signUpBinding' in payload ? payload : { ...payload, signUpBinding: binding },
      );
    },
    verifyElsewhere,
    sendVerification: (email) =>
      app.inject({ method: 'POST', url: '/api/auth/email/send-verification', payload: { email } }),
    current: (accessToken) =>
      app.inject({ url: '/api/auth/sessions/current', headers: { authorization: `Bearer ${accessToken}` } }),
    nthMail,
    firstMail: (email) => nthMail(email, 1),
    async verifiedAccount(label) {
      const email = newEmail(label);
      const res = await auth.signUp(email);
      if (res.statusCode !== 202) throw new Error(`sign-up: ${res.statusCode} ${res.body}`);
      const mail = await nthMail(email, 1);
      const verified = await auth.verify({ otp: mail.token });
      if (verified.statusCode !== 200) throw new Error(`verify: ${verified.statusCode} ${verified.body}`);
      return email;
    },
  };
  return auth;
}
