import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { type OAuthProviderConfig, oauthProvidersFrom } from './auth/oauth/provider-config.ts';
import { secretWeakness } from './secret-strength.ts';

/** Thrown when the environment does not describe a runnable service; its message is one line naming the variable. */
export class ConfigError extends Error {
  override name = 'ConfigError';
}

const port = z.coerce
  .number({ error: 'must be a port number (1-65535)' })
  .int('must be a port number (1-65535)')
  .min(1, 'must be a port number (1-65535)')
  .max(65535, 'must be a port number (1-65535)');

const databaseUrl = z
  .string()
  .trim()
  .refine((v) => v === 'memory://' || /^postgres(ql)?:\/\/.+/.test(v), {
    message: 'must be postgres://user:password@host:port/database or memory://',
  });

const seconds = z.coerce
  .number({ error: 'must be a whole number of seconds (at least 1)' })
  .int('must be a whole number of seconds (at least 1)')
  .min(1, 'must be a whole number of seconds (at least 1)');

const count = z.coerce
  .number({ error: 'must be a whole number (at least 1)' })
  .int('must be a whole number (at least 1)')
  .min(1, 'must be a whole number (at least 1)');

function milliseconds(min: number, max: number) {
  const message = `must be a whole number of milliseconds (${min} to ${max})`;
  return z.coerce.number({ error: message }).int(message).min(min, message).max(max, message);
}

const flag = z
  .enum(['true', 'false', '1', '0'], { error: 'must be true or false' })
  .transform((v) => v === 'true' || v === '1');

const httpUrl = z
  .string()
  .regex(/^https?:\/\/[^\s]+$/, 'must be an http:// or https:// URL')
  .transform((v) => v.replace(/\/+$/, ''));

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

/**
 * An AUTH_REDIRECT_ALLOWLIST entry as it is compared: an origin (https://app.example.com) or a URL
 * prefix (https://app.example.com/auth/, com.example.app:/oauth), or a problem.
 */
function redirectEntry(entry: string): { entry: string } | { problem: string } {
  if (entry.includes('*')) return { problem: 'must list origins or URL prefixes, without wildcards' };
  const url = URL.parse(entry);
  if (url === null || url.username !== '' || url.password !== '' || url.hash !== '') {
    return { problem: 'must list origins or URL prefixes such as https://app.example.com/auth/' };
  }
  if ((url.protocol === 'http:' || url.protocol === 'https:') && url.origin === entry.replace(/\/$/, '')) {
    return url.pathname === '/' && url.search === '' ? { entry: url.origin } : { entry: url.href };
  }
  if (url.protocol === 'javascript:' || url.protocol === 'data:' || url.protocol === 'file:') {
    return { problem: `must not list ${url.protocol} URLs` };
  }
  return { entry: url.href };
}

const envSchema = z.object({
  NODE_ENV: z
    .enum(['development', 'production', 'test'], { error: 'must be development, production or test' })
    .default('development'),
  PORT: port.default(7130),
  HOST: z.string().trim().min(1, 'must be a host name or address').default('127.0.0.1'),
  DATABASE_URL: databaseUrl.optional(),
  DATA_DIR: z.string().trim().min(1, 'must be a directory path').default('./data'),
  LOG_LEVEL: z
    .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], {
      error: 'must be one of fatal, error, warn, info, debug, trace, silent',
    })
    .default('info'),
  JWT_SECRET: z.string().min(32, 'must be at least 32 characters').optional(),
  ACCESS_TOKEN_TTL_SECONDS: seconds.default(15 * 60),
  REFRESH_TOKEN_TTL_SECONDS: seconds.default(30 * 24 * 3600),
  REFRESH_TOKEN_REUSE_INTERVAL_SECONDS: z.coerce
    .number({ error: 'must be a whole number of seconds (0 to 300; 0: a rotated token is always reuse)' })
    .int('must be a whole number of seconds (0 to 300; 0: a rotated token is always reuse)')
    .min(0, 'must be a whole number of seconds (0 to 300; 0: a rotated token is always reuse)')
    .max(300, 'must be a whole number of seconds (0 to 300; 0: a rotated token is always reuse)')
    .default(10),
  PUBLIC_URL: httpUrl.optional(),
  EMAIL_VERIFY_URL: httpUrl.optional(),
  AUTH_REDIRECT_URL: httpUrl.optional(),
  RESET_PASSWORD_URL: httpUrl.optional(),
  AUTH_REDIRECT_ALLOWLIST: z
    .string()
    .trim()
    .transform((v, ctx) => {
      const entries: string[] = [];
      for (const raw of v.split(/\s*,\s*/).filter((o) => o !== '')) {
        const checked = redirectEntry(raw);
        if ('problem' in checked) {
          ctx.addIssue({ code: 'custom', message: `${checked.problem}: ${JSON.stringify(raw)} is not` });
          return z.NEVER;
        }
        entries.push(checked.entry);
      }
      return entries;
    })
    .optional(),
  ALLOW_SIGN_UP: flag.default(true),
  REQUIRE_EMAIL_VERIFICATION: flag.default(true),
  EMAIL_OTP_TTL_SECONDS: seconds.default(10 * 60),
  EMAIL_LINK_TTL_SECONDS: seconds.default(10 * 60),
  SMTP_URL: z
    .string()
    .regex(/^smtps?:\/\/.+/, 'must be smtp://user:password@host:port or smtps://…')
    .optional(),
  MAIL_FROM: z
    .string()
    .min(3, 'must be an address such as "Accounts <no-reply@example.com>"')
    .default('Accounts <no-reply@localhost>'),
  ADMIN_EMAIL: z.email('must be an email address').optional(),
  ADMIN_PASSWORD: z.string().min(8, 'must be 8 to 256 characters').max(256, 'must be 8 to 256 characters').optional(),
  COOKIE_SECURE: flag.default(true),
  COOKIE_SAMESITE: z
    .string()
    .trim()
    .toLowerCase()
    .pipe(z.enum(['lax', 'strict', 'none'], { error: 'must be lax, strict or none' }))
    .default('lax'),
  COOKIE_DOMAIN: z
    .string()
    .trim()
    .toLowerCase()
    .regex(
      /^\.?[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$/,
      'must be a domain name such as example.com (no scheme, port or path)',
    )
    .transform((v) => v.replace(/^\./, ''))
    .optional(),
  CORS_ORIGINS: z
    .string()
    .trim()
    .transform((v, ctx) => {
      const origins = v.split(/\s*,\s*/).filter((o) => o !== '');
      for (const origin of origins) {
        const problem = originProblem(origin);
        if (problem !== undefined) {
          ctx.addIssue({
            code: 'custom',
            message: origins.length > 1 ? `${problem}: ${JSON.stringify(origin)} is not` : problem,
          });
          return z.NEVER;
        }
      }
      return origins;
    })
    .optional(),
  TRUST_PROXY: z
    .string()
    .trim()
    .regex(
      /^(true|false|\d{1,2}|[0-9a-fA-F.:/]+(\s*,\s*[0-9a-fA-F.:/]+)*)$/,
      'must be false, true (one proxy), a number of proxies, or a comma-separated list of proxy addresses/CIDRs',
    )
    .default('false'),
  REDIS_URL: z
    .string()
    .regex(/^rediss?:\/\/.+/, 'must be redis://host:port or rediss://…')
    .optional(),
  REDIS_KEY_PREFIX: z.string().max(64, 'must be at most 64 characters').default('accounts:'),
  RATE_LIMIT_WINDOW_SECONDS: seconds.default(5 * 60),
  RATE_LIMIT_VERIFY: count.default(30),
  RATE_LIMIT_SIGN_IN: count.default(30),
  RATE_LIMIT_SIGN_UP: count.default(10),
  RATE_LIMIT_SEND_VERIFICATION: count.default(5),
  RATE_LIMIT_REFRESH: count.default(150),
  RATE_LIMIT_IPV6_PREFIX: z.coerce
    .number({ error: 'must be a prefix length from 32 to 128' })
    .int('must be a prefix length from 32 to 128')
    .min(32, 'must be a prefix length from 32 to 128')
    .max(128, 'must be a prefix length from 32 to 128')
    .default(56),
  PASSWORD_HASH_CONCURRENCY: z.coerce
    .number({ error: 'must be a whole number from 1 to 64' })
    .int('must be a whole number from 1 to 64')
    .min(1, 'must be a whole number from 1 to 64')
    .max(64, 'must be a whole number from 1 to 64')
    .optional(),
  PASSWORD_HASH_QUEUE: z.coerce
    .number({ error: 'must be a whole number from 0 to 10000' })
    .int('must be a whole number from 0 to 10000')
    .min(0, 'must be a whole number from 0 to 10000')
    .max(10_000, 'must be a whole number from 0 to 10000')
    .default(32),
  PASSWORD_HASH_QUEUE_PER_NETWORK: count.optional(),
  EMBEDDINGS_BASE_URL: httpUrl.optional(),
  EMBEDDINGS_API_KEY: z.string().trim().min(1).max(4096, 'must be at most 4096 characters').optional(),
  EMBEDDINGS_MODELS: z
    .string()
    .trim()
    .regex(/^[^\s,]+(\s*,\s*[^\s,]+)*$/, 'must be a comma-separated list of model names')
    .optional(),
  EMBEDDINGS_TIMEOUT_MS: z.coerce
    .number({ error: 'must be a whole number of milliseconds (100 to 600000)' })
    .int('must be a whole number of milliseconds (100 to 600000)')
    .min(100, 'must be a whole number of milliseconds (100 to 600000)')
    .max(600_000, 'must be a whole number of milliseconds (100 to 600000)')
    .default(30_000),
  EMBEDDINGS_RETRY_BASE_MS: z.coerce
    .number({ error: 'must be a whole number of milliseconds (0 to 60000)' })
    .int('must be a whole number of milliseconds (0 to 60000)')
    .min(0, 'must be a whole number of milliseconds (0 to 60000)')
    .max(60_000, 'must be a whole number of milliseconds (0 to 60000)')
    .default(500),
  EMBEDDINGS_RATE_LIMIT: count.default(600),
  EMBEDDINGS_TOKENS_PER_MINUTE: count.default(1_000_000),
  EMBEDDINGS_BREAKER_RESET_MS: milliseconds(100, 600_000).default(30_000),
  EMBEDDINGS_FORWARD_USER: flag.default(false),
  HTTP_HEADERS_TIMEOUT_MS: milliseconds(100, 600_000).default(10_000),
  HTTP_REQUEST_TIMEOUT_MS: milliseconds(100, 3_600_000).default(30_000),
  HTTP_KEEP_ALIVE_TIMEOUT_MS: milliseconds(100, 3_600_000).default(72_000),
  REALTIME_ALLOW_ANON: flag.default(false),
  REALTIME_ADAPTER: z
    .enum(['auto', 'postgres', 'redis', 'memory'], { error: 'must be auto, postgres, redis or memory' })
    .default('auto'),
  REALTIME_RETENTION_DAYS: count.default(7),
  REALTIME_MAX_PAYLOAD_BYTES: z.coerce
    .number({ error: 'must be a whole number of bytes (2 to 6144)' })
    .int('must be a whole number of bytes (2 to 6144)')
    .min(2, 'must be a whole number of bytes (2 to 6144)')
    .max(6144, 'must be a whole number of bytes (2 to 6144)')
    .default(4096),
  REALTIME_PUBLISH_RATE: count.default(100),
  REALTIME_HTTP_PUBLISH_RATE: count.default(600),
  REALTIME_RECHECK_SECONDS: z.coerce
    .number({ error: 'must be a whole number of seconds (0 to 86400; 0 turns the periodic re-check off)' })
    .int('must be a whole number of seconds (0 to 86400; 0 turns the periodic re-check off)')
    .min(0, 'must be a whole number of seconds (0 to 86400; 0 turns the periodic re-check off)')
    .max(86_400, 'must be a whole number of seconds (0 to 86400; 0 turns the periodic re-check off)')
    .default(30),
  REALTIME_MAX_SUBSCRIPTIONS: count.default(100),
  REALTIME_MAX_SOCKETS_PER_USER: count.default(20),
  REALTIME_MAX_BUFFERED_BYTES: z.coerce
    .number({ error: 'must be a whole number of bytes (65536 to 67108864)' })
    .int('must be a whole number of bytes (65536 to 67108864)')
    .min(65_536, 'must be a whole number of bytes (65536 to 67108864)')
    .max(67_108_864, 'must be a whole number of bytes (65536 to 67108864)')
    .default(1_048_576),
  METRICS_TOKEN: z
    .string()
    .regex(/^[\x21-\x7e]+$/, 'must be printable ASCII without spaces (openssl rand -hex 32)')
    .min(32, 'must be at least 32 characters (openssl rand -hex 32)')
    .optional(),
  METRICS_PORT: port.optional(),
});

export type Env = Record<string, string | undefined>;

const STRONG_SECRET_HINT = 'a random value of 256 bits or more: openssl rand -base64 48';

/** Where the data lives: embedded PGlite on disk or in memory, or a PostgreSQL server. */
export type DatabaseConfig =
  | { kind: 'pglite'; dataDir: string }
  | { kind: 'pglite-memory' }
  | { kind: 'postgres'; url: string };

export interface Config {
  nodeEnv: 'development' | 'production' | 'test';
  port: number;
  host: string;
  database: DatabaseConfig;
  dataDir: string;
  logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  /** Signing key for access tokens; when absent outside production one is generated and kept in the database. */
  jwtSecret: string | undefined;
  accessTokenTtlSeconds: number;
  refreshTokenTtlSeconds: number;
  /**
   * How long after a refresh token is rotated it still refreshes its session (to the current token)
   * instead of counting as reuse: a retried refresh whose answer was lost, two tabs refreshing at once.
   */
  refreshTokenReuseIntervalSeconds: number;
  /** Where the service is reached from outside, without a trailing slash. */
  publicUrl: string;
  /** The page that verification links point to; `?token=<64 hex>` is appended. */
  emailVerifyUrl: string;
  /** Where clients go after verifying, reported as redirectTo; undefined means no redirect. */
  authRedirectUrl: string | undefined;
  /**
   * Where a client may ask to be sent (redirectTo, OAuth's redirect_uri): origins, or URL prefixes
   * (a path, or a scheme of a native app). Without AUTH_REDIRECT_ALLOWLIST, AUTH_REDIRECT_URL's origin.
   */
  authRedirectAllowlist: readonly string[];
  /** OAuth 2 / OpenID Connect providers (OAUTH_PROVIDERS and OAUTH_<NAME>_*). */
  oauthProviders: readonly OAuthProviderConfig[];
  requireEmailVerification: boolean;
  /** The page password-reset links open (the service's own, or the app's); `?token=<64 hex>` is added. */
  resetPasswordUrl: string;
  /** New accounts may be made (sign-up, and sign-in by email code for a new address). */
  allowSignUp: boolean;
  emailOtpTtlSeconds: number;
  emailLinkTtlSeconds: number;
  /** SMTP server for outgoing mail; undefined (development only) writes messages to the log instead. */
  smtpUrl: string | undefined;
  mailFrom: string;
  /** An administrator account kept in place at every start. */
  admin: { email: string; password: string } | undefined;
  /** The refresh cookie's attributes (web clients). SameSite=None cookies are also Partitioned (CHIPS). */
  cookie: {
    secure: boolean;
    sameSite: 'lax' | 'strict' | 'none';
    /** The Domain attribute; undefined: a host-only cookie (the service's host alone). */
    domain: string | undefined;
  };
  /** Browser origins allowed to call the API with credentials (CORS) and to open realtime sockets. */
  corsOrigins: readonly string[];
  /** Fastify's trustProxy: false, a hop count, or the proxies' addresses. Never "trust every hop". */
  trustProxy: false | number | string;
  redisUrl: string | undefined;
  /** Prefix of every Redis key this service writes. */
  redisKeyPrefix: string;
  rateLimits: {
    windowSeconds: number;
    verify: number;
    signIn: number;
    signUp: number;
    sendVerification: number;
    refresh: number;
    /** Per-IP limits count an IPv6 client by this many leading bits of its address (a /56: one home). */
    ipv6Prefix: number;
  };
  /**
   * Password hashing (sign-up, sign-in, reset, change) runs through one queue per instance: at most
   * `concurrency` hashes at once, at most `maxWaiting` waiting, of which at most
   * `maxWaitingPerNetwork` from one network (an IPv6 /48, an IPv4 /24); beyond, 503 at once.
   */
  passwordHashing: {
    concurrency: number;
    maxWaiting: number;
    maxWaitingPerNetwork: number;
  };
  embeddings: {
    /** An OpenAI-compatible API root such as https://api.openai.com/v1; undefined: local models only. */
    baseUrl: string | undefined;
    apiKey: string | undefined;
    /** The models callers may use; undefined: any model of the upstream, and every local model. */
    allowedModels: readonly string[] | undefined;
    timeoutMs: number;
    /** First retry delay; each further retry doubles it (with jitter). */
    retryBaseMs: number;
    /** Requests per user per minute. */
    rateLimitPerMinute: number;
    /** Tokens (cl100k_base) per user per minute, across instances with Redis. */
    tokensPerMinute: number;
    /** How long calls to a failing upstream are refused (503) before one trial call is let through. */
    breakerResetMs: number;
    /** Whether a caller's `user` (its end user's identifier) is sent on to the provider. */
    forwardUser: boolean;
  };
  /** Slow-client limits of the HTTP server (408 and a closed connection when exceeded). */
  http: {
    /** The request line and all headers must arrive within this time. */
    headersTimeoutMs: number;
    /** The whole request, body included, must arrive within this time. */
    requestTimeoutMs: number;
    /** An idle keep-alive connection is closed after this time. */
    keepAliveTimeoutMs: number;
  };
  realtime: {
    /** Sockets without a token are accepted and act as the role anon. */
    allowAnon: boolean;
    /** How messages reach the other instances; `auto`: none on PGlite (one process), else Redis when REDIS_URL is set, else PostgreSQL's NOTIFY. */
    adapter: 'postgres' | 'redis' | 'memory';
    /** Messages older than this are deleted. */
    retentionDays: number;
    /** Largest accepted message payload, as JSON bytes. */
    maxPayloadBytes: number;
    /** A connection whose unsent output exceeds this is disconnected (slow consumer). */
    maxBufferedBytes: number;
    /** Publishes per second per connection (a burst of as many is allowed). */
    publishRate: number;
    /** Publishes per minute per user through POST /api/realtime/messages (every instance together with Redis). */
    httpPublishRate: number;
    /** Every live subscription is checked against the policies again this often; 0: only on changes. */
    recheckSeconds: number;
    /** Channels one socket may be subscribed to at once. */
    maxSubscriptions: number;
    /** Sockets one user may have open at once (on every instance together with Redis). */
    maxSocketsPerUser: number;
  };
  /**
   * GET /metrics (Prometheus). With `token`, on the service's port behind `Authorization: Bearer
   * <token>`; with `port`, on a listener of its own (on `host`, no token). Off when neither is set.
   */
  metrics: {
    token: string | undefined;
    port: number | undefined;
  };
}

function databaseFrom(url: string | undefined, dataDir: string): DatabaseConfig {
  if (url === undefined || url === '') return { kind: 'pglite', dataDir: path.resolve(dataDir, 'pglite') };
  if (url === 'memory://') return { kind: 'pglite-memory' };
  return { kind: 'postgres', url };
}

function realtimeAdapter(
  chosen: 'auto' | 'postgres' | 'redis' | 'memory',
  redisUrl: string | undefined,
  database: DatabaseConfig,
): 'postgres' | 'redis' | 'memory' {
  if (chosen !== 'auto') return chosen;
  // The embedded database serves one process, so there are no other instances to reach.
  if (database.kind !== 'postgres') return 'memory';
  return redisUrl !== undefined ? 'redis' : 'postgres';
}

// X-Forwarded-For is written by the client; trusting all of it would let anyone pick their address.
// So `true` means one proxy in front (the address that proxy saw), and a number means that many.
function parseTrustProxy(value: string): false | number | string {
  if (value === 'false' || value === '0') return false;
  if (value === 'true') return 1;
  if (/^\d+$/.test(value)) return Number(value);
  return value;
}

/** Validates the environment once into a frozen Config, or throws a ConfigError naming the first bad variable. */
export function loadConfig(env: Env = process.env): Readonly<Config> {
  // Empty strings mean "not set", as shells and compose files often pass them.
  const present = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ''));
  const parsed = envSchema.safeParse(present);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const name = String(issue?.path[0] ?? 'environment');
    const value = present[name];
    const secret = /SECRET|PASSWORD|SMTP_URL|REDIS_URL|DATABASE_URL|API_KEY|METRICS_TOKEN/.test(name);
    const shown = value === undefined || secret ? '' : ` (got ${JSON.stringify(value)})`;
    throw new ConfigError(`${name} ${issue?.message ?? 'is invalid'}${shown}`);
  }
  const e = parsed.data;
  if (e.NODE_ENV === 'production') {
    if (e.JWT_SECRET === undefined) {
      throw new ConfigError(`JWT_SECRET is required when NODE_ENV=production (${STRONG_SECRET_HINT})`);
    }
    // Whoever knows the key can sign an access token for any account, administrators included.
    const weakness = secretWeakness(e.JWT_SECRET);
    if (weakness !== undefined) {
      throw new ConfigError(`JWT_SECRET is refused when NODE_ENV=production: it ${weakness} (${STRONG_SECRET_HINT})`);
    }
  }
  if (e.NODE_ENV === 'production' && e.SMTP_URL === undefined) {
    throw new ConfigError('SMTP_URL is required when NODE_ENV=production (smtp://user:password@host:port)');
  }
  if (e.NODE_ENV === 'production' && !e.COOKIE_SECURE) {
    throw new ConfigError('COOKIE_SECURE=false is refused when NODE_ENV=production (refresh cookies must be Secure)');
  }
  if (e.COOKIE_SAMESITE === 'none' && !e.COOKIE_SECURE) {
    throw new ConfigError(
      'COOKIE_SAMESITE=none needs COOKIE_SECURE=true (browsers drop SameSite=None cookies that are not Secure)',
    );
  }
  if (e.HTTP_HEADERS_TIMEOUT_MS > e.HTTP_REQUEST_TIMEOUT_MS) {
    throw new ConfigError('HTTP_HEADERS_TIMEOUT_MS must not be larger than HTTP_REQUEST_TIMEOUT_MS');
  }
  const database = databaseFrom(e.DATABASE_URL, path.resolve(e.DATA_DIR));
  if (e.REALTIME_ADAPTER === 'redis' && e.REDIS_URL === undefined) {
    throw new ConfigError('REALTIME_ADAPTER=redis needs REDIS_URL');
  }
  if (e.REALTIME_ADAPTER === 'postgres' && database.kind !== 'postgres') {
    throw new ConfigError('REALTIME_ADAPTER=postgres needs DATABASE_URL to name a PostgreSQL server');
  }
  if ((e.ADMIN_EMAIL === undefined) !== (e.ADMIN_PASSWORD === undefined)) {
    throw new ConfigError(
      `${e.ADMIN_EMAIL === undefined ? 'ADMIN_EMAIL' : 'ADMIN_PASSWORD'} must be set together with the other`,
    );
  }
  if (e.METRICS_PORT !== undefined && e.METRICS_PORT === e.PORT) {
    throw new ConfigError(`METRICS_PORT must differ from PORT (both are ${e.PORT})`);
  }
  const oauthProviders = oauthProvidersFrom(present);
  if (typeof oauthProviders === 'string') throw new ConfigError(oauthProviders);
  const redirectOrigin = e.AUTH_REDIRECT_URL === undefined ? undefined : URL.parse(e.AUTH_REDIRECT_URL)?.origin;
  const authRedirectAllowlist =
    e.AUTH_REDIRECT_ALLOWLIST ?? (redirectOrigin === undefined || redirectOrigin === 'null' ? [] : [redirectOrigin]);
  const dataDir = path.resolve(e.DATA_DIR);
  const publicUrl = e.PUBLIC_URL ?? `http://${e.HOST === '0.0.0.0' ? '127.0.0.1' : e.HOST}:${e.PORT}`;
  const publicHost = URL.parse(publicUrl)?.hostname;
  if (e.COOKIE_DOMAIN !== undefined && e.PUBLIC_URL === undefined) {
    throw new ConfigError("COOKIE_DOMAIN needs PUBLIC_URL (the service's address, whose host must be in that domain)");
  }
  if (e.COOKIE_DOMAIN !== undefined && (publicHost === undefined || /^[\d.]+$|^\[/.test(publicHost))) {
    throw new ConfigError(
      'COOKIE_DOMAIN needs a PUBLIC_URL with a domain name: a cookie for an IP address takes no Domain',
    );
  }
  if (e.COOKIE_DOMAIN !== undefined && publicHost !== e.COOKIE_DOMAIN && !publicHost?.endsWith(`.${e.COOKIE_DOMAIN}`)) {
    throw new ConfigError(
      `COOKIE_DOMAIN must be the host of PUBLIC_URL or a parent domain of it, or browsers refuse the cookie (got ${JSON.stringify(e.COOKIE_DOMAIN)} for ${publicHost})`,
    );
  }
  return Object.freeze({
    nodeEnv: e.NODE_ENV,
    port: e.PORT,
    host: e.HOST,
    database: Object.freeze(database),
    dataDir,
    logLevel: e.LOG_LEVEL,
    jwtSecret: e.JWT_SECRET,
    accessTokenTtlSeconds: e.ACCESS_TOKEN_TTL_SECONDS,
    refreshTokenTtlSeconds: e.REFRESH_TOKEN_TTL_SECONDS,
    refreshTokenReuseIntervalSeconds: e.REFRESH_TOKEN_REUSE_INTERVAL_SECONDS,
    publicUrl,
    emailVerifyUrl: e.EMAIL_VERIFY_URL ?? `${publicUrl}/auth/verify-email`,
    authRedirectUrl: e.AUTH_REDIRECT_URL,
    authRedirectAllowlist: Object.freeze(authRedirectAllowlist),
    oauthProviders,
    requireEmailVerification: e.REQUIRE_EMAIL_VERIFICATION,
    resetPasswordUrl: e.RESET_PASSWORD_URL ?? `${publicUrl}/auth/reset-password`,
    allowSignUp: e.ALLOW_SIGN_UP,
    emailOtpTtlSeconds: e.EMAIL_OTP_TTL_SECONDS,
    emailLinkTtlSeconds: e.EMAIL_LINK_TTL_SECONDS,
    smtpUrl: e.SMTP_URL,
    mailFrom: e.MAIL_FROM,
    admin:
      e.ADMIN_EMAIL !== undefined && e.ADMIN_PASSWORD !== undefined
        ? Object.freeze({ email: e.ADMIN_EMAIL.toLowerCase(), password: e.ADMIN_PASSWORD })
        : undefined,
    cookie: Object.freeze({ secure: e.COOKIE_SECURE, sameSite: e.COOKIE_SAMESITE, domain: e.COOKIE_DOMAIN }),
    corsOrigins: Object.freeze(e.CORS_ORIGINS ?? []),
    trustProxy: parseTrustProxy(e.TRUST_PROXY),
    redisUrl: e.REDIS_URL,
    redisKeyPrefix: e.REDIS_KEY_PREFIX,
    rateLimits: Object.freeze({
      windowSeconds: e.RATE_LIMIT_WINDOW_SECONDS,
      verify: e.RATE_LIMIT_VERIFY,
      signIn: e.RATE_LIMIT_SIGN_IN,
      signUp: e.RATE_LIMIT_SIGN_UP,
      sendVerification: e.RATE_LIMIT_SEND_VERIFICATION,
      refresh: e.RATE_LIMIT_REFRESH,
      ipv6Prefix: e.RATE_LIMIT_IPV6_PREFIX,
    }),
    passwordHashing: Object.freeze({
      concurrency: e.PASSWORD_HASH_CONCURRENCY ?? Math.max(1, os.availableParallelism() - 1),
      maxWaiting: e.PASSWORD_HASH_QUEUE,
      maxWaitingPerNetwork: Math.min(
        e.PASSWORD_HASH_QUEUE,
        e.PASSWORD_HASH_QUEUE_PER_NETWORK ?? Math.max(1, Math.floor(e.PASSWORD_HASH_QUEUE / 4)),
      ),
    }),
    embeddings: Object.freeze({
      baseUrl: e.EMBEDDINGS_BASE_URL,
      apiKey: e.EMBEDDINGS_API_KEY,
      allowedModels:
        e.EMBEDDINGS_MODELS === undefined ? undefined : Object.freeze(e.EMBEDDINGS_MODELS.split(/\s*,\s*/)),
      timeoutMs: e.EMBEDDINGS_TIMEOUT_MS,
      retryBaseMs: e.EMBEDDINGS_RETRY_BASE_MS,
      rateLimitPerMinute: e.EMBEDDINGS_RATE_LIMIT,
      tokensPerMinute: e.EMBEDDINGS_TOKENS_PER_MINUTE,
      breakerResetMs: e.EMBEDDINGS_BREAKER_RESET_MS,
      forwardUser: e.EMBEDDINGS_FORWARD_USER,
    }),
    http: Object.freeze({
      headersTimeoutMs: e.HTTP_HEADERS_TIMEOUT_MS,
      requestTimeoutMs: e.HTTP_REQUEST_TIMEOUT_MS,
      keepAliveTimeoutMs: e.HTTP_KEEP_ALIVE_TIMEOUT_MS,
    }),
    realtime: Object.freeze({
      allowAnon: e.REALTIME_ALLOW_ANON,
      adapter: realtimeAdapter(e.REALTIME_ADAPTER, e.REDIS_URL, database),
      retentionDays: e.REALTIME_RETENTION_DAYS,
      maxPayloadBytes: e.REALTIME_MAX_PAYLOAD_BYTES,
      maxBufferedBytes: e.REALTIME_MAX_BUFFERED_BYTES,
      publishRate: e.REALTIME_PUBLISH_RATE,
      httpPublishRate: e.REALTIME_HTTP_PUBLISH_RATE,
      recheckSeconds: e.REALTIME_RECHECK_SECONDS,
      maxSubscriptions: e.REALTIME_MAX_SUBSCRIPTIONS,
      maxSocketsPerUser: e.REALTIME_MAX_SOCKETS_PER_USER,
    }),
    metrics: Object.freeze({ token: e.METRICS_TOKEN, port: e.METRICS_PORT }),
  });
}
