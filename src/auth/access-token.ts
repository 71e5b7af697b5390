import { randomBytes } from 'node:crypto';
import { createDecoder, createSigner, createVerifier } from 'fast-jwt';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Aal, AuthMethod } from '../db/schema.ts';
import { ApiError } from '../errors.ts';
import type { SessionRevocations } from './session-revocations.ts';
import type { SigningKeys } from './signing-keys.ts';
import { VerifiedTokenCache } from './verified-token-cache.ts';

/** The `aud` of every access token. */
export const TOKEN_AUDIENCE = 'accounts-service:api';
/** The `iss` of the HS256 tokens of the versions before signing keys (see LegacyTokens). */
export const LEGACY_TOKEN_ISSUER = 'accounts-service';
/** The token-use claim value of access tokens; anything else (a refresh token, say) is refused as a Bearer token. */
export const ACCESS_TOKEN_USE = 'access';

/** The claims of an access token, as signed and as verified (the schema AccessTokenClaims). */
export interface AccessTokenClaims {
  sub: string;
  email: string;
  role: 'user' | 'admin';
  sid: string;
  token_use: typeof ACCESS_TOKEN_USE;
  /** The session's assurance level (absent from tokens issued before second factors: aal1). */
  aal?: Aal;
  /** How the session's factors were proven. */
  amr?: AuthMethod[];
  /** Present while the account has a verified factor this session has not proven. */
  next_aal?: 'aal2';
  iss?: string;
  aud?: string;
  iat?: number;
  exp?: number;
  jti?: string;
}

/** What the service puts in a token; the rest (iss, aud, iat, exp, jti) is added when it is signed. */
export type AccessTokenSubject = Omit<AccessTokenClaims, 'iss' | 'aud' | 'iat' | 'exp' | 'jti'>;

declare module 'fastify' {
  interface FastifyInstance {
    /** The sessions ended before their access tokens expire (buildApp decorates the app with them). */
    sessionRevocations: SessionRevocations;
    /** Signs and verifies access tokens (buildApp decorates the app with them). */
    accessTokens: AccessTokens;
    /** The keys that sign them. */
    signingKeys: SigningKeys;
  }
  interface FastifyRequest {
    /** The verified claims of the request's access token (set by bearerAuth). */
    user: AccessTokenClaims;
  }
}

const sessionRevoked = () => new ApiError('SESSION_REVOKED', 'This session has ended; sign in again');

/**
 * An access token that has expired or is not valid: `401 AUTH_UNAUTHORIZED` over HTTP, the code on
 * which InsForge's clients refresh the session by themselves and retry (a refresh cures both: an
 * expired token, and one signed with a secret the service no longer uses). The socket handshake
 * tells the two apart (`TOKEN_EXPIRED`, `UNAUTHORIZED`) from `reason`.
 */
export class AccessTokenRefused extends ApiError {
  readonly reason: 'expired' | 'invalid';

  constructor(reason: 'expired' | 'invalid') {
    super(
      'AUTH_UNAUTHORIZED',
      reason === 'expired' ? 'The access token has expired; refresh the session' : 'The access token is not valid',
    );
    this.reason = reason;
  }
}

const MAX_AUTHORIZATION_LENGTH = 4096;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Whether verified claims have the shape the service signs (and handlers rely on): an access
 * token's token_use, user and session ids that are UUIDs, a known role. A token with the right
 * signature but other claims (a refresh or id token, or anything the key signed elsewhere) is
 * refused like any invalid token instead of reaching a handler (where a non-UUID `sub` would fail
 * in the database).
 */
function hasAccessTokenClaims(verified: AccessTokenClaims): boolean {
  const claims = verified as unknown as Record<string, unknown>;
  return (
    claims.token_use === ACCESS_TOKEN_USE &&
    typeof claims.sub === 'string' &&
    UUID.test(claims.sub) &&
    typeof claims.sid === 'string' &&
    UUID.test(claims.sid) &&
    (claims.role === 'user' || claims.role === 'admin') &&
    typeof claims.email === 'string' &&
    (claims.aal === undefined || claims.aal === 'aal1' || claims.aal === 'aal2') &&
    (claims.next_aal === undefined || claims.next_aal === 'aal2')
  );
}

/**
 * The HS256 tokens of the versions before signing keys: accepted only where migration 0020 found
 * open sessions, and only until one access-token lifetime after it ran (by this instance's clock,
 * never by the token's `iat`).
 */
export interface LegacyTokens {
  secret: string;
  /** Milliseconds since the epoch; undefined when HS256 is never accepted (a fresh deployment). */
  acceptedUntil: number | undefined;
}

export interface AccessTokensOptions {
  /** The keys, and the issuer whose they are (the `iss` of every token). */
  keys: SigningKeys;
  ttlSeconds: number;
  legacy: LegacyTokens;
  /** Milliseconds since the epoch, for the legacy window (the app's clock). */
  now: () => number;
}

const CLAIMS_REQUIRED = ['sub', 'sid', 'role', 'token_use', 'iss', 'aud', 'iat', 'exp'];
/**
 * How far a token's `iat` may be past its key's retirement: an instance that has not heard of a
 * rotation yet signs with the old key for a moment (the change reaches every instance within 2 s),
 * and clocks differ a little.
 */
const RETIREMENT_MARGIN_MS = 60_000;

/**
 * Signs access tokens with the current signing key (its kid in the header, a fresh `jti` in each)
 * and verifies them with the key their kid names, while it is not revoked. Verified tokens are
 * remembered (VerifiedTokenCache) so that a client's token is checked once, not on every request;
 * every change of the keys empties that memory, so a revoked key's tokens are refused at once.
 */
export class AccessTokens {
  readonly #options: AccessTokensOptions;
  readonly #decode = createDecoder({ complete: true });
  readonly #verified = new VerifiedTokenCache<AccessTokenClaims>();
  #signer: { kid: string; sign: (payload: object) => string } | undefined;
  readonly #verifiers = new Map<string, (token: string) => AccessTokenClaims>();
  #legacyVerifier: ((token: string) => AccessTokenClaims) | undefined;

  constructor(options: AccessTokensOptions) {
    this.#options = options;
    options.keys.onChange(() => {
      this.#verified.clear();
      this.#verifiers.clear();
    });
  }

  sign(subject: AccessTokenSubject): string {
    const key = this.#options.keys.current();
    if (this.#signer?.kid !== key.kid) {
      const signer = createSigner({
        key: key.privatePem,
        algorithm: key.alg,
        kid: key.kid,
        iss: this.#options.keys.issuer,
        aud: TOKEN_AUDIENCE,
        expiresIn: this.#options.ttlSeconds * 1000,
      });
      this.#signer = { kid: key.kid, sign: (payload) => signer(payload) };
    }
    return this.#signer.sign({ ...subject, jti: randomBytes(16).toString('base64url') });
  }

  /**
   * The claims of a valid access token, or AccessTokenRefused. Does not check the session (see
   * bearerAuth and verifyAccessToken).
   */
  verify(token: string): Readonly<AccessTokenClaims> {
    const now = Date.now();
    const known = this.#verified.get(token, now);
    if (known !== undefined) return known;
    let decoded: { header: Record<string, unknown> };
    try {
      decoded = this.#decode(token) as { header: Record<string, unknown> };
    } catch {
      throw new AccessTokenRefused('invalid');
    }
    const { alg, kid } = decoded.header as { alg?: unknown; kid?: unknown };
    const legacy = alg === 'HS256';
    const verify = legacy ? this.#legacy() : typeof kid === 'string' ? this.#verifierFor(kid, alg) : undefined;
    if (verify === undefined) throw new AccessTokenRefused('invalid');
    let claims: AccessTokenClaims;
    try {
      claims = verify(token);
    } catch (err) {
      throw new AccessTokenRefused((err as { code?: string }).code === 'FAST_JWT_EXPIRED' ? 'expired' : 'invalid');
    }
    if (!hasAccessTokenClaims(claims) || !this.#withinLifetime(claims, legacy ? undefined : (kid as string))) {
      throw new AccessTokenRefused('invalid');
    }
    // Not an HS256 token: its window closes by the app's clock, which the cache does not follow.
    if (!legacy) this.#verified.set(token, claims, now);
    return claims;
  }

  /** The key id in a token's header, without verifying it (undefined when there is none). */
  kidOf(token: string): string | undefined {
    try {
      const { kid } = (this.#decode(token) as { header: Record<string, unknown> }).header;
      return typeof kid === 'string' ? kid : undefined;
    } catch {
      return undefined;
    }
  }

  /**
   * Whether the token lives no longer than the service issues them (`exp - iat` at most the
   * access-token TTL) and, when its key has been retired, was issued before that: whoever took a
   * retired key's private half cannot make tokens with it that outlive a rotation.
   */
  #withinLifetime(claims: AccessTokenClaims, kid: string | undefined): boolean {
    const { iat, exp } = claims;
    if (typeof iat !== 'number' || typeof exp !== 'number' || exp - iat > this.#options.ttlSeconds) return false;
    const retiredAt = kid === undefined ? undefined : this.#options.keys.verifying(kid)?.retiredAt;
    return retiredAt === undefined || iat * 1000 <= retiredAt + RETIREMENT_MARGIN_MS;
  }

  #verifierFor(kid: string, alg: unknown): ((token: string) => AccessTokenClaims) | undefined {
    const key = this.#options.keys.verifying(kid);
    if (key === undefined || key.alg !== alg) return undefined;
    let verifier = this.#verifiers.get(kid);
    if (verifier === undefined) {
      verifier = createVerifier({
        key: key.publicPem,
        algorithms: [key.alg],
        allowedIss: this.#options.keys.issuer,
        allowedAud: TOKEN_AUDIENCE,
        // allowedIss and allowedAud only check the claims when present: they must be required too,
        // or a token signed with the key but without iss or aud would pass as an access token.
        requiredClaims: CLAIMS_REQUIRED,
      }) as (token: string) => AccessTokenClaims;
      this.#verifiers.set(kid, verifier);
    }
    return verifier;
  }

  /** The HS256 verifier while the legacy window is open, else undefined. */
  #legacy(): ((token: string) => AccessTokenClaims) | undefined {
    const until = this.#options.legacy.acceptedUntil;
    if (until === undefined || this.#options.now() >= until) return undefined;
    this.#legacyVerifier ??= createVerifier({
      key: this.#options.legacy.secret,
      algorithms: ['HS256'],
      allowedIss: LEGACY_TOKEN_ISSUER,
      allowedAud: TOKEN_AUDIENCE,
      requiredClaims: CLAIMS_REQUIRED,
    }) as (token: string) => AccessTokenClaims;
    return this.#legacyVerifier;
  }
}

/** The `bearerAuth` security scheme: a valid, unexpired access token of a session still open, or 401. */
export async function bearerAuth(request: FastifyRequest): Promise<void> {
  const header = request.headers.authorization;
  // The service's tokens are a few hundred bytes; a huge one is refused before any work on it.
  if (header === undefined || header.length > MAX_AUTHORIZATION_LENGTH || !/^Bearer [^\s]+$/i.test(header)) {
    throw new ApiError('UNAUTHORIZED', 'A Bearer access token is required in the Authorization header');
  }
  request.user = verifyAccessToken(request.server, header.slice('Bearer '.length));
}

/**
 * Verifies an access token (from a request's Authorization header, or a socket's handshake): the
 * token itself, then its session (a token verified before its session ended is refused all the
 * same); 401 errors.
 */
export function verifyAccessToken(app: FastifyInstance, token: string): AccessTokenClaims {
  if (token.length > MAX_AUTHORIZATION_LENGTH) throw new AccessTokenRefused('invalid');
  const claims = app.accessTokens.verify(token);
  if (app.sessionRevocations.isRevoked(claims.sid)) throw sessionRevoked();
  return claims as AccessTokenClaims;
}
