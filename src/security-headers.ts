import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import helmet, { type HelmetOptions } from 'helmet';
import type { Config } from './config.ts';

type CspDirectives = Record<string, string[]>;
type HeaderSet = Readonly<Record<string, string>>;

declare module 'fastify' {
  interface FastifyContextConfig {
    /** A route's own Content-Security-Policy (a page's), instead of the JSON answers' API_CSP. */
    csp?: CspDirectives;
    /** Helmet's headers for the route, computed once when it is added. */
    securityHeaders?: HeaderSet;
  }
}

/** JSON answers load nothing, submit nothing and are never framed. */
const API_CSP: CspDirectives = {
  'default-src': ["'none'"],
  'base-uri': ["'none'"],
  'form-action': ["'none'"],
  'frame-ancestors': ["'none'"],
};

/**
 * The pages emailed links open (verification, password reset): a form posted back to this origin,
 * no script, never framed (a framed page could be clicked through by another site).
 */
export const FORM_PAGE_CSP: CspDirectives = {
  'default-src': ["'none'"],
  'style-src': ["'unsafe-inline'"],
  'form-action': ["'self'"],
  'base-uri': ["'none'"],
  'frame-ancestors': ["'none'"],
};

/** Swagger UI at /docs: its own scripts, styles, fonts and images; "Try it out" calls this origin. */
export const DOCS_CSP: CspDirectives = {
  'default-src': ["'none'"],
  'script-src': ["'self'"],
  // The hash admits the one inline <style> Swagger UI writes (in its top bar's SVG logo);
  // test/browser-docs.test.ts fails on any CSP violation, so a new Swagger UI shows when it changes.
  'style-src': ["'self'", "'sha256-RL3ie0nH+Lzz2YNqQN83mnU0J1ot4QL7b99vMdIX99w='"],
  'img-src': ["'self'", 'data:'],
  'font-src': ["'self'", 'data:'],
  'connect-src': ["'self'"],
  'form-action': ["'self'"],
  'base-uri': ["'none'"],
  'object-src': ["'none'"],
  'frame-ancestors': ["'none'"],
};

/** Renders directives as a Content-Security-Policy value (for plugins that take the header itself). */
export function cspHeader(directives: CspDirectives): string {
  return Object.entries(directives)
    .map(([name, values]) => `${name} ${values.join(' ')}`)
    .join('; ');
}

const API_CSP_HEADER = cspHeader(API_CSP);

/**
 * Helmet's headers for a CSP: the CSP itself, `X-Frame-Options: DENY`, `Referrer-Policy:
 * no-referrer` (links carry tokens in their URL; no page should pass its address on), nosniff and
 * the cross-origin isolation headers; HSTS only when the service's public URL is https (a plain-http
 * deployment must not be told to switch), for a year, this host only. Helmet's middleware runs once,
 * against a recorder, and the answers get the recorded headers: building it for every request (as
 * @fastify/helmet does) cost a third of a small route's throughput.
 */
function helmetHeaders(config: Pick<Readonly<Config>, 'publicUrl'>, directives: CspDirectives): HeaderSet {
  const options: HelmetOptions = {
    contentSecurityPolicy: { useDefaults: false, directives },
    frameguard: { action: 'deny' },
    referrerPolicy: { policy: 'no-referrer' },
    strictTransportSecurity: config.publicUrl.startsWith('https://')
      ? { maxAge: 365 * 24 * 3600, includeSubDomains: false }
      : false,
  };
  const headers: Record<string, string> = {};
  const recorder = {
    setHeader: (name: string, value: unknown) => {
      headers[name.toLowerCase()] = String(value);
    },
    removeHeader: (name: string) => {
      delete headers[name.toLowerCase()];
    },
  };
  helmet(options)({} as IncomingMessage, recorder as unknown as ServerResponse, (err) => {
    if (err) throw err;
  });
  return Object.freeze(headers);
}

/**
 * Paths whose answers carry, or may carry, an access or refresh token, a one-time code or a CSRF
 * token: every auth operation (successes and errors alike), the pages that emailed links open (their
 * URL holds the token), and the development inbox (/dev/inbox, its emails' codes and links).
 */
const SECRET_BEARING_PATH = /^\/((api\/)?auth|dev)(\/|$)/;

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
 * set after this call), with nosniff and the headers helmet gives JSON answers.
 */
export function applySecurityHeaders(_request: FastifyRequest, reply: FastifyReply): void {
  reply.header('x-content-type-options', 'nosniff');
  reply.header('cache-control', 'no-store');
  // What registerSecurityHeaders gives a JSON answer (HSTS aside).
  reply.header('content-security-policy', API_CSP_HEADER);
  reply.header('x-frame-options', 'DENY');
  reply.header('referrer-policy', 'no-referrer');
}

/**
 * Adds the security headers to every answer of the app: helmet's (helmetHeaders; a route's
 * `config.csp` gives it its own CSP) and ours, set when the request arrives, so that even an
 * answer written without the onSend hooks has them, and ours set again just before sending, once
 * the status is known, so that no handler or plugin can replace no-store. Hooks reach only the
 * plugins registered after them: call this before registering any plugin or route.
 */
export function registerSecurityHeaders(app: FastifyInstance, config: Pick<Readonly<Config>, 'publicUrl'>): void {
  const api = helmetHeaders(config, API_CSP);
  app.addHook('onRoute', (route) => {
    const csp = route.config?.csp;
    if (csp !== undefined) route.config = { ...route.config, securityHeaders: helmetHeaders(config, csp) };
  });
  app.addHook('onRequest', (request, reply, done) => {
    reply.headers(request.routeOptions.config.securityHeaders ?? api);
    setSecurityHeaders(request, reply);
    done();
  });
  app.addHook('onSend', (request, reply, payload, done) => {
    setSecurityHeaders(request, reply);
    done(null, payload);
  });
}
