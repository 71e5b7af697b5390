import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AdminActor, EventClient } from '../audit/audit-trail.ts';
import type { ClientInfo, IssuedSession } from '../auth/auth-service.ts';
import { DEVICE_COOKIE, DEVICE_HEADER, DEVICE_TTL_SECONDS } from '../auth/known-device.ts';
import { allowedRedirect } from '../auth/redirects.ts';
import type { Config } from '../config.ts';
import type { AppContext } from '../context.ts';
import type { ClientType } from '../db/schema.ts';
import { ApiError } from '../errors.ts';
import { cookieAttributes } from './cookie-attributes.ts';
import { cookieValues, type RefreshBody, refreshTokenFromBody, verifiedBearerClaims } from './session-credentials.ts';
import {
  clearSignUpBindingCookie,
  hasSignUpBindingCookie,
  presentedBindings,
  setSignUpBindingCookie,
} from './sign-up-binding.ts';
import type { HandlersFor } from './types.ts';

type AuthOperations =
  | 'createUser'
  | 'createSession'
  | 'sendVerificationEmail'
  | 'verifyEmail'
  | 'refreshSession'
  | 'logout'
  | 'changePassword'
  | 'getCurrentSession';

/** The web client's refresh-token cookie, scoped to the auth endpoints. */
export const REFRESH_COOKIE = 'refresh_token';
const COOKIE_PATH = '/api/auth';

/** Where a request came from, as the audit log records it. */
export function eventClient(request: FastifyRequest): EventClient {
  return { ip: request.ip, userAgent: request.headers['user-agent'] ?? null };
}

/** The administrator making a call (x-roles admin): the account and session of the access token. */
export function adminActor(request: FastifyRequest): AdminActor {
  return { userId: request.user.sub, sessionId: request.user.sid, client: eventClient(request) };
}

export function clientInfo(request: FastifyRequest, clientType: ClientType | undefined): ClientInfo {
  return {
    clientType: clientType ?? 'web',
    userAgent: request.headers['user-agent'] ?? null,
    ip: request.ip,
    devices: presentedDeviceSignals(request),
  };
}

/**
 * The device signals a request carries, unchecked: every device cookie sent (web; cookies planted on
 * longer paths and parent domains come before the service's own, so all are offered and the first
 * valid one wins) and the X-Device-Token header. No count limit, which planted cookies could use
 * up: the 16 KiB header limit (MAX_HEADER_BYTES) bounds them to a few hundred cheap HMAC checks.
 */
export function presentedDeviceSignals(request: FastifyRequest): (string | undefined)[] {
  const header = request.headers[DEVICE_HEADER];
  return [...cookieValues(request, DEVICE_COOKIE), typeof header === 'string' ? header : undefined];
}

/**
 * Sets the device cookie (known-device.ts): HttpOnly, scoped to the auth endpoints (where it is
 * read: sign-in, send-otp, reset), with the refresh cookie's Secure, SameSite and Domain, valid as
 * long as the signal it holds.
 */
function deviceCookieLine(config: Readonly<Config>, reply: FastifyReply, value: string): string {
  return reply.server.serializeCookie(DEVICE_COOKIE, value, cookieOptions(config, DEVICE_TTL_SECONDS));
}

/**
 * The refresh cookie's attributes, the same when it is set and when it is cleared (a cookie is only
 * replaced by one with the same name, domain, path and partition). A SameSite=None cookie is sent to
 * the service from other sites' pages; browsers that block third-party cookies keep it only when it
 * is Partitioned (CHIPS: one cookie jar per top-level site), so it always is.
 */
function cookieOptions(config: Readonly<Config>, maxAge: number) {
  const { secure, sameSite, domain } = config.cookie;
  return cookieAttributes(secure, sameSite, domain, sameSite === 'none', maxAge, COOKIE_PATH);
}

/**
 * The paths under COOKIE_PATH that a refresh or logout request carries cookies of, besides
 * COOKIE_PATH itself: a refresh_token cookie planted on one of them (cookie tossing) is sent before
 * the service's own. Sign-in, refresh and logout answers expire them.
 */
const LONGER_COOKIE_PATHS = [`${COOKIE_PATH}/`, `${COOKIE_PATH}/refresh`, `${COOKIE_PATH}/logout`];

/**
 * Sets the refresh cookie (`value`, or cleared when undefined) and expires the variants of it that
 * other settings would have made (host-only or COOKIE_DOMAIN's, partitioned or not), and every
 * variant on the longer paths a refresh or logout carries (LONGER_COOKIE_PATHS): a browser that got
 * one before COOKIE_DOMAIN or COOKIE_SAMESITE changed, or had one planted, holds it beside the
 * current one and sends it first (refresh and logout try each one sent). Written as Set-Cookie
 * lines directly, in this order: the cookie plugin keeps one cookie per name, domain and path,
 * whatever the partition, so it would drop all but one of them.
 */
function setRefreshCookie(config: Readonly<Config>, reply: FastifyReply, value: string | undefined, maxAge: number) {
  const serialize = (v: string, attributes: ReturnType<typeof cookieAttributes>) =>
    reply.server.serializeCookie(REFRESH_COOKIE, v, attributes);
  const { secure, sameSite, domain } = config.cookie;
  const lines: string[] = [];
  for (const path of [COOKIE_PATH, ...LONGER_COOKIE_PATHS]) {
    for (const otherDomain of domain === undefined ? [undefined] : [undefined, domain]) {
      for (const partitioned of [false, true]) {
        if (path === COOKIE_PATH && otherDomain === domain && partitioned === (sameSite === 'none')) continue;
        // A Partitioned cookie must be Secure and SameSite=None to be set, and so to be replaced.
        const attributes = partitioned
          ? cookieAttributes(true, 'none', otherDomain, true, 0, path)
          : cookieAttributes(secure, 'lax', otherDomain, false, 0, path);
        lines.push(serialize('', attributes));
      }
    }
  }
  // The cookie itself last: a browser without partitioned cookies takes a Partitioned line for the
  // same cookie as an unpartitioned one, and must end with the value, not with its expiry.
  lines.push(serialize(value ?? '', cookieOptions(config, value === undefined ? 0 : maxAge)));
  reply.header('set-cookie', lines);
}

/**
 * The spec's Session result; for web the refresh token goes into the cookie and the body carries the
 * CSRF token. `redirectTo` is an allowed redirect the request asked for (allowedRedirect).
 */
export function sessionResult(
  config: Readonly<Config>,
  reply: FastifyReply,
  issued: IssuedSession,
  redirectTo?: string,
) {
  const web = issued.clientType === 'web';
  const redirect = redirectTo ?? config.authRedirectUrl;
  // The cookie lives as long as the session still has (refreshing never extends a session).
  if (web) setRefreshCookie(config, reply, issued.refreshToken, issued.refreshTokenMaxAge);
  // A session that opened: this device is now known to the account (cookie for web, body otherwise).
  // (Fastify adds Set-Cookie lines to those already set.)
  if (web && issued.deviceToken !== undefined) {
    reply.header('set-cookie', deviceCookieLine(config, reply, issued.deviceToken));
  }
  return {
    user: issued.user,
    accessToken: issued.accessToken,
    csrfToken: web ? issued.csrfToken : null,
    refreshToken: web ? null : issued.refreshToken,
    ...(!web && issued.deviceToken !== undefined ? { deviceToken: issued.deviceToken } : {}),
    ...(redirect !== undefined ? { redirectTo: redirect } : {}),
  };
}

/**
 * The refresh tokens a client presents: every refresh_token cookie for web (a planted one may come
 * first: each is tried, see session-refresh.ts), the body's token for mobile and desktop.
 */
function offeredRefreshTokens(request: FastifyRequest, clientType: ClientType, body: RefreshBody | undefined) {
  if (clientType === 'web') return cookieValues(request, REFRESH_COOKIE);
  const token = refreshTokenFromBody(body);
  return token === undefined || token === '' ? [] : [token];
}

/** The refresh tokens a client presents (at least one), or 401. */
function presentedRefreshTokens(request: FastifyRequest, clientType: ClientType, body: RefreshBody | undefined) {
  const tokens = offeredRefreshTokens(request, clientType, body);
  if (tokens.length === 0) {
    throw new ApiError(
      'REFRESH_TOKEN_INVALID',
      clientType === 'web' ? 'The refresh_token cookie is missing' : 'body.refreshToken is required',
    );
  }
  return tokens;
}

/** Handlers of the `auth` tag. */
export function authHandlers(ctx: AppContext): HandlersFor<AuthOperations> {
  const { auth, config } = ctx;
  return {
    async createUser(request, reply) {
      const redirectTo = allowedRedirect(config, request.body.redirectTo);
      const client = clientInfo(request, request.query.client_type);
      const outcome = await auth.signUp(request.body, client, redirectTo);
      if (outcome.kind === 'verification-required') {
        if (client.clientType === 'web') setSignUpBindingCookie(config, reply, outcome.binding);
        reply.code(202);
        return { requireEmailVerification: true as const, accessToken: null, signUpBinding: outcome.binding };
      }
      reply.code(201);
      return sessionResult(config, reply, outcome.session, redirectTo);
    },

    async createSession(request, reply) {
      const client = clientInfo(request, request.query.client_type);
      const body = request.body;
      // method "otp": a code from POST /api/auth/email/send-otp; absent or "password": a password.
      const issued = body.method === 'otp' ? await auth.signInWithCode(body, client) : await auth.signIn(body, client);
      return sessionResult(config, reply, issued);
    },

    async sendVerificationEmail(request, reply) {
      const redirectTo = allowedRedirect(config, request.body.redirectTo);
      await auth.sendVerification(request.body.email, { ip: request.ip }, redirectTo);
      reply.code(202);
      return {
        success: true as const,
        message: 'If the address belongs to an account that still needs verification, an email is on its way.',
      };
    },

    async verifyEmail(request, reply) {
      // Checked before the code or token is looked at, so a refused redirect spends no attempt.
      const redirectTo = allowedRedirect(config, request.body.redirectTo);
      const client = clientInfo(request, request.query.client_type);
      const bindings = presentedBindings(config, request, request.body.signUpBinding);
      const issued = await auth.verifyEmail(request.body, client, bindings);
      if (hasSignUpBindingCookie(config, request)) clearSignUpBindingCookie(config, reply);
      return sessionResult(config, reply, issued, redirectTo);
    },

    async refreshSession(request, reply) {
      const client = clientInfo(request, request.query.client_type);
      const tokens = presentedRefreshTokens(request, client.clientType, request.body);
      return sessionResult(config, reply, await auth.refresh(tokens, client, request.headers['x-csrf-token']));
    },

    async logout(request, reply) {
      const client = clientInfo(request, request.query.client_type);
      // No refresh token presented: the session of the Bearer access token, when one is sent.
      const claims =
        offeredRefreshTokens(request, client.clientType, request.body).length === 0
          ? verifiedBearerClaims(request)
          : undefined;
      if (claims !== undefined) await auth.logoutByAccessToken(claims, client);
      else {
        const tokens = presentedRefreshTokens(request, client.clientType, request.body);
        await auth.logout(tokens, client, request.headers['x-csrf-token']);
      }
      if (client.clientType === 'web') setRefreshCookie(config, reply, undefined, 0);
      reply.code(204);
      return undefined;
    },

    async changePassword(request, reply) {
      await auth.changePassword(
        { userId: request.user.sub, sessionId: request.user.sid },
        request.body,
        eventClient(request),
      );
      reply.code(204);
      return undefined;
    },

    async getCurrentSession(request) {
      return {
        user: await auth.currentUser(request.user.sub),
        aal: request.user.aal ?? 'aal1',
        nextLevel: request.user.next_aal ?? null,
      };
    },
  } satisfies HandlersFor<AuthOperations>;
}
