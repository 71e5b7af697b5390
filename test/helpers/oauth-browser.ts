/**
 * A scripted browser for OAuth tests: follows redirects with cookies, signs in on the OpenID
 * Provider's forms (oidc-provider's development interactions) and stops at the first URL the test
 * names, typically the service's callback, without requesting it.
 */
import { request } from 'undici';

interface StoredCookie {
  name: string;
  value: string;
  path: string;
  /** Epoch milliseconds; undefined for a session cookie. */
  expires: number | undefined;
}

/** Cookies per host:port, enough for the providers' session and interaction cookies (no domains, no Secure). */
export class CookieJar {
  readonly #hosts = new Map<string, Map<string, StoredCookie>>();

  /** Keeps (or deletes, when expired) the cookies of a response to `url`. */
  store(url: URL, setCookie: string | string[] | undefined): void {
    if (setCookie === undefined) return;
    let cookies = this.#hosts.get(url.host);
    if (!cookies) {
      cookies = new Map();
      this.#hosts.set(url.host, cookies);
    }
    for (const header of Array.isArray(setCookie) ? setCookie : [setCookie]) {
      const cookie = parseSetCookie(header, url);
      if (!cookie) continue;
      const key = `${cookie.name};${cookie.path}`;
      if (cookie.expires !== undefined && cookie.expires <= Date.now()) cookies.delete(key);
      else cookies.set(key, cookie);
    }
  }

  /** The live cookies a request to `url` carries. */
  cookies(url: URL): { name: string; value: string }[] {
    const now = Date.now();
    const found = [...(this.#hosts.get(url.host)?.values() ?? [])].filter(
      (c) => (c.expires === undefined || c.expires > now) && pathMatches(url.pathname, c.path),
    );
    // Longer paths first, as browsers send them.
    return found.sort((a, b) => b.path.length - a.path.length).map(({ name, value }) => ({ name, value }));
  }

  /** The Cookie header for a request to `url`, or undefined when there is none. */
  header(url: URL): string | undefined {
    const cookies = this.cookies(url);
    return cookies.length === 0 ? undefined : cookies.map((c) => `${c.name}=${c.value}`).join('; ');
  }
}

function parseSetCookie(header: string, url: URL): StoredCookie | undefined {
  const [pair = '', ...attributes] = header.split(';');
  const eq = pair.indexOf('=');
  if (eq <= 0) return undefined;
  const cookie: StoredCookie = {
    name: pair.slice(0, eq).trim(),
    value: pair.slice(eq + 1).trim(),
    path: url.pathname.slice(0, url.pathname.lastIndexOf('/')) || '/',
    expires: undefined,
  };
  let maxAge: number | undefined;
  for (const attribute of attributes) {
    const [rawName = '', ...rest] = attribute.split('=');
    const name = rawName.trim().toLowerCase();
    const value = rest.join('=').trim();
    if (name === 'path' && value.startsWith('/')) cookie.path = value;
    else if (name === 'max-age' && /^-?\d+$/.test(value)) maxAge = Number(value);
    else if (name === 'expires') cookie.expires = Date.parse(value) || undefined;
  }
  // Max-Age wins over Expires.
  if (maxAge !== undefined) cookie.expires = maxAge <= 0 ? 0 : Date.now() + maxAge * 1000;
  return cookie;
}

function pathMatches(requestPath: string, cookiePath: string): boolean {
  if (requestPath === cookiePath) return true;
  if (!requestPath.startsWith(cookiePath)) return false;
  return cookiePath.endsWith('/') || requestPath[cookiePath.length] === '/';
}

export interface FollowOptions {
  /** What the scripted user types into the login form (any login works on the test provider). */
  login: string;
  /** Where to stop: a URL prefix (typically the redirect_uri) or a predicate. The matching URL is not requested. */
  stopAt: string | ((url: URL) => boolean);
  /** Refuse on the consent page (the provider then redirects with error=access_denied). */
  deny?: boolean;
  /** Most requests to make before giving up; default 30. */
  maxSteps?: number;
  /** Cookies to start from and keep (a browser session that outlives one flow); default a fresh jar. */
  jar?: CookieJar;
}

export interface FollowResult {
  /** The first URL `stopAt` matched. */
  finalUrl: URL;
  /** How many HTTP requests were made. */
  requests: number;
  /** Every request as `METHOD url`, for diagnostics. */
  steps: string[];
}

interface PendingRequest {
  method: 'GET' | 'POST';
  url: URL;
  form?: URLSearchParams;
}

/** Follows an authorization URL as a browser and a compliant user would, up to `stopAt`. */
export async function followAuthorization(authUrl: string, options: FollowOptions): Promise<FollowResult> {
  const { stopAt, maxSteps = 30 } = options;
  const jar = options.jar ?? new CookieJar();
  const stop = typeof stopAt === 'string' ? (url: URL) => url.href.startsWith(stopAt) : stopAt;
  const steps: string[] = [];
  let next: PendingRequest = { method: 'GET', url: new URL(authUrl) };

  for (;;) {
    if (stop(next.url)) return { finalUrl: next.url, requests: steps.length, steps };
    if (steps.length >= maxSteps) {
      throw new Error(`followAuthorization: more than ${maxSteps} requests; last was ${steps.at(-1) ?? 'none'}`);
    }
    const step = `${next.method} ${next.url.href}`;
    steps.push(step);

    const headers: Record<string, string> = { accept: 'text/html,application/json;q=0.9,*/*;q=0.8' };
    const cookie = jar.header(next.url);
    if (cookie) headers.cookie = cookie;
    if (next.form) headers['content-type'] = 'application/x-www-form-urlencoded';
    const res = await request(next.url, {
      method: next.method,
      headers,
      ...(next.form ? { body: next.form.toString() } : {}),
    });
    jar.store(next.url, res.headers['set-cookie']);
    const body = await res.body.text();

    const location = res.headers.location;
    if (res.statusCode >= 300 && res.statusCode < 400 && typeof location === 'string') {
      next = { method: 'GET', url: new URL(location, next.url) };
      continue;
    }
    const page = res.statusCode === 200 ? nextFromPage(body, next.url, options) : undefined;
    if (!page) {
      throw new Error(`followAuthorization: unexpected ${res.statusCode} answer to ${step}: ${body.slice(0, 500)}`);
    }
    next = page;
  }
}

/** What the scripted user does on an HTML page: sign in, consent, or (deny) cancel. */
function nextFromPage(html: string, pageUrl: URL, options: FollowOptions): PendingRequest | undefined {
  const form = /<form\b([^>]*)>([\s\S]*?)<\/form>/i.exec(html);
  if (!form) return undefined;
  const action = new URL(decodeEntities(attribute(form[1] ?? '', 'action') ?? ''), pageUrl);
  const fields = new URLSearchParams();
  for (const [input] of (form[2] ?? '').matchAll(/<input\b[^>]*>/gi)) {
    const name = attribute(input, 'name');
    if (name !== undefined) fields.set(decodeEntities(name), decodeEntities(attribute(input, 'value') ?? ''));
  }
  const isLogin = fields.has('login');
  if (options.deny && !isLogin) {
    // oidc-provider's pages link "[ Cancel ]" to /interaction/:uid/abort.
    const abort = /<a\b[^>]*href="([^"]*\/abort)"/i.exec(html)?.[1];
    return abort === undefined ? undefined : { method: 'GET', url: new URL(decodeEntities(abort), pageUrl) };
  }
  if (isLogin) {
    fields.set('login', options.login);
    fields.set('password', 'any-password');
  }
  const method = (attribute(form[1] ?? '', 'method') ?? 'get').toUpperCase();
  if (method === 'POST') return { method: 'POST', url: action, form: fields };
  for (const [name, value] of fields) action.searchParams.set(name, value);
  return { method: 'GET', url: action };
}

function attribute(tag: string, name: string): string | undefined {
  return new RegExp(`\\b${name}\\s*=\\s*(?:"([^"]*)"|'([^']*)')`, 'i')
    .exec(tag)
    ?.slice(1)
    .find((v) => v !== undefined);
}

function decodeEntities(text: string): string {
  return text.replace(/&(amp|lt|gt|quot|#39|#x27);/g, (_, entity: string) => ENTITIES[entity] ?? '');
}

const ENTITIES: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', '#39': "'", '#x27': "'" };
