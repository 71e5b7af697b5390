// CORS for the origins of CORS_ORIGINS (compared exactly), the refresh cookie's attributes
// (SameSite, Secure, Partitioned, Domain) when it is set and when it is cleared, and the realtime
// handshake's origin check (WebSockets are not covered by CORS).
import { randomBytes } from 'node:crypto';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { io } from 'socket.io-client';
import t, { type Test } from 'tap';
import { freePort } from '../scripts/lib/service-process.ts';
import type { Env } from '../src/config.ts';
import { socketOriginAllowed } from '../src/cors.ts';
import { buildTestApp } from './helpers/app.ts';
import { type CheckedSocket, checkedClient } from './helpers/asyncapi-check.ts';
import { buildAuthTestApp, newEmail, PASSWORD, refreshCookies, setCookieHeaders } from './helpers/auth.ts';
import { type ConnectError, REALTIME_TIMEOUT_MS, urlOf } from './helpers/realtime-client.ts';
import { accessTokenFor } from './helpers/tokens.ts';

const APP_ORIGIN = 'http://app.test:5173';
const LISTED: Env = { CORS_ORIGINS: `${APP_ORIGIN},https://other.example` };

/** Origins that are not listed, though some differ from a listed one only by case, a slash, a port or a scheme. */
const NOT_LISTED = [
  'http://evil.test',
  'http://APP.test:5173',
  'http://app.test:5173/',
  'http://app.test',
  'null',
  'https://app.test:5173',
];

/** A preflight of a web client's refresh from `origin`. */
const preflight = (app: FastifyInstance, origin: string) =>
  app.inject({
    method: 'OPTIONS',
    url: '/api/auth/refresh',
    headers: {
      origin,
      'access-control-request-method': 'POST',
      'access-control-request-headers': 'content-type,x-csrf-token',
    },
  });

/** A header's comma-separated values, lower-cased. */
const listOf = (res: LightMyRequestResponse, name: string) =>
  String(res.headers[name] ?? '')
    .split(',')
    .map((v) => v.trim().toLowerCase())
    .filter((v) => v !== '');

const corsHeaderNames = (res: LightMyRequestResponse) =>
  Object.keys(res.headers).filter((name) => name.toLowerCase().startsWith('access-control-'));

/** The service's answer to an OPTIONS it has no preflight for: 405 in the Error shape. */
function assertUsualOptionsAnswer(t: Test, res: LightMyRequestResponse, what: string) {
  t.equal(res.statusCode, 405, `${what}: 405`);
  t.match(String(res.headers['content-type']), /^application\/json/, `${what}: JSON, not plain text`);
  let body: { error?: unknown; message?: unknown; statusCode?: unknown } = {};
  try {
    body = res.json();
  } catch {
    t.fail(`${what}: the body is not JSON (${JSON.stringify(res.body.slice(0, 80))})`);
  }
  t.equal(body.error, 'METHOD_NOT_ALLOWED', `${what}: error METHOD_NOT_ALLOWED`);
  t.type(body.message, 'string', `${what}: a message`);
  t.equal(body.statusCode, 405, `${what}: statusCode 405 in the body`);
}

/** The headers an actual (not preflight) answer to a listed origin carries. */
function assertActualCors(t: Test, res: LightMyRequestResponse, what: string) {
  t.equal(res.headers['access-control-allow-origin'], APP_ORIGIN, `${what}: Access-Control-Allow-Origin`);
  t.equal(res.headers['access-control-allow-credentials'], 'true', `${what}: Access-Control-Allow-Credentials`);
  const exposed = listOf(res, 'access-control-expose-headers');
  t.ok(exposed.includes('x-request-id'), `${what}: X-Request-Id exposed (${exposed})`);
  t.ok(exposed.includes('retry-after'), `${what}: Retry-After exposed (${exposed})`);
  t.ok(listOf(res, 'vary').includes('origin'), `${what}: Vary: Origin`);
}

t.test('a listed origin: its preflight is answered, and every answer carries the CORS headers', async (t) => {
  const { app } = await buildTestApp(t, { env: LISTED });

  const res = await preflight(app, APP_ORIGIN);
  t.equal(res.statusCode, 204, 'preflight: 204');
  t.equal(res.body, '', 'preflight: no body');
  t.equal(res.headers['access-control-allow-origin'], APP_ORIGIN, 'the origin itself, never *');
  t.equal(res.headers['access-control-allow-credentials'], 'true');
  const methods = listOf(res, 'access-control-allow-methods');
  for (const method of ['post', 'patch', 'delete', 'get'])
    t.ok(methods.includes(method), `allows ${method} (${methods})`);
  const headers = listOf(res, 'access-control-allow-headers');
  for (const header of ['authorization', 'content-type', 'x-csrf-token']) {
    t.ok(headers.includes(header), `allows ${header} (${headers})`);
  }
  t.equal(res.headers['access-control-max-age'], '7200', 'kept for 2 hours');
  t.ok(listOf(res, 'vary').includes('origin'), 'Vary: Origin');

  const other = await preflight(app, 'https://other.example');
  t.equal(other.statusCode, 204, 'the other listed origin: 204');
  t.equal(other.headers['access-control-allow-origin'], 'https://other.example', 'with its own origin');

  const health = await app.inject({ url: '/api/health', headers: { origin: APP_ORIGIN } });
  t.equal(health.statusCode, 200);
  assertActualCors(t, health, 'GET /api/health');

  const current = await app.inject({ url: '/api/auth/sessions/current', headers: { origin: APP_ORIGIN } });
  t.equal(current.statusCode, 401, 'sessions/current without a token: 401');
  t.equal((current.json() as { error: string }).error, 'UNAUTHORIZED');
  assertActualCors(t, current, 'a 401');

  const missing = await app.inject({ url: '/api/no-such-path', headers: { origin: APP_ORIGIN } });
  t.equal(missing.statusCode, 404);
  assertActualCors(t, missing, 'a 404');

  const unsupported = await app.inject({
    method: 'POST',
    url: '/api/auth/sessions',
    headers: { origin: APP_ORIGIN, 'content-type': 'text/plain' },
    payload: 'x',
  });
  t.equal(unsupported.statusCode, 415);
  assertActualCors(t, unsupported, 'a 415 (refused before the handler)');

  t.equal(health.headers['access-control-max-age'], undefined, 'Max-Age only on preflights');
});

t.test('any other origin gets no CORS header, and its preflight the usual answer to OPTIONS', async (t) => {
  const { app } = await buildTestApp(t, { env: LISTED });
  for (const origin of NOT_LISTED) {
    const res = await preflight(app, origin);
    t.same(corsHeaderNames(res), [], `preflight from ${origin}: no Access-Control-* header`);
    assertUsualOptionsAnswer(t, res, `preflight from ${origin}`);
    t.equal(res.headers.allow, 'POST', `preflight from ${origin}: Allow: POST`);

    const get = await app.inject({ url: '/api/health', headers: { origin } });
    t.equal(get.statusCode, 200, `GET from ${origin} is still answered (CORS is enforced by browsers)`);
    t.same(corsHeaderNames(get), [], `GET from ${origin}: no Access-Control-* header`);
    t.ok(listOf(get, 'vary').includes('origin'), `GET from ${origin}: Vary: Origin (caches keep answers apart)`);

    const failed = await app.inject({ url: '/api/auth/sessions/current', headers: { origin } });
    t.equal(failed.statusCode, 401);
    t.same(corsHeaderNames(failed), [], `a 401 to ${origin}: no Access-Control-* header`);
  }

  const noOrigin = await app.inject({ url: '/api/health' });
  t.same(corsHeaderNames(noOrigin), [], 'no Origin (not a browser, or same-origin): no Access-Control-* header');
});

t.test('an OPTIONS from a listed origin that is not a preflight gets the usual answer, no CORS header', async (t) => {
  const { app } = await buildTestApp(t, { env: LISTED });
  const res = await app.inject({ method: 'OPTIONS', url: '/api/auth/refresh', headers: { origin: APP_ORIGIN } });
  t.same(corsHeaderNames(res), [], 'no Access-Control-* header');
  assertUsualOptionsAnswer(t, res, 'OPTIONS without Access-Control-Request-Method');
  const bare = await app.inject({ method: 'OPTIONS', url: '/api/health' });
  t.same(corsHeaderNames(bare), [], 'an OPTIONS without Origin: no Access-Control-* header');
  assertUsualOptionsAnswer(t, bare, 'OPTIONS without Origin');
});

t.test(
  'an error written before routing (a path that cannot be decoded) carries CORS for a listed origin only',
  async (t) => {
    const { app } = await buildTestApp(t, { env: LISTED });
    const listed = await app.inject({ url: '/api/%', headers: { origin: APP_ORIGIN } });
    t.equal(listed.statusCode, 400);
    t.equal(listed.headers['access-control-allow-origin'], APP_ORIGIN, 'the listed origin can read the 400');
    t.equal(listed.headers['access-control-allow-credentials'], 'true');
    t.match(String(listed.headers.vary), /Origin/);
    const other = await app.inject({ url: '/api/%', headers: { origin: 'http://evil.test' } });
    t.equal(other.statusCode, 400);
    t.same(corsHeaderNames(other), [], 'another origin: no Access-Control-* header');
  },
);

t.test('without CORS_ORIGINS no origin gets a CORS header', async (t) => {
  const { app, config } = await buildTestApp(t);
  t.same(config.corsOrigins, [], 'no origin listed');
  const res = await preflight(app, APP_ORIGIN);
  t.same(corsHeaderNames(res), [], 'preflight: no Access-Control-* header');
  assertUsualOptionsAnswer(t, res, 'preflight without CORS_ORIGINS');
  const get = await app.inject({ url: '/api/health', headers: { origin: APP_ORIGIN } });
  t.equal(get.statusCode, 200);
  t.same(corsHeaderNames(get), [], 'GET: no Access-Control-* header');
});

t.test("a 429 tells a listed origin's page when to retry", async (t) => {
  const { app } = await buildAuthTestApp(t, {
    label: 'cors-429',
    generousRateLimits: false,
    env: { ...LISTED, RATE_LIMIT_SIGN_UP: '1' },
  });
  const signUp = () =>
    app.inject({
      method: 'POST',
      url: '/api/auth/users',
      headers: { origin: APP_ORIGIN },
      payload: { email: newEmail('cors-429'), password: PASSWORD },
    });
  const first = await signUp();
  t.equal(first.statusCode, 202, 'the first sign-up is taken (verification required)');
  assertActualCors(t, first, 'a 202');
  const limited = await signUp();
  t.equal(limited.statusCode, 429, 'the second is rate-limited');
  t.equal((limited.json() as { error: string }).error, 'RATE_LIMITED');
  assertActualCors(t, limited, 'the 429');
  t.match(String(limited.headers['retry-after']), /^\d+$/, 'with Retry-After in seconds');
  t.ok(Number(limited.headers['retry-after']) >= 1, 'Retry-After is at least 1');
});

/** A verified account's web sign-in on an app with `env`: the sign-in answer and its one refresh cookie. */
async function webSignIn(t: Test, env: Env) {
  const built = await buildAuthTestApp(t, { label: 'cors-cookie', env });
  const { app, signUp, verify, firstMail } = built;
  const email = newEmail('cookie');
  t.equal((await signUp(email)).statusCode, 202, 'signed up');
  const mail = await firstMail(email);
  t.equal((await verify({ email, otp: mail.code })).statusCode, 200, 'verified');
  const res = await app.inject({
    method: 'POST',
    url: '/api/auth/sessions?client_type=web',
    payload: { email, password: PASSWORD },
  });
  t.equal(res.statusCode, 200, 'web sign-in: 200');
  // One line sets the cookie; the others expire the variants of other settings.
  const cookies = refreshCookies(res);
  t.equal(cookies.filter((c) => c.value !== '').length, 1, 'one refresh_token cookie with a value');
  const cookie = cookies[0];
  if (cookie === undefined) throw new Error(`no refresh cookie: ${JSON.stringify(res.headers['set-cookie'])}`);
  return { ...built, res, cookie, csrfToken: (res.json() as { csrfToken: string }).csrfToken };
}

/** POST /api/auth/logout as a web client: the refresh cookie and its CSRF token. */
const webLogout = (app: FastifyInstance, refreshToken: string, csrfToken: string) =>
  app.inject({
    method: 'POST',
    url: '/api/auth/logout?client_type=web',
    cookies: { refresh_token: refreshToken },
    headers: { 'x-csrf-token': csrfToken },
  });

t.test('the refresh cookie by default: SameSite=Lax, HttpOnly, Secure, Path=/api/auth, not Partitioned', async (t) => {
  const { cookie } = await webSignIn(t, {});
  const { attributes, value, line } = cookie;
  t.ok(value.length > 0, 'a value');
  t.equal(attributes.get('samesite'), 'Lax', line);
  t.ok(attributes.has('httponly'), 'HttpOnly');
  t.ok(attributes.has('secure'), 'Secure (COOKIE_SECURE defaults to true)');
  t.equal(attributes.get('path'), '/api/auth', 'Path=/api/auth');
  t.notOk(attributes.has('partitioned'), 'not Partitioned');
  t.notOk(attributes.has('domain'), 'host-only (no Domain)');
  t.ok(Number(attributes.get('max-age')) > 0, 'Max-Age: the session lifetime');
});

t.test('COOKIE_SAMESITE=none: SameSite=None; Secure; Partitioned, set and cleared alike', async (t) => {
  const { app, cookie, csrfToken } = await webSignIn(t, { COOKIE_SAMESITE: 'none', COOKIE_SECURE: 'true' });
  const { attributes, line } = cookie;
  t.equal(attributes.get('samesite'), 'None', line);
  t.ok(attributes.has('secure'), 'Secure');
  t.ok(attributes.has('partitioned'), 'Partitioned (CHIPS)');
  t.ok(attributes.has('httponly'), 'HttpOnly');
  t.equal(attributes.get('path'), '/api/auth');

  const logout = await webLogout(app, cookie.value, csrfToken);
  t.equal(logout.statusCode, 204, 'logout: 204');
  const cleared = refreshCookies(logout);
  t.ok(cleared.length >= 1, 'the cookie is cleared');
  t.ok(
    cleared.every((c) => c.value === '' && c.attributes.get('max-age') === '0'),
    'every refresh_token line of the logout expires',
  );
  const clear = cleared.at(-1)?.attributes ?? new Map<string, string>();
  const clearLine = cleared.at(-1)?.line ?? '';
  t.equal(cleared.at(-1)?.value, '', `emptied: ${clearLine}`);
  t.ok(
    clear.get('max-age') === '0' || Date.parse(clear.get('expires') ?? '') <= Date.now(),
    'expired (Max-Age=0 or Expires in the past)',
  );
  t.equal(clear.get('samesite'), 'None', 'cleared with SameSite=None');
  t.ok(clear.has('secure'), 'cleared with Secure');
  t.ok(clear.has('partitioned'), 'cleared with Partitioned (else the partitioned cookie stays)');
  t.ok(clear.has('httponly'), 'cleared with HttpOnly');
  t.equal(clear.get('path'), '/api/auth', 'cleared on the same path');
  t.notOk(clear.has('domain'), 'cleared host-only, as it was set');
});

t.test('COOKIE_DOMAIN: Domain on the cookie, set and cleared', async (t) => {
  const { app, cookie, csrfToken } = await webSignIn(t, {
    COOKIE_DOMAIN: 'example.com',
    PUBLIC_URL: 'https://api.example.com',
  });
  t.equal(cookie.attributes.get('domain'), 'example.com', cookie.line);
  t.equal(cookie.attributes.get('samesite'), 'Lax');
  t.notOk(cookie.attributes.has('partitioned'), 'not Partitioned');
  const logout = await webLogout(app, cookie.value, csrfToken);
  t.equal(logout.statusCode, 204);
  t.equal(refreshCookies(logout).at(-1)?.attributes.get('domain'), 'example.com', 'cleared on the same domain');
});

/**
 * A socket.io client with `token`, as the realtime tests open them, sending `origin` as its Origin
 * header (undefined: none) and, when given, `host` as its Host header.
 */
function openSocket(t: Test, url: string, token: string, origin?: string, host?: string): CheckedSocket {
  const extraHeaders: Record<string, string> = {};
  if (origin !== undefined) extraHeaders.origin = origin;
  if (host !== undefined) extraHeaders.host = host;
  const socket = checkedClient(
    io(url, {
      transports: ['websocket'],
      auth: { token },
      reconnection: false,
      forceNew: true,
      timeout: REALTIME_TIMEOUT_MS,
      extraHeaders,
    }),
  );
  t.teardown(() => socket.close());
  return socket;
}

type Outcome = { kind: 'connected' } | { kind: 'refused'; error: ConnectError };

/** Whether the handshake connects or is refused. */
function outcomeOf(socket: CheckedSocket): Promise<Outcome> {
  return new Promise((resolve) => {
    socket.once('connect', () => resolve({ kind: 'connected' }));
    socket.once('connect_error', (error: ConnectError) => resolve({ kind: 'refused', error }));
  });
}

const METRICS_TOKEN = randomBytes(32).toString('hex');

/** The service's own count of connected realtime sockets. */
async function connectedSockets(app: FastifyInstance): Promise<number> {
  const res = await app.inject({ url: '/metrics', headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
  const line = res.body.split('\n').find((l) => l.startsWith('realtime_connected_sockets '));
  if (line === undefined) throw new Error(`no realtime_connected_sockets in /metrics (${res.statusCode})`);
  return Number(line.split(' ')[1]);
}

/**
 * An app listening on 127.0.0.1 at the port its config names, so that its PUBLIC_URL (by default
 * http://HOST:PORT) is the origin it is reached at; and a helper that opens a socket from an
 * origin (and Host) and reports the outcome.
 */
async function socketApp(t: Test, env: Env) {
  const port = await freePort();
  const { app, config } = await buildTestApp(t, { env: { ...env, PORT: String(port), METRICS_TOKEN } });
  await app.listen({ port, host: '127.0.0.1' });
  const url = urlOf(app);
  t.equal(config.publicUrl, url, `PUBLIC_URL is the address the service is reached at (${url})`);
  const token = accessTokenFor(app);
  const attempt = async (origin: string | undefined, host?: string) => {
    const socket = openSocket(t, url, token, origin, host);
    const outcome = await outcomeOf(socket);
    return { socket, outcome };
  };
  return { app, url, port, attempt };
}

type SocketApp = Awaited<ReturnType<typeof socketApp>>;

async function assertConnects(t: Test, served: SocketApp, origin: string | undefined, what: string) {
  const { socket, outcome } = await served.attempt(origin);
  const why = outcome.kind === 'refused' ? ` (${outcome.error.message})` : '';
  t.equal(outcome.kind, 'connected', `${what}: connects${why}`);
  t.same(socket.violations, [], `${what}: nothing outside asyncapi.yaml`);
  return socket;
}

async function assertRefused(t: Test, served: SocketApp, origin: string, what: string, host?: string) {
  const before = await connectedSockets(served.app);
  const { socket, outcome } = await served.attempt(origin, host);
  t.equal(outcome.kind, 'refused', `${what}: connect_error`);
  t.notOk(socket.connected, `${what}: not connected`);
  // A refused handshake may not turn into a connection afterwards either.
  await new Promise((resolve) => setTimeout(resolve, 100));
  t.notOk(socket.connected, `${what}: still not connected`);
  t.equal(await connectedSockets(served.app), before, `${what}: the service holds no socket for it`);
}

t.test(
  'realtime handshakes with CORS_ORIGINS: listed origins, the service its own and non-browsers connect',
  async (t) => {
    const served = await socketApp(t, LISTED);
    await assertConnects(t, served, undefined, 'no Origin');
    await assertConnects(t, served, APP_ORIGIN, 'a listed origin');
    await assertConnects(t, served, 'https://other.example', 'the other listed origin');
    await assertConnects(t, served, served.url, "the service's own origin");
    t.equal(await connectedSockets(served.app), 4, 'four sockets connected');
    await assertRefused(t, served, 'http://evil.test', 'another site');
    await assertRefused(t, served, 'http://APP.test:5173', 'a listed origin in other case');
    await assertRefused(t, served, 'http://app.test:5173/', 'a listed origin with a slash');
    await assertRefused(t, served, 'null', 'an opaque origin');
    // A page reached through DNS rebinding sends its own name in both Origin and Host.
    const rebound = `rebound.test:${served.port}`;
    await assertRefused(t, served, `http://${rebound}`, 'an Origin that matches only the Host', rebound);
    t.equal(await connectedSockets(served.app), 4, 'still the four sockets');
  },
);

t.test('realtime handshakes without CORS_ORIGINS: only no Origin or the service its own', async (t) => {
  const served = await socketApp(t, {});
  await assertConnects(t, served, undefined, 'no Origin');
  await assertConnects(t, served, served.url, "the service's own origin");
  await assertRefused(t, served, 'http://evil.test', 'another site');
  await assertRefused(t, served, APP_ORIGIN, 'an origin that is listed nowhere');
  const rebound = `rebound.test:${served.port}`;
  await assertRefused(t, served, `http://${rebound}`, 'an Origin that matches only the Host', rebound);
});

t.test("socketOriginAllowed: no Origin, a listed one or PUBLIC_URL's, compared exactly", async (t) => {
  const config = { corsOrigins: [APP_ORIGIN], publicUrl: 'https://api.example.com' };
  const allowed = (origin: string | undefined) => socketOriginAllowed(config, origin);
  t.ok(allowed(undefined), 'no Origin (not a browser)');
  t.ok(allowed(APP_ORIGIN), 'a listed origin');
  t.ok(allowed('https://api.example.com'), "PUBLIC_URL's origin");
  t.ok(
    socketOriginAllowed({ corsOrigins: [], publicUrl: 'https://example.com/accounts' }, 'https://example.com'),
    'the origin of a PUBLIC_URL with a path',
  );
  t.notOk(allowed('http://api.example.com'), "PUBLIC_URL's host with another scheme");
  t.notOk(allowed('https://api.example.com:8443'), "PUBLIC_URL's host on another port");
  t.notOk(allowed('https://evil.api.example.com'), "a subdomain of PUBLIC_URL's host");
  t.notOk(allowed('https://api.example.com.evil.test'), "PUBLIC_URL's host as a prefix");
  t.notOk(allowed('https://API.example.com'), "PUBLIC_URL's host in other case (browsers send it lower-case)");
  t.notOk(allowed('https://api.example.com/'), "PUBLIC_URL's origin with a slash");
  t.notOk(allowed('http://evil.test'), 'another site');
  t.notOk(allowed('http://APP.test:5173'), 'a listed origin in other case');
  t.notOk(allowed('http://app.test:5173/'), 'a listed origin with a trailing slash');
  t.notOk(allowed('null'), 'an opaque origin');
  t.notOk(allowed(''), 'an empty Origin');
  t.notOk(allowed('not a url'), 'not a URL');
  t.notOk(
    socketOriginAllowed({ corsOrigins: [], publicUrl: 'http://127.0.0.1:7130' }, APP_ORIGIN),
    "nothing listed: a browser origin other than the service's own",
  );
});

t.test('a session answer and a logout expire the variants of other cookie settings', async (t) => {
  /** The variants a set of Set-Cookie lines expires: domain (or host-only) and partitioned or not. */
  // The variants under other settings, on the cookie's own path (the lines on the longer paths
  // under /api/auth are the defence against planted cookies: test/refresh-cookie-tossing.test.ts).
  const expired = (res: LightMyRequestResponse) =>
    refreshCookies(res)
      .filter((c) => c.value === '' && c.attributes.get('max-age') === '0' && c.attributes.get('path') === '/api/auth')
      .map(
        (c) =>
          `${c.attributes.get('domain') ?? 'host-only'} ${c.attributes.has('partitioned') ? 'partitioned' : 'unpartitioned'}`,
      )
      .sort();

  const plain = await webSignIn(t, {});
  t.same(expired(plain.res), ['host-only partitioned'], 'default: the SameSite=None variant is expired');
  const partitionedLine = refreshCookies(plain.res).find((c) => c.value === '');
  t.equal(partitionedLine?.attributes.get('samesite'), 'None', 'with SameSite=None, as it must have been set');
  t.ok(partitionedLine?.attributes.has('secure'), 'and Secure');

  const env = { COOKIE_SAMESITE: 'none', COOKIE_DOMAIN: 'example.com', PUBLIC_URL: 'https://api.example.com' };
  const { app, res, cookie, csrfToken } = await webSignIn(t, env);
  t.same(
    expired(res),
    ['example.com unpartitioned', 'host-only partitioned', 'host-only unpartitioned'],
    'COOKIE_DOMAIN and SameSite=None: the three other variants are expired',
  );
  t.equal(cookie.attributes.get('domain'), 'example.com', 'the cookie itself');
  const wire = setCookieHeaders(res).filter((line) => line.startsWith('refresh_token='));
  t.equal(
    wire.at(-1),
    cookie.line,
    'comes last on the wire, after the expiries (a browser without partitions ends with it)',
  );
  const logout = await webLogout(app, cookie.value, csrfToken);
  t.equal(logout.statusCode, 204);
  t.same(
    expired(logout),
    ['example.com partitioned', 'example.com unpartitioned', 'host-only partitioned', 'host-only unpartitioned'],
    'logout expires all four',
  );
});
