import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

/**
 * Paths whose answers carry, or may carry, an access or refresh token, a one-time code or a CSRF
 * token: every auth operation (successes and errors alike), and the page that verification links
 * open (its URL holds the token).
 */
const SECRET_BEARING_PATH = /^\/(api\/)?auth(\/|$)/;

/** The route's path (the pattern, already decoded) or, without a route (404), the requested one. */
function carriesSecrets(request: FastifyRequest): boolean {
  const route = request.routeOptions.url;
  if (route !== undefined && SECRET_BEARING_PATH.test(route)) return true;
  return SECRET_BEARING_PATH.test(request.url.split('?', 1)[0] ?? '');
}

/**
 * Sets the headers every answer has: `X-Content-Type-Options: nosniff`, and `Cache-Control:
 * no-store` on the auth paths (RFC 6749, section 5.1: no cache may keep a token). For the answers
 * that no hook sees, such as Fastify's frameworkErrors.
 */
export function applySecurityHeaders(request: FastifyRequest, reply: FastifyReply): void {
  reply.header('x-content-type-options', 'nosniff');
  if (carriesSecrets(request)) reply.header('cache-control', 'no-store');
}

/**
 * Adds the security headers to every answer of the app: set when the request arrives, so that
 * even an answer written without the onSend hooks has them, and set again just before sending, so
 * that no handler or plugin can replace no-store. Hooks reach only the plugins registered after
 * them: call this before registering any plugin.
 */
export function registerSecurityHeaders(app: FastifyInstance): void {
  app.addHook('onRequest', (request, reply, done) => {
    applySecurityHeaders(request, reply);
    done();
  });
  app.addHook('onSend', (request, reply, payload, done) => {
    applySecurityHeaders(request, reply);
    done(null, payload);
  });
}
