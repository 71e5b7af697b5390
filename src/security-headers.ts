import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

/**
 * Paths whose answers carry, or may carry, an access or refresh token, a one-time code or a CSRF
 * token: every auth operation (successes and errors alike), and the page that verification links
 * open (its URL holds the token).
 */
const SECRET_BEARING_PATH = /^\/(api\/)?auth(\/|$)/;

/** Auth routes whose answers carry no secret and may be cached (they set their own Cache-Control). */
const PUBLIC_AUTH_ROUTES = new Set(['/api/auth/public-config']);

/** The route's path (the pattern, already decoded) or, without a route (404), the requested one. */
function carriesSecrets(request: FastifyRequest): boolean {
  const route = request.routeOptions.url;
  if (route !== undefined && PUBLIC_AUTH_ROUTES.has(route)) return false;
  if (route !== undefined && SECRET_BEARING_PATH.test(route)) return true;
  return SECRET_BEARING_PATH.test(request.url.split('?', 1)[0] ?? '');
}

/**
 * `X-Content-Type-Options: nosniff` on every answer; `Cache-Control: no-store` (RFC 6749, section
 * 5.1: no cache may keep a token) on the auth paths and on every error answer whatever its path.
 * Error bodies carry no secret, but a path that reaches no route ("//api/auth/…", "/API/AUTH/…",
 * "/api/auth%2F…") cannot be told apart from an auth path reliably: refusing to cache every error
 * leaves no such path out.
 */
function setSecurityHeaders(request: FastifyRequest, reply: FastifyReply): void {
  reply.header('x-content-type-options', 'nosniff');
  if (reply.statusCode >= 400 || carriesSecrets(request)) reply.header('cache-control', 'no-store');
}

/**
 * Sets the security headers on an answer that no hook sees, such as Fastify's frameworkErrors:
 * those are all errors, so `Cache-Control: no-store` whatever the path (and whatever status is
 * set after this call), with `X-Content-Type-Options: nosniff`.
 */
export function applySecurityHeaders(_request: FastifyRequest, reply: FastifyReply): void {
  reply.header('x-content-type-options', 'nosniff');
  reply.header('cache-control', 'no-store');
}

/**
 * Adds the security headers to every answer of the app: set when the request arrives, so that
 * even an answer written without the onSend hooks has them, and set again just before sending,
 * once the status is known, so that no handler or plugin can replace no-store. Hooks reach only
 * the plugins registered after them: call this before registering any plugin.
 */
export function registerSecurityHeaders(app: FastifyInstance): void {
  app.addHook('onRequest', (request, reply, done) => {
    setSecurityHeaders(request, reply);
    done();
  });
  app.addHook('onSend', (request, reply, payload, done) => {
    setSecurityHeaders(request, reply);
    done(null, payload);
  });
}
