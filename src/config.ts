// The service's configuration: every environment variable is declared once, in `variables` below
// (its name, its format with its default, and where it goes in Config, with a comment on what it
// does); Config's type, the parsing and the check that docs/configuration.md lists every variable
// (test/config.test.ts) all come from that table. Settings computed from several variables and the
// rules that tie variables together follow it, in loadConfig.
import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { webhookEventList } from './audit/event-types.ts';
import { type OAuthProviderConfig, oauthProvidersFrom } from './auth/oauth/provider-config.ts';
import {
  cookieDomain,
  count,
  databaseUrl,
  flag,
  httpUrl,
  milliseconds,
  nameList,
  oneOf,
  origins,
  port,
  postgresUrl,
  redirectAllowlist,
  seconds,
  trustProxy,
  wholeNumber,
} from './config-formats.ts';
import { secretWeakness } from './secret-strength.ts';

/** Thrown when the environment does not describe a runnable service; its message is one line naming the variable. */
export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** One environment variable: its name and its format (a zod schema, default included). */
interface Variable<S extends z.ZodType = z.ZodType> {
  readonly name: string;
  readonly schema: S;
}
const env = <S extends z.ZodType>(name: string, schema: S): Variable<S> => ({ name, schema });

type Table = { readonly [key: string]: Variable | Table };

/** A name people see: 1 to 64 characters, without a colon (authenticator apps split "issuer:account" there). */
const productName = z
  .string()
  .trim()
  .min(1, 'must be 1 to 64 characters')
  .max(64, 'must be 1 to 64 characters')
  .regex(/^[^:\p{Cc}]+$/u, 'must not contain a colon or a control character');

/** Every variable, by where its value goes in Config (some become inputs of the settings loadConfig computes). */
const variables = {
  nodeEnv: env(
    'NODE_ENV',
    oneOf(['development', 'production', 'test'], 'must be development, production or test').default('development'),
  ),
  port: env('PORT', port.default(7130)),
  host: env('HOST', z.string().trim().min(1, 'must be a host name or address').default('127.0.0.1')),
  /** Input of `database`. */
  databaseUrl: env('DATABASE_URL', databaseUrl.optional()),
  /**
   * Inputs of `database`: a streaming replica of DATABASE_URL's server for the reads that tolerate a
   * little lag (docs/operations.md, "Read replicas"), and the replay lag past which they go back to
   * the primary.
   */
  databaseReadUrl: env('DATABASE_READ_URL', postgresUrl.optional()),
  databaseReadMaxLagMs: env('DATABASE_READ_MAX_LAG_MS', milliseconds(0, 3_600_000).default(1_000)),
  dataDir: env(
    'DATA_DIR',
    z
      .string()
      .trim()
      .min(1, 'must be a directory path')
      .default('./data')
      .transform((v) => path.resolve(v)),
  ),
  /**
   * Development with the embedded database: serve it over the PostgreSQL protocol on 127.0.0.1 at this
   * port, so that psql and other clients reach the service's data (no password: loopback only).
   */
  pgliteSocketPort: env('PGLITE_SOCKET_PORT', port.optional()),
  logLevel: env(
    'LOG_LEVEL',
    oneOf(
      ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'],
      'must be one of fatal, error, warn, info, debug, trace, silent',
    ).default('info'),
  ),
  /** The secret the internal keys derive from; when absent outside production one is generated and kept in the database. */
  jwtSecret: env('JWT_SECRET', z.string().min(32, 'must be at least 32 characters').optional()),
  accessTokenTtlSeconds: env('ACCESS_TOKEN_TTL_SECONDS', seconds.default(15 * 60)),
  /** Days a signing key signs before a new one takes over by itself; undefined: only administrators rotate. */
  signingKeyRotationDays: env(
    'SIGNING_KEY_ROTATION_DAYS',
    wholeNumber(2, 3650, 'must be a whole number of days (2 to 3650), or unset for no automatic rotation').optional(),
  ),
  refreshTokenTtlSeconds: env('REFRESH_TOKEN_TTL_SECONDS', seconds.default(30 * 24 * 3600)),
  /**
   * How long after a refresh token is rotated it still refreshes its session (to the current token)
   * instead of counting as reuse: a retried refresh whose answer was lost, two tabs refreshing at once.
   */
  refreshTokenReuseIntervalSeconds: env(
    'REFRESH_TOKEN_REUSE_INTERVAL_SECONDS',
    wholeNumber(0, 300, 'must be a whole number of seconds (0 to 300; 0: a rotated token is always reuse)').default(10),
  ),
  /** Where the service is reached from outside, without a trailing slash (default: computed). */
  publicUrl: env('PUBLIC_URL', httpUrl.optional()),
  /** The page that verification links point to; `?token=<64 hex>` is appended (default: computed). */
  emailVerifyUrl: env('EMAIL_VERIFY_URL', httpUrl.optional()),
  /** Where clients go after verifying, reported as redirectTo; undefined means no redirect. */
  authRedirectUrl: env('AUTH_REDIRECT_URL', httpUrl.optional()),
  /** The page password-reset links open (the service's own, or the app's); `?token=<64 hex>` is added. */
  resetPasswordUrl: env('RESET_PASSWORD_URL', httpUrl.optional()),
  /**
   * Where a client may ask to be sent (redirectTo, OAuth's redirect_uri): origins, or URL prefixes
   * (a path, or a scheme of a native app). Without AUTH_REDIRECT_ALLOWLIST, AUTH_REDIRECT_URL's origin.
   */
  authRedirectAllowlist: env('AUTH_REDIRECT_ALLOWLIST', redirectAllowlist.optional()),
  /** The product's name, on the pages emailed links open and in the emails; MFA_ISSUER's default. */
  appName: env('APP_NAME', productName.default('Accounts')),
  /** Second factors: the issuer name authenticator apps show (APP_NAME by default), and whether administrators need aal2. */
  mfa: {
    issuer: env('MFA_ISSUER', productName.optional()),
    requiredForAdmins: env('MFA_REQUIRED_FOR_ADMINS', flag.default(false)),
  },
  /** Passkeys (WebAuthn): the relying party. Defaults: PUBLIC_URL's host; the service's name; PUBLIC_URL's origin and CORS_ORIGINS. */
  webauthn: {
    rpId: env(
      'WEBAUTHN_RP_ID',
      z
        .string()
        .trim()
        .toLowerCase()
        .regex(/^[a-z0-9.-]+$/, 'must be a host name such as example.com (no scheme, port or path)')
        .refine(
          (host) => !/^[\d.]+$/.test(host) && (host === 'localhost' || /^[a-z0-9-]+(\.[a-z0-9-]+)+$/.test(host)),
          'must be a domain name such as example.com, or localhost (browsers refuse an IP address or a top-level domain)',
        )
        .optional(),
    ),
    rpName: env(
      'WEBAUTHN_RP_NAME',
      z.string().trim().min(1, 'must be 1 to 64 characters').max(64, 'must be 1 to 64 characters').optional(),
    ),
    origins: env('WEBAUTHN_ORIGINS', origins.optional()),
  },
  /** New accounts may be made (sign-up, and sign-in by email code for a new address). */
  allowSignUp: env('ALLOW_SIGN_UP', flag.default(true)),
  requireEmailVerification: env('REQUIRE_EMAIL_VERIFICATION', flag.default(true)),
  emailOtpTtlSeconds: env('EMAIL_OTP_TTL_SECONDS', seconds.default(10 * 60)),
  emailLinkTtlSeconds: env('EMAIL_LINK_TTL_SECONDS', seconds.default(10 * 60)),
  /** SMTP server for outgoing mail; undefined (development only) writes messages to the log instead. */
  smtpUrl: env(
    'SMTP_URL',
    z
      .string()
      .regex(/^smtps?:\/\/.+/, 'must be smtp://user:password@host:port or smtps://…')
      .optional(),
  ),
  mailFrom: env(
    'MAIL_FROM',
    z
      .string()
      .min(3, 'must be an address such as "Accounts <no-reply@example.com>"')
      .default('Accounts <no-reply@localhost>'),
  ),
  /** Inputs of `admin`. */
  adminEmail: env('ADMIN_EMAIL', z.email('must be an email address').optional()),
  adminPassword: env(
    'ADMIN_PASSWORD',
    z.string().min(8, 'must be 8 to 256 characters').max(256, 'must be 8 to 256 characters').optional(),
  ),
  /** The refresh cookie's attributes (web clients). SameSite=None cookies are also Partitioned (CHIPS). */
  cookie: {
    secure: env('COOKIE_SECURE', flag.default(true)),
    sameSite: env(
      'COOKIE_SAMESITE',
      z
        .string()
        .trim()
        .toLowerCase()
        .pipe(oneOf(['lax', 'strict', 'none'], 'must be lax, strict or none'))
        .default('lax'),
    ),
    /** The Domain attribute; undefined: a host-only cookie (the service's host alone). */
    domain: env('COOKIE_DOMAIN', cookieDomain.optional()),
  },
  /** Browser origins allowed to call the API with credentials (CORS) and to open realtime sockets. */
  corsOrigins: env('CORS_ORIGINS', origins.default([])),
  /** Fastify's trustProxy: false, a hop count, or the proxies' addresses. Never "trust every hop". */
  trustProxy: env('TRUST_PROXY', trustProxy.default(false)),
  redisUrl: env(
    'REDIS_URL',
    z
      .string()
      .regex(/^rediss?:\/\/.+/, 'must be redis://host:port or rediss://…')
      .optional(),
  ),
  /** Prefix of every Redis key this service writes. */
  redisKeyPrefix: env('REDIS_KEY_PREFIX', z.string().max(64, 'must be at most 64 characters').default('accounts:')),
  rateLimits: {
    windowSeconds: env('RATE_LIMIT_WINDOW_SECONDS', seconds.default(5 * 60)),
    verify: env('RATE_LIMIT_VERIFY', count.default(30)),
    signIn: env('RATE_LIMIT_SIGN_IN', count.default(30)),
    signUp: env('RATE_LIMIT_SIGN_UP', count.default(10)),
    sendVerification: env('RATE_LIMIT_SEND_VERIFICATION', count.default(5)),
    refresh: env('RATE_LIMIT_REFRESH', count.default(150)),
    /** Per-IP limits count an IPv6 client by this many leading bits of its address (a /56: one home). */
    ipv6Prefix: env(
      'RATE_LIMIT_IPV6_PREFIX',
      wholeNumber(32, 128, 'must be a prefix length from 32 to 128').default(56),
    ),
  },
  /**
   * Password hashing (sign-up, sign-in, reset, change) runs through one queue per instance: at most
   * `concurrency` hashes at once, at most `maxWaiting` waiting, of which at most
   * `maxWaitingPerNetwork` from one network (an IPv6 /48, an IPv4 /24); beyond, 503 at once.
   * (Defaults computed.)
   */
  passwordHashing: {
    concurrency: env('PASSWORD_HASH_CONCURRENCY', wholeNumber(1, 64, 'must be a whole number from 1 to 64').optional()),
    maxWaiting: env(
      'PASSWORD_HASH_QUEUE',
      wholeNumber(0, 10_000, 'must be a whole number from 0 to 10000').default(32),
    ),
    maxWaitingPerNetwork: env('PASSWORD_HASH_QUEUE_PER_NETWORK', count.optional()),
  },
  embeddings: {
    /** An OpenAI-compatible API root such as https://api.openai.com/v1; undefined: local models only. */
    baseUrl: env('EMBEDDINGS_BASE_URL', httpUrl.optional()),
    apiKey: env('EMBEDDINGS_API_KEY', z.string().trim().min(1).max(4096, 'must be at most 4096 characters').optional()),
    /** The models callers may use; undefined: any model of the upstream, and every local model. */
    allowedModels: env('EMBEDDINGS_MODELS', nameList.optional()),
    timeoutMs: env('EMBEDDINGS_TIMEOUT_MS', milliseconds(100, 600_000).default(30_000)),
    /** First retry delay; each further retry doubles it (with jitter). */
    retryBaseMs: env('EMBEDDINGS_RETRY_BASE_MS', milliseconds(0, 60_000).default(500)),
    /** Requests per user per minute. */
    rateLimitPerMinute: env('EMBEDDINGS_RATE_LIMIT', count.default(600)),
    /** Tokens (cl100k_base) per user per minute, across instances with Redis. */
    tokensPerMinute: env('EMBEDDINGS_TOKENS_PER_MINUTE', count.default(1_000_000)),
    /** How long calls to a failing upstream are refused (503) before one trial call is let through. */
    breakerResetMs: env('EMBEDDINGS_BREAKER_RESET_MS', milliseconds(100, 600_000).default(30_000)),
    /** Whether a caller's `user` (its end user's identifier) is sent on to the provider. */
    forwardUser: env('EMBEDDINGS_FORWARD_USER', flag.default(false)),
  },
  /** Slow-client limits of the HTTP server (408 and a closed connection when exceeded). */
  http: {
    /** The request line and all headers must arrive within this time. */
    headersTimeoutMs: env('HTTP_HEADERS_TIMEOUT_MS', milliseconds(100, 600_000).default(10_000)),
    /** The whole request, body included, must arrive within this time. */
    requestTimeoutMs: env('HTTP_REQUEST_TIMEOUT_MS', milliseconds(100, 3_600_000).default(30_000)),
    /** An idle keep-alive connection is closed after this time. */
    keepAliveTimeoutMs: env('HTTP_KEEP_ALIVE_TIMEOUT_MS', milliseconds(100, 3_600_000).default(72_000)),
  },
  realtime: {
    /** Sockets without a token are accepted and act as the role anon. */
    allowAnon: env('REALTIME_ALLOW_ANON', flag.default(false)),
    /** How messages reach the other instances; `auto`: none on PGlite (one process), else Redis when REDIS_URL is set, else PostgreSQL's NOTIFY. */
    adapter: env(
      'REALTIME_ADAPTER',
      oneOf(['auto', 'postgres', 'redis', 'memory'], 'must be auto, postgres, redis or memory').default('auto'),
    ),
    /** Messages older than this are deleted. */
    retentionDays: env('REALTIME_RETENTION_DAYS', count.default(7)),
    /** Largest accepted message payload, as JSON bytes. */
    maxPayloadBytes: env(
      'REALTIME_MAX_PAYLOAD_BYTES',
      wholeNumber(2, 6144, 'must be a whole number of bytes (2 to 6144)').default(4096),
    ),
    /** Publishes per second per connection (a burst of as many is allowed). */
    publishRate: env('REALTIME_PUBLISH_RATE', count.default(100)),
    /** Publishes per minute per user through POST /api/realtime/messages (every instance together with Redis). */
    httpPublishRate: env('REALTIME_HTTP_PUBLISH_RATE', count.default(600)),
    /** Every live subscription is checked against the policies again this often; 0: only on changes. */
    recheckSeconds: env(
      'REALTIME_RECHECK_SECONDS',
      wholeNumber(
        0,
        86_400,
        'must be a whole number of seconds (0 to 86400; 0 turns the periodic re-check off)',
      ).default(30),
    ),
    /** Channels one socket may be subscribed to at once. */
    maxSubscriptions: env('REALTIME_MAX_SUBSCRIPTIONS', count.default(100)),
    /** Sockets one user may have open at once (on every instance together with Redis). */
    maxSocketsPerUser: env('REALTIME_MAX_SOCKETS_PER_USER', count.default(20)),
    /** A connection whose unsent output exceeds this is disconnected (slow consumer). */
    maxBufferedBytes: env(
      'REALTIME_MAX_BUFFERED_BYTES',
      wholeNumber(65_536, 67_108_864, 'must be a whole number of bytes (65536 to 67108864)').default(1_048_576),
    ),
  },
  /** The audit log: how long its rows are kept (housekeeping deletes older ones). */
  audit: {
    retentionDays: env(
      'AUDIT_RETENTION_DAYS',
      wholeNumber(1, 3650, 'must be a whole number of days (1 to 3650)').default(90),
    ),
  },
  /**
   * Webhooks (Standard Webhooks): account events are posted to `url`, signed with `secret`
   * (whsec_ and base64, as the Standard Webhooks libraries make them). Off unless both are set.
   */
  webhooks: {
    url: env('WEBHOOK_URL', httpUrl.optional()),
    secret: env(
      'WEBHOOK_SECRET',
      z
        .string()
        .trim()
        .regex(
          /^whsec_[A-Za-z0-9+/]{32,}={0,2}$/,
          'must be whsec_ followed by at least 24 bytes in base64 (whsec_$(openssl rand -base64 32))',
        )
        .optional(),
    ),
    events: env('WEBHOOK_EVENTS', webhookEventList.optional()),
    /** Each delivery attempt must be answered (2xx) within this time, or it failed and is retried. */
    timeoutMs: env('WEBHOOK_TIMEOUT_MS', milliseconds(100, 60_000).default(10_000)),
    /** Delivered and dead-lettered events are deleted this many days after they were created. */
    retentionDays: env(
      'WEBHOOK_RETENTION_DAYS',
      wholeNumber(1, 3650, 'must be a whole number of days (1 to 3650)').default(30),
    ),
  },
  /**
   * GET /metrics (Prometheus). With `token`, on the service's port behind `Authorization: Bearer
   * <token>`; with `port`, on a listener of its own (on `host`, no token). Off when neither is set.
   */
  metrics: {
    token: env(
      'METRICS_TOKEN',
      z
        .string()
        .regex(/^[\x21-\x7e]+$/, 'must be printable ASCII without spaces (openssl rand -hex 32)')
        .min(32, 'must be at least 32 characters (openssl rand -hex 32)')
        .optional(),
    ),
    port: env('METRICS_PORT', port.optional()),
  },
} satisfies Table;

/** The values of a table of variables, shaped as the table. */
type Values<T> = T extends Variable<infer S> ? z.output<S> : { readonly [K in keyof T]: Values<T[K]> };
type Declared = Values<typeof variables>;

/** Where the data lives: embedded PGlite on disk or in memory, or a PostgreSQL server. */
export type DatabaseConfig =
  | { kind: 'pglite'; dataDir: string }
  | { kind: 'pglite-memory' }
  | { kind: 'postgres'; url: string; replica?: ReplicaConfig };

/** A streaming replica that serves the reads which tolerate lag (DATABASE_READ_URL). */
export interface ReplicaConfig {
  url: string;
  /** Past this replay lag, those reads go to the primary (DATABASE_READ_MAX_LAG_MS). */
  maxLagMs: number;
}

/** The settings loadConfig computes from the declared variables (defaults that depend on others). */
interface Computed {
  database: DatabaseConfig;
  publicUrl: string;
  /** The `iss` of access tokens: PUBLIC_URL when set; undefined: the one the first instance kept (src/auth/service-secret.ts). */
  tokenIssuer: string | undefined;
  emailVerifyUrl: string;
  resetPasswordUrl: string;
  authRedirectAllowlist: readonly string[];
  /** OAuth 2 / OpenID Connect providers (OAUTH_PROVIDERS and OAUTH_<NAME>_*). */
  oauthProviders: readonly OAuthProviderConfig[];
  /** An administrator account kept in place at every start. */
  admin: { email: string; password: string } | undefined;
  passwordHashing: { concurrency: number; maxWaiting: number; maxWaitingPerNetwork: number };
  mfa: { issuer: string; requiredForAdmins: boolean };
  realtime: Omit<Declared['realtime'], 'adapter'> & { adapter: 'postgres' | 'redis' | 'memory' };
  /** The WebAuthn relying party: its id (a host), its name, the origins whose ceremonies count. */
  webauthn: { rpId: string; rpName: string; origins: readonly string[] };
}

export type Config = Omit<
  Declared,
  keyof Computed | 'databaseUrl' | 'databaseReadUrl' | 'databaseReadMaxLagMs' | 'adminEmail' | 'adminPassword'
> &
  Computed;

export type Env = Record<string, string | undefined>;

function entries(table: Table): Array<[string, Variable | Table]> {
  return Object.entries(table);
}
const isVariable = (entry: Variable | Table): entry is Variable => typeof entry.name === 'string';

/** Every variable's name, in declaration order. */
export function configVariableNames(table: Table = variables): string[] {
  return entries(table).flatMap(([, entry]) => (isVariable(entry) ? [entry.name] : configVariableNames(entry)));
}

function flatSchema(table: Table): Record<string, z.ZodType> {
  return Object.fromEntries(
    entries(table).flatMap(([, entry]) =>
      isVariable(entry) ? [[entry.name, entry.schema]] : Object.entries(flatSchema(entry)),
    ),
  );
}
const envSchema = z.object(flatSchema(variables));

/** The parsed values by variable name, shaped as the table. */
function shaped(table: Table, values: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(
    entries(table).map(([key, entry]) => [key, isVariable(entry) ? values[entry.name] : shaped(entry, values)]),
  );
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    for (const inner of Object.values(value)) deepFreeze(inner);
    Object.freeze(value);
  }
  return value;
}

const STRONG_SECRET_HINT = 'a random value of 256 bits or more: openssl rand -base64 48';

function databaseFrom(e: Declared): DatabaseConfig {
  const url = e.databaseUrl;
  if (url === undefined || url === '') return { kind: 'pglite', dataDir: path.resolve(e.dataDir, 'pglite') };
  if (url === 'memory://') return { kind: 'pglite-memory' };
  const readUrl = e.databaseReadUrl;
  return readUrl === undefined
    ? { kind: 'postgres', url }
    : { kind: 'postgres', url, replica: { url: readUrl, maxLagMs: e.databaseReadMaxLagMs } };
}

/** The rules that tie variables together; each throws a ConfigError naming the variable. */
function checkCombinations(e: Declared, database: DatabaseConfig): void {
  if (e.nodeEnv === 'production') {
    if (e.jwtSecret === undefined) {
      throw new ConfigError(`JWT_SECRET is required when NODE_ENV=production (${STRONG_SECRET_HINT})`);
    }
    // Whoever knows the key can sign an access token for any account, administrators included.
    const weakness = secretWeakness(e.jwtSecret);
    if (weakness !== undefined) {
      throw new ConfigError(`JWT_SECRET is refused when NODE_ENV=production: it ${weakness} (${STRONG_SECRET_HINT})`);
    }
    if (e.smtpUrl === undefined) {
      throw new ConfigError('SMTP_URL is required when NODE_ENV=production (smtp://user:password@host:port)');
    }
    if (!e.cookie.secure) {
      throw new ConfigError('COOKIE_SECURE=false is refused when NODE_ENV=production (refresh cookies must be Secure)');
    }
  }
  if (e.cookie.sameSite === 'none' && !e.cookie.secure) {
    throw new ConfigError(
      'COOKIE_SAMESITE=none needs COOKIE_SECURE=true (browsers drop SameSite=None cookies that are not Secure)',
    );
  }
  if (e.http.headersTimeoutMs > e.http.requestTimeoutMs) {
    throw new ConfigError('HTTP_HEADERS_TIMEOUT_MS must not be larger than HTTP_REQUEST_TIMEOUT_MS');
  }
  if ((e.webhooks.url === undefined) !== (e.webhooks.secret === undefined)) {
    throw new ConfigError(
      e.webhooks.url === undefined
        ? 'WEBHOOK_SECRET is set without WEBHOOK_URL: set both to send webhooks, or neither'
        : 'WEBHOOK_URL needs WEBHOOK_SECRET (whsec_$(openssl rand -base64 32)): events are only sent signed',
    );
  }
  if (e.realtime.adapter === 'redis' && e.redisUrl === undefined) {
    throw new ConfigError('REALTIME_ADAPTER=redis needs REDIS_URL');
  }
  if (e.realtime.adapter === 'postgres' && database.kind !== 'postgres') {
    throw new ConfigError('REALTIME_ADAPTER=postgres needs DATABASE_URL to name a PostgreSQL server');
  }
  if ((e.adminEmail === undefined) !== (e.adminPassword === undefined)) {
    const [set, missing] =
      e.adminEmail === undefined ? ['ADMIN_PASSWORD', 'ADMIN_EMAIL'] : ['ADMIN_EMAIL', 'ADMIN_PASSWORD'];
    throw new ConfigError(
      `${set} is set without ${missing}: set both (the administrator's address and password) or neither`,
    );
  }
  if (e.metrics.port !== undefined && e.metrics.port === e.port) {
    throw new ConfigError(`METRICS_PORT must differ from PORT (both are ${e.port})`);
  }
  if (e.databaseReadUrl !== undefined && database.kind !== 'postgres') {
    throw new ConfigError(
      'DATABASE_READ_URL names a replica of a PostgreSQL server: it needs DATABASE_URL to name that server (the embedded database has no replicas)',
    );
  }
  if (e.pgliteSocketPort !== undefined) {
    if (database.kind === 'postgres') {
      throw new ConfigError(
        'PGLITE_SOCKET_PORT serves the embedded database, and DATABASE_URL names PostgreSQL: connect psql to that server instead',
      );
    }
    if (e.nodeEnv === 'production') {
      throw new ConfigError(
        'PGLITE_SOCKET_PORT is refused when NODE_ENV=production: it lets anyone on this machine into the database without a password',
      );
    }
    if (e.pgliteSocketPort === e.port || e.pgliteSocketPort === e.metrics.port) {
      throw new ConfigError(`PGLITE_SOCKET_PORT must differ from PORT and METRICS_PORT (it is ${e.pgliteSocketPort})`);
    }
  }
}

/** COOKIE_DOMAIN must be PUBLIC_URL's host or a parent domain of it (browsers refuse the cookie otherwise). */
function checkCookieDomain(e: Declared, publicUrl: string): void {
  const domain = e.cookie.domain;
  if (domain === undefined) return;
  const publicHost = URL.parse(publicUrl)?.hostname;
  if (e.publicUrl === undefined) {
    throw new ConfigError("COOKIE_DOMAIN needs PUBLIC_URL (the service's address, whose host must be in that domain)");
  }
  if (publicHost === undefined || /^[\d.]+$|^\[/.test(publicHost)) {
    throw new ConfigError(
      'COOKIE_DOMAIN needs a PUBLIC_URL with a domain name: a cookie for an IP address takes no Domain',
    );
  }
  if (publicHost !== domain && !publicHost.endsWith(`.${domain}`)) {
    throw new ConfigError(
      `COOKIE_DOMAIN must be the host of PUBLIC_URL or a parent domain of it, or browsers refuse the cookie (got ${JSON.stringify(domain)} for ${publicHost})`,
    );
  }
}

/**
 * The WebAuthn relying party. The RP ID must be each origin's host or a parent domain of it, or
 * browsers refuse the ceremony: a WEBAUTHN_ORIGINS entry (or, by default, PUBLIC_URL's origin) that
 * is not stops the start with one line. Of CORS_ORIGINS, by default, those under the RP ID count.
 */
function webauthnFrom(e: Declared, publicUrl: string): Computed['webauthn'] {
  const publicOrigin = new URL(publicUrl).origin;
  const rpId = e.webauthn.rpId ?? new URL(publicUrl).hostname;
  const fits = (origin: string) => {
    const host = new URL(origin).hostname;
    // An IP address is a host of its own, never a parent of another.
    return host === rpId || (!/^[\d.]+$|^\[/.test(host) && host.endsWith(`.${rpId}`));
  };
  // Browsers run WebAuthn in secure contexts only: https, or http on localhost.
  const secure = (origin: string) => {
    const url = new URL(origin);
    return url.protocol === 'https:' || url.hostname === 'localhost' || url.hostname.endsWith('.localhost');
  };
  const named = e.webauthn.origins ?? [publicOrigin];
  const misfit = named.find((origin) => !fits(origin));
  if (misfit !== undefined) {
    throw new ConfigError(
      `WEBAUTHN_RP_ID must be the host of each WebAuthn origin or a parent domain of it (got ${JSON.stringify(rpId)} for ${misfit}; set WEBAUTHN_RP_ID or WEBAUTHN_ORIGINS)`,
    );
  }
  const allowed = e.webauthn.origins ?? [
    ...new Set([publicOrigin, ...e.corsOrigins.filter((o) => fits(o) && secure(o))]),
  ];
  return { rpId, rpName: e.webauthn.rpName ?? e.mfa.issuer ?? e.appName, origins: allowed };
}

/** Validates the environment once into a frozen Config, or throws a ConfigError naming the first bad variable. */
export function loadConfig(environment: Env = process.env): Readonly<Config> {
  // Empty strings mean "not set", as shells and compose files often pass them.
  const present = Object.fromEntries(Object.entries(environment).filter(([, v]) => v !== undefined && v !== ''));
  const parsed = envSchema.safeParse(present);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const name = String(issue?.path[0] ?? 'environment');
    const value = present[name];
    const secret =
      /SECRET|PASSWORD|SMTP_URL|REDIS_URL|DATABASE_URL|DATABASE_READ_URL|API_KEY|METRICS_TOKEN|WEBHOOK_URL/.test(name);
    const shown = value === undefined || secret ? '' : ` (got ${JSON.stringify(value)})`;
    throw new ConfigError(`${name} ${issue?.message ?? 'is invalid'}${shown}`);
  }
  const e = shaped(variables, parsed.data) as Declared;
  const database = databaseFrom(e);
  const publicUrl = e.publicUrl ?? `http://${e.host === '0.0.0.0' ? '127.0.0.1' : e.host}:${e.port}`;
  checkCombinations(e, database);
  const oauthProviders = oauthProvidersFrom(present);
  if (typeof oauthProviders === 'string') throw new ConfigError(oauthProviders);
  checkCookieDomain(e, publicUrl);
  const redirectOrigin = e.authRedirectUrl === undefined ? undefined : URL.parse(e.authRedirectUrl)?.origin;
  const {
    databaseUrl: _url,
    databaseReadUrl: _readUrl,
    databaseReadMaxLagMs: _lag,
    adminEmail,
    adminPassword,
    ...declared
  } = e;
  const maxWaiting = e.passwordHashing.maxWaiting;
  const computed: Computed = {
    database,
    publicUrl,
    tokenIssuer: e.publicUrl?.replace(/\/+$/, ''),
    emailVerifyUrl: e.emailVerifyUrl ?? `${publicUrl}/auth/verify-email`,
    resetPasswordUrl: e.resetPasswordUrl ?? `${publicUrl}/auth/reset-password`,
    authRedirectAllowlist:
      e.authRedirectAllowlist ?? (redirectOrigin === undefined || redirectOrigin === 'null' ? [] : [redirectOrigin]),
    oauthProviders,
    admin:
      adminEmail !== undefined && adminPassword !== undefined
        ? { email: adminEmail.toLowerCase(), password: adminPassword }
        : undefined,
    mfa: { ...e.mfa, issuer: e.mfa.issuer ?? e.appName },
    passwordHashing: {
      concurrency: e.passwordHashing.concurrency ?? Math.max(1, os.availableParallelism() - 1),
      maxWaiting,
      maxWaitingPerNetwork: Math.min(
        maxWaiting,
        e.passwordHashing.maxWaitingPerNetwork ?? Math.max(1, Math.floor(maxWaiting / 4)),
      ),
    },
    webauthn: webauthnFrom(e, publicUrl),
    realtime: {
      ...e.realtime,
      // The embedded database serves one process, so there are no other instances to reach.
      adapter:
        e.realtime.adapter !== 'auto'
          ? e.realtime.adapter
          : database.kind !== 'postgres'
            ? 'memory'
            : e.redisUrl !== undefined
              ? 'redis'
              : 'postgres',
    },
  };
  return deepFreeze({ ...declared, ...computed });
}
