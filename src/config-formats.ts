// The formats of configuration values (src/config.ts declares which variable has which): each is a
// zod schema whose messages complete "<VARIABLE> …" in the one line a bad value stops the start with.
import { z } from 'zod';

/** A whole number from `min` to `max` (inclusive; no upper bound when Infinity), or `message`. */
export function wholeNumber(min: number, max: number, message: string) {
  const atLeast = z.coerce.number({ error: message }).int(message).min(min, message);
  return Number.isFinite(max) ? atLeast.max(max, message) : atLeast;
}

export const port = wholeNumber(1, 65535, 'must be a port number (1-65535)');
export const seconds = wholeNumber(1, Infinity, 'must be a whole number of seconds (at least 1)');
export const count = wholeNumber(1, Infinity, 'must be a whole number (at least 1)');

export function milliseconds(min: number, max: number) {
  return wholeNumber(min, max, `must be a whole number of milliseconds (${min} to ${max})`);
}

export const flag = z
  .enum(['true', 'false', '1', '0'], { error: 'must be true or false' })
  .transform((v) => v === 'true' || v === '1');

/** One of `values`, or `message`. */
export function oneOf<const T extends readonly [string, ...string[]]>(values: T, message: string) {
  return z.enum(values, { error: message });
}

export const httpUrl = z
  .string()
  .regex(/^https?:\/\/[^\s]+$/, 'must be an http:// or https:// URL')
  .transform((v) => v.replace(/\/+$/, ''));

export const databaseUrl = z
  .string()
  .trim()
  .refine((v) => v === 'memory://' || /^postgres(ql)?:\/\/.+/.test(v), {
    message: 'must be postgres://user:password@host:port/database or memory://',
  });

/** A PostgreSQL server (a replica: the embedded database has none). */
export const postgresUrl = z
  .string()
  .trim()
  .refine((v) => /^postgres(ql)?:\/\/.+/.test(v), { message: 'must be postgres://user:password@host:port/database' });

/** A comma-separated list whose entries `check` turns into values or rejects with a problem. */
function listOf<T>(check: (entry: string, all: string[]) => { value: T } | { problem: string }) {
  return z
    .string()
    .trim()
    .transform((v, ctx) => {
      const entries = v.split(/\s*,\s*/).filter((o) => o !== '');
      const values: T[] = [];
      for (const entry of entries) {
        const checked = check(entry, entries);
        if ('problem' in checked) {
          ctx.addIssue({ code: 'custom', message: checked.problem });
          return z.NEVER;
        }
        values.push(checked.value);
      }
      return values;
    });
}

/** Why a CORS_ORIGINS entry is not an exact origin as browsers send it, or undefined when it is one. */
function originProblem(origin: string): string | undefined {
  if (origin.includes('*') || origin === 'null') {
    return 'must list exact origins: a wildcard or "null" cannot be trusted with credentials';
  }
  const url = URL.parse(origin);
  if (url === null || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
    return 'must list origins such as https://app.example.com (http or https)';
  }
  if (url.origin !== origin) return `must list origins as browsers send them: write ${url.origin}`;
  // A host name (letters, digits, hyphens, dots), an IPv4 address or a bracketed IPv6 one.
  if (!/^([a-z0-9-]+\.)*[a-z0-9-]+$|^\[[0-9a-f:.]+\]$/.test(url.hostname)) {
    return 'must list origins whose host is a domain name or an IP address';
  }
  return undefined;
}

/** Exact browser origins, comma-separated (CORS_ORIGINS). */
export const origins = listOf((origin, all) => {
  const problem = originProblem(origin);
  if (problem === undefined) return { value: origin };
  return { problem: all.length > 1 ? `${problem}: ${JSON.stringify(origin)} is not` : problem };
});

/**
 * Origins (https://app.example.com) or URL prefixes (https://app.example.com/auth/,
 * com.example.app:/oauth), comma-separated, as they are compared (AUTH_REDIRECT_ALLOWLIST).
 */
export const redirectAllowlist = listOf((entry) => {
  const problem = (why: string) => ({ problem: `${why}: ${JSON.stringify(entry)} is not` });
  if (entry.includes('*')) return problem('must list origins or URL prefixes, without wildcards');
  const url = URL.parse(entry);
  if (url === null || url.username !== '' || url.password !== '' || url.hash !== '') {
    return problem('must list origins or URL prefixes such as https://app.example.com/auth/');
  }
  if ((url.protocol === 'http:' || url.protocol === 'https:') && url.origin === entry.replace(/\/$/, '')) {
    return { value: url.pathname === '/' && url.search === '' ? url.origin : url.href };
  }
  if (url.protocol === 'javascript:' || url.protocol === 'data:' || url.protocol === 'file:') {
    return problem(`must not list ${url.protocol} URLs`);
  }
  return { value: url.href };
});

/** Names separated by commas (EMBEDDINGS_MODELS). */
export const nameList = z
  .string()
  .trim()
  .regex(/^[^\s,]+(\s*,\s*[^\s,]+)*$/, 'must be a comma-separated list of model names')
  .transform((v) => v.split(/\s*,\s*/));

// X-Forwarded-For is written by the client; trusting all of it would let anyone pick their address.
// So `true` means one proxy in front (the address that proxy saw), and a number means that many.
/** Fastify's trustProxy: false, a hop count, or the proxies' addresses; never "trust every hop". */
export const trustProxy = z
  .string()
  .trim()
  .regex(
    /^(true|false|\d{1,2}|[0-9a-fA-F.:/]+(\s*,\s*[0-9a-fA-F.:/]+)*)$/,
    'must be false, true (one proxy), a number of proxies, or a comma-separated list of proxy addresses/CIDRs',
  )
  .transform((value): false | number | string => {
    if (value === 'false' || value === '0') return false;
    if (value === 'true') return 1;
    if (/^\d+$/.test(value)) return Number(value);
    return value;
  });

/** A cookie's Domain attribute: a domain name, lower-cased, without a leading dot. */
export const cookieDomain = z
  .string()
  .trim()
  .toLowerCase()
  .regex(
    /^\.?[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$/,
    'must be a domain name such as example.com (no scheme, port or path)',
  )
  .transform((v) => v.replace(/^\./, ''));
