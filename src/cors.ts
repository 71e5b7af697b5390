import fastifyCors from '@fastify/cors';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Config } from './config.ts';

/** How long browsers may keep a preflight's answer (Chromium keeps it at most 2 hours). */
const PREFLIGHT_MAX_AGE_SECONDS = 7200;

/** What a listed origin may send and read: the operations' methods, and the headers clients use. */
const CORS_POLICY = {
  methods: ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'],
  allowedHeaders: ['Authorization', 'Content-Type', 'X-CSRF-Token', 'X-Request-Id'],
  exposedHeaders: ['X-Request-Id', 'Retry-After'],
  credentials: true,
  maxAge: PREFLIGHT_MAX_AGE_SECONDS,
  // The delegator below decides what is a preflight: the plugin's own check answers in plain text.
  strictPreflight: false,
};

/**
 * The CORS headers of an answer no hook sees (Fastify's frameworkErrors, written before routing):
 * those of any other answer to a listed origin, none for the rest.
 */
export function corsHeaders(config: Pick<Readonly<Config>, 'corsOrigins'>, origin: string | undefined) {
  if (origin === undefined || !config.corsOrigins.includes(origin)) return {};
  return {
    'access-control-allow-origin': origin,
    'access-control-allow-credentials': 'true',
    'access-control-expose-headers': CORS_POLICY.exposedHeaders.join(', '),
    vary: 'Origin',
  };
}

/**
 * Credentialed CORS for the origins in CORS_ORIGINS, compared exactly: a listed origin gets its
 * preflights answered and the CORS headers on every answer; any other origin, and an OPTIONS that
 * is not a preflight (no Access-Control-Request-Method), gets no CORS header at all (its OPTIONS is
 * then answered as before: 405 in the Error shape). With no origin listed, nothing is registered.
 */
export async function registerCors(app: FastifyInstance, config: Readonly<Config>): Promise<void> {
  if (config.corsOrigins.length === 0) return;
  const allowed = new Set(config.corsOrigins);
  await app.register(fastifyCors, {
    hideOptionsRoute: true,
    delegator: (request: FastifyRequest, callback) => {
      const origin = request.headers.origin;
      const notPreflight =
        request.method === 'OPTIONS' && request.headers['access-control-request-method'] === undefined;
      callback(null, { ...CORS_POLICY, origin: origin !== undefined && allowed.has(origin) && !notPreflight });
    },
  });
}

/**
 * Whether a realtime handshake may go on, by the browser origin it comes from (browsers always send
 * Origin on a WebSocket; other clients do not): no Origin, a listed origin, or the service's own
 * (PUBLIC_URL's), each compared exactly. WebSockets are not covered by CORS, so this is the check
 * that keeps other sites' pages from opening sockets. The Host header is not trusted for it: a page
 * reached through DNS rebinding sends a Host of its own choosing.
 */
export function socketOriginAllowed(
  config: Pick<Readonly<Config>, 'corsOrigins' | 'publicUrl'>,
  origin: string | undefined,
): boolean {
  if (origin === undefined) return true;
  return config.corsOrigins.includes(origin) || origin === URL.parse(config.publicUrl)?.origin;
}
