/**
 * The shared harness of the browser tests: Debian's Chromium driven by playwright-core (never a
 * downloaded browser), the service on 127.0.0.1 and a tiny app on `localhost` (another site, so
 * every API call the app makes is cross-site), with InsForge's SDK and the project's own SDK bundled
 * for the browser by esbuild.
 *
 * The browser runs a persistent (default) profile, as a person's browser does: third-party cookies
 * are blocked there, which is what the service's `SameSite=None; Secure; Partitioned` refresh cookie
 * has to survive.
 */
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { createClient as createInsforgeClient } from '@insforge/sdk';
import { build } from 'esbuild';
import type { FastifyInstance } from 'fastify';
import { type BrowserContext, chromium, type Page } from 'playwright-core';
import type { createClient as createOwnClient } from '../../src/client/index.ts';
import type { Env } from '../../src/config.ts';
import { buildTestApp, type TestApp } from './app.ts';
import { type SmtpCapture, startSmtpCapture } from './smtp.ts';

interface Teardown {
  teardown(fn: () => unknown): void;
}

/** How long any wait in a browser test may take. */
export const WAIT_MS = 15_000;

/** Where Chromium is: CHROMIUM_PATH, else Debian's /usr/bin/chromium. */
export const chromiumPath = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/**
 * `false` when Chromium is installed; otherwise the reason to skip the file's tests. In CI a missing
 * Chromium is an error, not a skip (the tests would silently stop proving anything).
 */
export function browserSkip(): false | string {
  if (existsSync(chromiumPath)) return false;
  if (process.env.CI) {
    throw new Error(
      `Chromium is not installed at ${chromiumPath} (CI is set, so the browser tests fail instead of skipping): apt-get install -y chromium, or set CHROMIUM_PATH`,
    );
  }
  return 'Chromium is not installed (apt-get install -y chromium)';
}

/** `contents` (TypeScript importing from the repository's packages) bundled for a browser page, as one script. */
export async function bundle(contents: string): Promise<string> {
  const result = await build({
    stdin: { contents, resolveDir: process.cwd(), loader: 'ts', sourcefile: 'entry.ts' },
    bundle: true,
    format: 'iife',
    platform: 'browser',
    target: 'es2022',
    write: false,
    logLevel: 'silent',
    // The SDK's Node fallback for Web Crypto (`await import('crypto')`) is never reached in a browser.
    external: ['crypto'],
  });
  return result.outputFiles[0]?.text ?? '';
}

let bundling: Promise<{ insforge: string; own: string }> | undefined;
/** InsForge's SDK as `window.insforge`, this project's as `window.ownSdk`: bundled once per test file. */
function bundles() {
  bundling ??= Promise.all([
    bundle(`import { createClient } from '@insforge/sdk'; (window as any).insforge = { createClient };`),
    bundle(`import { createClient } from './src/client/index.ts'; (window as any).ownSdk = { createClient };`),
  ]).then(([insforge, own]) => ({ insforge, own }));
  return bundling;
}

/**
 * The app page. It knows the service's origin (`window.SERVICE`), loads both SDKs, and keeps a log
 * (`window.log(line)`) in sessionStorage, shown in `<pre id="log">`, so that it survives reloads and
 * the screenshot of the end state tells what happened.
 */
function appPage(serviceOrigin: string, title: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>${title}</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #1f2328; }
  code, pre { font-family: ui-monospace, monospace; }
  pre#log { background: #f6f8fa; border: 1px solid #d0d7de; border-radius: 6px; padding: 0.8rem; white-space: pre-wrap; }
</style>
</head>
<body>
<h1>${title}</h1>
<p>This page: <code id="origin"></code> · service: <code id="service"></code></p>
<pre id="log"></pre>
<script>
  window.SERVICE = ${JSON.stringify(serviceOrigin)};
  document.getElementById('origin').textContent = location.origin + location.pathname;
  document.getElementById('service').textContent = window.SERVICE;
  window.log = function (line) {
    var lines = JSON.parse(sessionStorage.getItem('log') || '[]');
    lines.push(String(line));
    sessionStorage.setItem('log', JSON.stringify(lines));
    document.getElementById('log').textContent = lines.join('\\n');
  };
  document.getElementById('log').textContent = JSON.parse(sessionStorage.getItem('log') || '[]').join('\\n');
  // An SDK error as plain data (an Error does not cross page.evaluate with its fields).
  window.plain = function (error) {
    if (!error) return null;
    return { name: error.name, statusCode: error.statusCode, error: error.error, message: error.message };
  };
  // Logs the calls recorded since wire[from], as "METHOD STATUS [ERROR] → …".
  window.logWire = function (from) {
    window.log('  on the wire: ' + window.wire.slice(from).map(function (e) {
      return e.method + ' ' + e.path + ' ' + e.status + (e.error ? ' ' + e.error : '');
    }).join(' → '));
  };
  // A fetch that records every call to the service as it went and came back (status and error code).
  window.wire = [];
  window.recordingFetch = function (input, init) {
    var request = new Request(input, init);
    var entry = { method: request.method, path: new URL(request.url).pathname, status: 0, error: null };
    window.wire.push(entry);
    return fetch(request).then(function (response) {
      entry.status = response.status;
      if (response.ok) return response;
      return response.clone().json().then(function (body) { entry.error = body && body.error; }, function () {})
        .then(function () { return response; });
    }, function (err) { entry.error = String(err); throw err; });
  };
</script>
<script src="/insforge.js"></script>
<script src="/own.js"></script>
</body>
</html>
`;
}

/** A web app's origin: a node:http server on 127.0.0.1, opened as http://localhost:<port>. */
export interface AppServer {
  /** http://localhost:<port> */
  origin: string;
  /** The service's origin the page calls; set it once the service listens. */
  serviceOrigin: string;
}

/** Starts an app server serving its page at every path but the bundles; closed when `t` ends. */
export async function startAppServer(t: Teardown, title = 'Browser test app'): Promise<AppServer> {
  const code = await bundles();
  const state: AppServer = { origin: '', serviceOrigin: '' };
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    const js = url.pathname === '/insforge.js' ? code.insforge : url.pathname === '/own.js' ? code.own : undefined;
    if (js !== undefined) {
      res.writeHead(200, { 'content-type': 'text/javascript; charset=utf-8', 'cache-control': 'no-store' });
      res.end(js);
    } else if (url.pathname === '/favicon.ico') {
      res.writeHead(204).end();
    } else {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
      res.end(appPage(state.serviceOrigin, title));
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  state.origin = `http://localhost:${(server.address() as AddressInfo).port}`;
  t.teardown(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return state;
}

/** A request as it reached the service, and what the service answered. */
export interface Arrival {
  method: string;
  url: string;
  origin: string | undefined;
  /** Set when the answer has been sent. */
  status?: number;
  allowOrigin?: string;
}

/** The service, listening on 127.0.0.1, with its SMTP capture. */
export interface ServiceUnderTest extends TestApp {
  origin: string;
  smtp: SmtpCapture;
  /** Every request that reached the service's HTTP server: method, path and Origin header. */
  arrived: Arrival[];
}

/** Per-IP limits high enough for a test that makes every call from 127.0.0.1. */
const GENEROUS: Env = {
  RATE_LIMIT_VERIFY: '1000',
  RATE_LIMIT_SIGN_IN: '1000',
  RATE_LIMIT_SIGN_UP: '1000',
  RATE_LIMIT_SEND_VERIFICATION: '1000',
  RATE_LIMIT_REFRESH: '1000',
};

/**
 * A fresh service on a fresh database mailing to a local SMTP capture, listening on 127.0.0.1 at
 * `port` (0: any free one; a fixed one when PUBLIC_URL must name it beforehand).
 */
export async function startService(t: Teardown, env: Env, port = 0): Promise<ServiceUnderTest> {
  const smtp = await startSmtpCapture();
  t.teardown(() => smtp.close());
  const built = await buildTestApp(t, { env: { SMTP_URL: smtp.url, ...GENEROUS, ...env } });
  const arrived: ServiceUnderTest['arrived'] = [];
  built.app.server.on('request', (req, res) => {
    const arrival: Arrival = { method: req.method ?? '', url: req.url ?? '', origin: req.headers.origin };
    arrived.push(arrival);
    res.on('finish', () => {
      arrival.status = res.statusCode;
      const allow = res.getHeader('access-control-allow-origin');
      if (allow !== undefined) arrival.allowOrigin = String(allow);
    });
  });
  await built.app.listen({ port, host: '127.0.0.1' });
  const origin = `http://127.0.0.1:${(built.app.server.address() as AddressInfo).port}`;
  return { ...built, origin, smtp, arrived };
}

/** A browser response as the tests look at it. */
export interface SeenResponse {
  method: string;
  url: string;
  status: number;
  /** Set-Cookie lines (the raw header, split). */
  setCookie: string[];
}

/** Chromium with a fresh default profile and its first page; the browser and profile go when `t` ends. */
export interface BrowserUnderTest {
  context: BrowserContext;
  page: Page;
  /** Every response the page saw from `serviceOrigin` (set by watchService). */
  responses: SeenResponse[];
  /** Reading the responses' headers, still under way. */
  pending: Set<Promise<unknown>>;
  /** Console errors and uncaught page errors. */
  errors: string[];
}

export async function launchBrowser(t: Teardown): Promise<BrowserUnderTest> {
  const profile = await mkdtemp(path.join(tmpdir(), 'browser-test-profile-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--no-first-run',
    ],
    viewport: { width: 1100, height: 800 },
    timeout: WAIT_MS,
  });
  context.setDefaultTimeout(WAIT_MS);
  t.teardown(async () => {
    await context.close().catch(() => undefined);
    await rm(profile, { recursive: true, force: true });
  });
  const page = context.pages()[0] ?? (await context.newPage());
  const errors: string[] = [];
  page.on('console', (message) => {
    if (message.type() === 'error') errors.push(message.text());
  });
  page.on('pageerror', (error) => errors.push(`pageerror: ${error.message}`));
  return { context, page, responses: [], pending: new Set(), errors };
}

/** Records every response the page gets from `serviceOrigin`, with its Set-Cookie lines. */
export function watchService(browser: BrowserUnderTest, serviceOrigin: string): void {
  browser.page.on('response', (response) => {
    const url = response.url();
    if (!url.startsWith(serviceOrigin)) return;
    const entry: SeenResponse = { method: response.request().method(), url, status: response.status(), setCookie: [] };
    browser.responses.push(entry);
    const reading = response
      .headerValue('set-cookie')
      .then((header) => {
        if (header) entry.setCookie = header.split('\n');
      })
      .catch(() => undefined)
      .finally(() => browser.pending.delete(reading));
    browser.pending.add(reading);
  });
}

/** The responses seen for a method and path, once their headers have been read. */
export async function seen(browser: BrowserUnderTest, method: string, pathname: string): Promise<SeenResponse[]> {
  await Promise.all([...browser.pending]);
  return browser.responses.filter((r) => r.method === method && new URL(r.url).pathname === pathname);
}

/** The attributes of a Set-Cookie line, names lower-cased. */
export function cookieAttributes(line: string): Map<string, string> {
  const [, ...rest] = line.split(';').map((part) => part.trim());
  const attributes = new Map<string, string>();
  for (const attribute of rest) {
    const eq = attribute.indexOf('=');
    if (eq === -1) attributes.set(attribute.toLowerCase(), '');
    else attributes.set(attribute.slice(0, eq).toLowerCase(), attribute.slice(eq + 1));
  }
  return attributes;
}

/** An error as it comes out of the page. */
export interface PlainError {
  name?: string;
  statusCode?: number;
  error?: string;
  message?: string;
}

/** A call to the service made through the page's recordingFetch. */
export interface WireEntry {
  method: string;
  path: string;
  /** 0 when the browser refused or failed the request. */
  status: number;
  /** The error code of a failed answer, or the fetch's rejection. */
  error: string | null;
}

/** `METHOD /path STATUS[ ERROR]` lines, for comparing call sequences. */
export const wireLines = (wire: WireEntry[]) =>
  wire.map((w) => `${w.method} ${w.path} ${w.status}${w.error ? ` ${w.error}` : ''}`);

/**
 * What the app page offers the code that `page.evaluate` runs there. The tests' TypeScript has no
 * DOM library: inside evaluate, `globalThis as unknown as AppWindow` is the page's window.
 */
export interface AppWindow {
  insforge: { createClient: typeof createInsforgeClient };
  ownSdk: { createClient: typeof createOwnClient };
  /** The service's origin. */
  SERVICE: string;
  log(line: string): void;
  /** An SDK error (or any Error) as plain data. */
  plain(error: unknown): PlainError | null;
  /** Every call made through recordingFetch, in order. */
  wire: WireEntry[];
  /** Logs the calls recorded since `wire[from]` on the page. */
  logWire(from: number): void;
  /** A fetch that records its calls in `wire`. */
  recordingFetch: typeof fetch;
  location: { origin: string; href: string; search: string };
  document: { cookie: string };
  localStorage: { getItem(key: string): string | null; setItem(key: string, value: string): void };
  fetch: typeof fetch;
  [key: string]: unknown;
}

/** Waits until the app page (already opened, reloaded or navigated to) has both SDKs. */
async function appLoaded(page: Page): Promise<void> {
  await page.waitForFunction(() => {
    const w = globalThis as unknown as Partial<AppWindow>;
    return w.insforge !== undefined && w.ownSdk !== undefined;
  });
}

/** Opens the app page and waits until both SDKs are loaded. */
export async function openApp(page: Page, url: string): Promise<void> {
  await page.goto(url);
  await appLoaded(page);
}

/** Reloads the app page and waits until both SDKs are loaded again. */
export async function reloadApp(page: Page): Promise<void> {
  await page.reload();
  await appLoaded(page);
}

/** Saves a PNG of the page (the whole page, or what the viewport shows) under .tap/screenshots/<name>.png. */
export async function screenshot(page: Page, name: string, fullPage = true): Promise<string> {
  const dir = path.resolve('.tap', 'screenshots');
  await mkdir(dir, { recursive: true });
  const file = path.join(dir, `${name}.png`);
  await page.screenshot({ path: file, fullPage });
  return file;
}

/** The access-token lifetime the browser tests run with, so that a call meets an expired token soon. */
export const ACCESS_TOKEN_TTL_SECONDS = 2;

/**
 * Waits until an access token issued before the call has expired: its `exp` is a whole second at
 * most ACCESS_TOKEN_TTL_SECONDS ahead, and the service refuses it from that second on.
 */
export const untilAccessTokenExpired = () =>
  new Promise((resolve) => setTimeout(resolve, ACCESS_TOKEN_TTL_SECONDS * 1000 + 1100));

/** Signs an account in from Node (mobile) and returns its access token; throws unless 200. */
export async function signInFromNode(app: FastifyInstance, email: string, password: string): Promise<string> {
  const res = await app.inject({
    method: 'POST',
    url: '/api/auth/sessions?client_type=mobile',
    payload: { email, password },
  });
  if (res.statusCode !== 200) throw new Error(`sign-in of ${email}: ${res.statusCode} ${res.body}`);
  return (res.json() as { accessToken: string }).accessToken;
}

/**
 * The service's settings for a web app on other origins: they may call it with credentials, the
 * refresh cookie is `SameSite=None; Secure; Partitioned`, and access tokens expire soon.
 */
export function crossSiteEnv(appOrigins: string[]): Env {
  return {
    CORS_ORIGINS: appOrigins.join(','),
    COOKIE_SAMESITE: 'none',
    COOKIE_SECURE: 'true',
    ACCESS_TOKEN_TTL_SECONDS: String(ACCESS_TOKEN_TTL_SECONDS),
  };
}
