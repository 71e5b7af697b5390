// Security headers: Cache-Control: no-store on every answer that may carry a token, a code or a
// CSRF token (all of /api/auth/ and the verification page) and on every error answer whatever its
// path (including those written outside Fastify), X-Content-Type-Options: nosniff on all.
import type { AddressInfo } from 'node:net';
import fastifyRateLimit from '@fastify/rate-limit';
import Fastify, { type FastifyReply, type LightMyRequestResponse } from 'fastify';
import t, { type Test } from 'tap';
import { applySecurityHeaders, registerSecurityHeaders } from '../src/security-headers.ts';
import { buildTestApp } from './helpers/app.ts';
import { buildAuthTestApp, newEmail, PASSWORD, refreshCookies, wrongCode } from './helpers/auth.ts';
import { type RawOutcome, rawRequest } from './helpers/raw-http.ts';

/**
 * Paths that read like an auth path to some proxy, cache or eye: most reach no route (404); a
 * trailing slash reaches the route, and a client that resolves dot segments sends the route's path.
 */
const AUTH_PATH_TRICKS = [
  '//api/auth/sessions/current',
  '/API/AUTH/SESSIONS/CURRENT',
  '/Api/Auth/sessions/current',
  '/api/auth%2Fsessions/current',
  '/api%2Fauth/sessions/current',
  '/api/auth;x/sessions/current',
  '/api/auth/sessions/current;x',
  '/api/./auth/sessions/current',
  '/api/auth/sessions/current/',
];

function assertNoStore(t: Test, res: LightMyRequestResponse, what: string, status?: number) {
  if (status !== undefined) t.equal(res.statusCode, status, `${what}: status ${status}`);
  t.match(String(res.headers['cache-control'] ?? ''), /(^|,\s*)no-store(\s*,|$)/, `${what}: Cache-Control: no-store`);
  t.equal(res.headers['x-content-type-options'], 'nosniff', `${what}: X-Content-Type-Options: nosniff`);
}

function assertNosniff(t: Test, res: LightMyRequestResponse, what: string, status: number) {
  t.equal(res.statusCode, status, `${what}: status ${status}`);
  t.equal(res.headers['x-content-type-options'], 'nosniff', `${what}: X-Content-Type-Options: nosniff`);
}

/** An answer read off a socket: the status, no-store and nosniff. */
function assertRawNoStore(t: Test, outcome: RawOutcome, what: string, status?: number) {
  if (outcome.kind !== 'answer') {
    t.fail(`${what}: the connection closed without an answer (${outcome.error})`);
    return;
  }
  const { response } = outcome;
  if (status !== undefined) t.equal(response.status, status, `${what}: status ${status}`);
  t.equal(response.headers['cache-control'], 'no-store', `${what}: Cache-Control: no-store`);
  t.equal(response.headers['x-content-type-options'], 'nosniff', `${what}: X-Content-Type-Options: nosniff`);
}

t.test('the hooks on a bare Fastify: every answer, errors and framework errors included', async (t) => {
  const app = Fastify({
    // No hook runs for these: the app's frameworkErrors sets the headers itself, as here.
    frameworkErrors: (_err, request, reply: FastifyReply) => {
      applySecurityHeaders(request, reply);
      void reply.code(400).send({ error: 'INVALID_INPUT' });
    },
  });
  registerSecurityHeaders(app, { publicUrl: 'http://127.0.0.1:7130' });
  await app.register(fastifyRateLimit, { global: false });
  app.post('/api/auth/sessions', { config: { rateLimit: { max: 1, timeWindow: 60_000 } } }, async () => ({ ok: 1 }));
  app.get('/api/auth/cached', async (_request, reply) => reply.header('cache-control', 'public, max-age=600').send({}));
  app.get('/api/auth/fails', async () => {
    throw new Error('boom');
  });
  app.get('/auth/verify-email', async () => 'page');
  app.get('/api/health', async () => ({ ok: true }));
  app.get('/api/conflict', async (_request, reply) =>
    reply.code(409).header('cache-control', 'public, max-age=600').send({ error: 'CONFLICT' }),
  );
  app.get('/api/fails', async () => {
    throw new Error('boom');
  });
  t.teardown(() => app.close());

  assertNoStore(t, await app.inject({ method: 'POST', url: '/api/auth/sessions' }), 'an auth answer', 200);
  assertNoStore(t, await app.inject({ method: 'POST', url: '/api/auth/sessions' }), 'a rate-limited one', 429);
  assertNoStore(t, await app.inject({ url: '/api/auth/cached' }), 'one whose handler asked for caching', 200);
  t.notMatch(String((await app.inject({ url: '/api/auth/cached' })).headers['cache-control']), /public|max-age/);
  assertNoStore(t, await app.inject({ url: '/api/auth/fails' }), 'a failure', 500);
  assertNoStore(t, await app.inject({ url: '/api/auth/nothing-here' }), 'a 404 under /api/auth/', 404);
  assertNoStore(t, await app.inject({ url: '/api/%61uth/cached' }), 'a percent-encoded auth path', 200);
  assertNoStore(t, await app.inject({ url: '/auth/verify-email?token=abc' }), 'the verification page', 200);
  const health = await app.inject({ url: '/api/health' });
  assertNosniff(t, health, 'another answer', 200);
  t.equal(health.headers['cache-control'], undefined, 'other answers keep their caching as it is');
  assertNosniff(t, await app.inject({ url: '/api/health', method: 'HEAD' }), 'a HEAD', 200);
  assertNoStore(t, await app.inject({ url: '/api/auth/%' }), 'a framework error under /api/auth/', 400);

  // Every error answer, whatever its path: no path trick can leave one out.
  assertNoStore(t, await app.inject({ url: '/nothing' }), 'a 404 elsewhere', 404);
  assertNoStore(t, await app.inject({ url: '/api/%' }), 'a framework error elsewhere', 400);
  assertNoStore(t, await app.inject({ url: '/api/fails' }), 'a failure elsewhere', 500);
  const conflict = await app.inject({ url: '/api/conflict' });
  assertNoStore(t, conflict, 'an error whose handler asked for caching', 409);
  t.notMatch(String(conflict.headers['cache-control']), /public|max-age/);
  assertNoStore(t, await app.inject({ method: 'DELETE', url: '/api/health' }), 'a wrong method elsewhere', 404);
  for (const url of AUTH_PATH_TRICKS) {
    assertNoStore(t, await app.inject({ url: url.replace('sessions/current', 'cached') }), url);
  }
});

t.test('every auth operation answers with Cache-Control: no-store, successes and errors', async (t) => {
  const { app, signUp, verify, sendVerification, current, firstMail, clock } = await buildAuthTestApp(t, {
    label: 'headers',
  });
  const email = newEmail('headers');
  assertNoStore(t, await signUp(email), 'sign-up (verification required)', 202);
  const mail = await firstMail(email);
  assertNoStore(t, await verify({ email, otp: wrongCode(mail.code ?? '000000') }), 'verify with a wrong code', 400);
  assertNoStore(t, await verify({ email, otp: mail.code }), 'verify', 200);
  assertNoStore(t, await sendVerification(email), 'send-verification', 202);
  assertNoStore(t, await sendVerification('not an address'), 'send-verification of a malformed address', 400);

  const signIn = (password: string, client = 'mobile') =>
    app.inject({ method: 'POST', url: `/api/auth/sessions?client_type=${client}`, payload: { email, password } });
  assertNoStore(t, await signIn('wrong password'), 'sign-in with a wrong password', 401);
  const mobile = await signIn(PASSWORD);
  assertNoStore(t, mobile, 'sign-in (mobile)', 200);
  const { accessToken, refreshToken } = mobile.json() as { accessToken: string; refreshToken: string };
  assertNoStore(t, await current(accessToken), 'sessions/current', 200);
  assertNoStore(t, await current('not-a-token'), 'sessions/current without a valid token', 401);

  const refreshed = await app.inject({
    method: 'POST',
    url: '/api/auth/refresh?client_type=mobile',
    payload: { refreshToken },
  });
  assertNoStore(t, refreshed, 'refresh (mobile)', 200);
  // Past the reuse interval (REFRESH_TOKEN_REUSE_INTERVAL_SECONDS), a rotated token is refused.
  clock.advance(11);
  assertNoStore(
    t,
    await app.inject({ method: 'POST', url: '/api/auth/refresh?client_type=mobile', payload: { refreshToken } }),
    'refresh with a retired token',
    401,
  );

  const web = await signIn(PASSWORD, 'web');
  assertNoStore(t, web, 'sign-in (web, with the CSRF token)', 200);
  const cookie = refreshCookies(web)[0]?.value ?? '';
  const csrf = (web.json() as { csrfToken: string }).csrfToken;
  const webRefresh = (csrfToken: string) =>
    app.inject({
      method: 'POST',
      url: '/api/auth/refresh?client_type=web',
      cookies: { refresh_token: cookie },
      headers: { 'x-csrf-token': csrfToken },
    });
  assertNoStore(t, await webRefresh('not-the-csrf-token'), 'web refresh without the CSRF token', 403);
  const rotated = await webRefresh(csrf);
  assertNoStore(t, rotated, 'refresh (web)', 200);

  const other = (await signIn(PASSWORD)).json() as { refreshToken: string };
  const logout = () =>
    app.inject({
      method: 'POST',
      url: '/api/auth/logout?client_type=mobile',
      payload: { refreshToken: other.refreshToken },
    });
  assertNoStore(t, await logout(), 'logout', 204);
  assertNoStore(t, await logout(), 'logout of an ended session');
  assertNoStore(
    t,
    await app.inject({ method: 'POST', url: '/api/auth/password', payload: {} }),
    'change password without a token',
  );
  assertNoStore(t, await app.inject({ url: '/api/auth/users' }), 'the directory (a GET under /api/auth/)');
  assertNoStore(
    t,
    await app.inject({
      method: 'POST',
      url: '/api/auth/sessions',
      headers: { 'content-type': 'text/plain' },
      payload: 'x',
    }),
    'an undeclared content type',
    415,
  );
  assertNoStore(t, await app.inject({ url: '/api/auth/no-such-thing' }), 'an unknown auth path', 404);
  assertNoStore(t, await app.inject({ method: 'DELETE', url: '/api/auth/refresh' }), 'a wrong method', 405);
  assertNoStore(t, await app.inject({ url: '/api/auth/%' }), 'a path that cannot be decoded', 400);
  assertNoStore(t, await app.inject({ url: '/api/auth/sessions/current%ff' }), 'a path of bad UTF-8', 400);
  // A path of DELETE /api/auth/sessions/{sessionId} (the only method it takes): 405.
  assertNoStore(t, await app.inject({ url: '/api/auth/sessions/current\xff' }), 'a path with a raw byte 0xff', 405);
  for (const url of AUTH_PATH_TRICKS) {
    const res = await app.inject({ url, headers: { authorization: `Bearer ${accessToken}` } });
    assertNoStore(t, res, `${url} (${res.statusCode})`);
  }

  const page = await app.inject({ url: `/auth/verify-email?token=${mail.token}` });
  assertNoStore(t, page, 'the verification page', 200);
  const confirmed = await app.inject({
    method: 'POST',
    url: '/auth/verify-email',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    payload: `token=${mail.token}`,
  });
  assertNoStore(t, confirmed, `the verification page, posted (${confirmed.statusCode})`);
});

t.test('sign-up that opens a session at once (201) is not cached either', async (t) => {
  const { signUp } = await buildAuthTestApp(t, {
    label: 'headers-201',
    env: { REQUIRE_EMAIL_VERIFICATION: 'false' },
  });
  const res = await signUp(newEmail('headers-201'), {}, '?client_type=mobile');
  assertNoStore(t, res, 'sign-up (signed in at once)', 201);
  t.type((res.json() as { accessToken?: unknown }).accessToken, 'string', 'the answer carries a token');
});

t.test('a rate-limited auth answer is not cached either', async (t) => {
  const { app } = await buildAuthTestApp(t, {
    label: 'headers-429',
    generousRateLimits: false,
    env: { RATE_LIMIT_SIGN_IN: '1' },
  });
  const signIn = () =>
    app.inject({
      method: 'POST',
      url: '/api/auth/sessions?client_type=mobile',
      payload: { email: newEmail('limited'), password: PASSWORD },
    });
  assertNoStore(t, await signIn(), 'a refused sign-in', 401);
  assertNoStore(t, await signIn(), 'a rate-limited sign-in', 429);
});

t.test('every other answer has X-Content-Type-Options: nosniff, and no-store when it is an error', async (t) => {
  const { app } = await buildTestApp(t);
  assertNosniff(t, await app.inject({ url: '/api/health' }), 'health', 200);
  assertNoStore(t, await app.inject({ url: '/no/such/path' }), 'an unknown path', 404);
  assertNoStore(t, await app.inject({ method: 'PUT', url: '/api/health' }), 'a wrong method', 405);
  assertNoStore(
    t,
    await app.inject({ method: 'POST', url: '/api/ai/embeddings', payload: { model: 'x', input: 'hello' } }),
    'embeddings without a token',
    401,
  );
  assertNoStore(
    t,
    await app.inject({
      method: 'POST',
      url: '/api/ai/embeddings',
      headers: { authorization: 'Bearer not.a.token' },
      payload: { input: 'hello' },
    }),
    'embeddings with a bad token',
    401,
  );
  assertNosniff(t, await app.inject({ url: '/openapi.json' }), 'the contract as JSON', 200);
  assertNosniff(t, await app.inject({ url: '/openapi.yaml' }), 'the contract as YAML', 200);
  assertNosniff(t, await app.inject({ url: '/docs/json' }), 'the docs JSON', 200);
  assertNosniff(t, await app.inject({ url: '/docs' }), 'the docs page', 200);
  assertNosniff(t, await app.inject({ url: '/docs/static/index.css' }), 'a file of the docs page', 200);
  assertNoStore(
    t,
    await app.inject({
      method: 'POST',
      url: '/api/realtime/messages',
      headers: { 'content-type': 'application/xml' },
      payload: '<x/>',
    }),
    'an undeclared content type (after the token check)',
    401,
  );
  assertNoStore(
    t,
    await app.inject({
      method: 'POST',
      url: '/api/auth/users',
      headers: { 'content-type': 'application/xml' },
      payload: '<x/>',
    }),
    'an undeclared content type',
    415,
  );
  assertNoStore(t, await app.inject({ url: '/api/%' }), 'a path that cannot be decoded', 400);
  assertNoStore(t, await app.inject({ url: '/api/health%ff' }), 'a path of bad UTF-8', 400);
  t.equal((await app.inject({ url: '/api/health' })).headers['cache-control'], undefined, 'health is not no-store');
  t.equal((await app.inject({ url: '/openapi.json' })).headers['cache-control'], undefined, 'nor the contract');
});

t.test('answers written outside Fastify are not cached either', async (t) => {
  // A headers timeout short enough to see the 408 within the test (a whole request arrives at once).
  const { app } = await buildTestApp(t, { env: { HTTP_HEADERS_TIMEOUT_MS: '500', HTTP_REQUEST_TIMEOUT_MS: '500' } });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address() as AddressInfo;
  /** A GET of `path` (bytes as given) with `headers` (each line ending in CRLF), read off a new connection. */
  const request = (path: string | Buffer, headers = 'Host: x\r\n') =>
    rawRequest(
      port,
      Buffer.concat([
        Buffer.from('GET '),
        Buffer.from(path),
        Buffer.from(` HTTP/1.1\r\n${headers}Connection: close\r\n\r\n`),
      ]),
      10_000,
    );

  const big = `Host: x\r\nX-Filler: ${'a'.repeat(20 * 1024)}\r\n`;
  assertRawNoStore(t, await request('/api/auth/sessions/current', big), 'headers too large for an auth path', 431);
  assertRawNoStore(t, await request('/api/health', big), 'headers too large elsewhere', 431);
  const invalid = 'Host: x\r\nNot a header line\r\n';
  assertRawNoStore(t, await request('/api/auth/sessions/current', invalid), 'not valid HTTP, an auth path', 400);
  assertRawNoStore(t, await request('/api/health', invalid), 'not valid HTTP elsewhere', 400);
  const rawByte = Buffer.concat([Buffer.from('/api/auth/sessions/current'), Buffer.from([0xff])]);
  assertRawNoStore(t, await request(rawByte), 'a raw byte 0xff in an auth path', 400);
  assertRawNoStore(t, await request('/api/auth/sessions/current', ''), 'an auth path without Host', 400);
  assertRawNoStore(t, await request('/api/auth/sessions/current%ff'), 'an auth path of bad UTF-8', 400);
  const unfinished = Buffer.from('GET /api/auth/sessions/current HTTP/1.1\r\nHost: x\r\n');
  assertRawNoStore(t, await rawRequest(port, unfinished, 10_000), 'headers that never end', 408);
  for (const path of AUTH_PATH_TRICKS) assertRawNoStore(t, await request(path), `${path} over a socket`);
  const health = await request('/api/health');
  t.equal(health.kind === 'answer' && health.response.status, 200, 'health is answered');
  t.equal(health.kind === 'answer' && health.response.headers['cache-control'], undefined, 'and not no-store');
});

/** A Content-Security-Policy's directives by name (values joined by single spaces). */
function cspOf(res: LightMyRequestResponse): Map<string, string> {
  const directives = new Map<string, string>();
  for (const part of String(res.headers['content-security-policy'] ?? '').split(';')) {
    const [name, ...values] = part.trim().split(/\s+/);
    if (name) directives.set(name.toLowerCase(), values.join(' '));
  }
  return directives;
}

t.test('helmet: CSPs, no framing, no referrer; HSTS only on an https PUBLIC_URL', async (t) => {
  const { app } = await buildTestApp(t);
  const token = 'ab'.repeat(32);

  const health = await app.inject({ url: '/api/health' });
  t.equal(health.statusCode, 200);
  const api = cspOf(health);
  t.equal(api.get('default-src'), "'none'", "JSON: default-src 'none'");
  t.equal(api.get('frame-ancestors'), "'none'", "JSON: frame-ancestors 'none'");
  t.notOk(api.has('script-src'), 'JSON: no script-src');
  t.equal(health.headers['x-frame-options'], 'DENY', 'X-Frame-Options: DENY');
  t.equal(health.headers['referrer-policy'], 'no-referrer', 'Referrer-Policy: no-referrer');
  t.equal(health.headers['strict-transport-security'], undefined, 'no HSTS on a plain-http PUBLIC_URL');
  const error = await app.inject({ url: '/api/auth/sessions/current' });
  t.equal(error.statusCode, 401);
  t.equal(cspOf(error).get('default-src'), "'none'", 'an error answer has the JSON CSP too');
  t.equal(error.headers['x-frame-options'], 'DENY', 'and X-Frame-Options: DENY');

  const verifyPage = await app.inject({ url: `/auth/verify-email?token=${token}` });
  t.equal(verifyPage.statusCode, 200, 'the verification page');
  const verifyCsp = cspOf(verifyPage);
  // A page that runs a script of this origin calling the API (as in fe56e2e) needs script-src and
  // connect-src 'self'; a page without script (a form posted back) must allow none.
  if (/<script\b/i.test(verifyPage.body)) {
    t.equal(verifyCsp.get('script-src'), "'self'", "verification page with its script: script-src 'self'");
    t.equal(verifyCsp.get('connect-src'), "'self'", "verification page with its script: connect-src 'self'");
  } else {
    t.notOk(verifyCsp.has('script-src'), 'verification page without script: no script-src');
    t.equal(verifyCsp.get('form-action'), "'self'", "verification page without script: form-action 'self'");
  }
  t.equal(verifyCsp.get('frame-ancestors'), "'none'", "verification page: frame-ancestors 'none'");
  t.equal(verifyCsp.get('default-src'), "'none'", "verification page: default-src 'none'");
  t.equal(
    verifyPage.headers['referrer-policy'],
    'no-referrer',
    'verification page: no referrer (its URL has the token)',
  );
  t.equal(verifyPage.headers['x-frame-options'], 'DENY', 'verification page: X-Frame-Options: DENY');

  // An unknown token: the page refuses it before its form, under the same headers as the form.
  const resetPage = await app.inject({ url: `/auth/reset-password?token=${token}` });
  t.equal(resetPage.statusCode, 400, 'the reset-password page');
  const form = cspOf(resetPage);
  t.notOk(form.has('script-src'), 'reset page: no script-src (no script may run)');
  t.equal(form.get('default-src'), "'none'", "reset page: default-src 'none' (so scripts are refused)");
  t.equal(form.get('form-action'), "'self'", "reset page: form-action 'self'");
  t.equal(form.get('frame-ancestors'), "'none'", "reset page: frame-ancestors 'none'");
  t.equal(resetPage.headers['referrer-policy'], 'no-referrer', 'reset page: no referrer');

  let docs = await app.inject({ url: '/docs/' });
  for (let hops = 0; docs.statusCode >= 300 && docs.statusCode < 400 && hops < 3; hops++) {
    docs = await app.inject({ url: String(docs.headers.location) });
  }
  t.equal(docs.statusCode, 200, 'the docs page');
  t.match(String(docs.headers['content-type']), /^text\/html/);
  const docsCsp = cspOf(docs);
  t.equal(docsCsp.get('script-src'), "'self'", "docs: script-src 'self'");
  t.equal(docsCsp.get('connect-src'), "'self'", "docs: connect-src 'self' (Try it out)");
  t.equal(docsCsp.get('frame-ancestors'), "'none'", "docs: frame-ancestors 'none'");
  t.equal(docsCsp.get('default-src'), "'none'", "docs: default-src 'none'");
  t.equal(docs.headers['x-frame-options'], 'DENY', 'docs: X-Frame-Options: DENY');

  // HSTS when PUBLIC_URL is https: a year, this host only.
  const https = await buildTestApp(t, { env: { PUBLIC_URL: 'https://api.example.com' } });
  const secured = await https.app.inject({ url: '/api/health' });
  const hsts = String(secured.headers['strict-transport-security'] ?? '');
  t.match(hsts, /(^|;\s*)max-age=31536000(\s*;|$)/, `HSTS max-age=31536000 (${hsts})`);
  t.notMatch(hsts, /includesubdomains/i, 'HSTS without includeSubDomains');
  t.notMatch(hsts, /preload/i, 'HSTS without preload');
  const page = await https.app.inject({ url: `/auth/reset-password?token=${'cd'.repeat(32)}` });
  t.equal(page.headers['strict-transport-security'], hsts, 'HSTS on pages too');
});
