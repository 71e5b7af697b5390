import type { FastifyJWTOptions } from '@fastify/jwt';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ApiError } from '../errors.ts';
import type { SessionRevocations } from './session-revocations.ts';
import { VerifiedTokenCache } from './verified-token-cache.ts';

export const TOKEN_ISSUER = 'accounts-service';
export const TOKEN_AUDIENCE = 'accounts-service:api';
/** The token-use claim value of access tokens; anything else (a refresh token, say) is refused as a Bearer token. */
export const ACCESS_TOKEN_USE = 'access';

/** The claims of an access token, as signed and as verified. */
export interface AccessTokenClaims {
  sub: string;
  email: string;
  role: 'user' | 'admin';
  sid: string;
  token_use: typeof ACCESS_TOKEN_USE;
  iss?: string;
  aud?: string;
  iat?: number;
  exp?: number;
}

declare module '@fastify/jwt' {
  interface FastifyJWT {
    payload: AccessTokenClaims;
    user: AccessTokenClaims;
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The sessions ended before their access tokens expire (buildApp decorates the app with them). */
    sessionRevocations: SessionRevocations;
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

/** @fastify/jwt options: HS256 only, on both signing and verifying, with issuer and audience checked. */
export function jwtOptions(secret: string, accessTokenTtlSeconds: number): FastifyJWTOptions {
  return {
    secret,
    sign: { algorithm: 'HS256', iss: TOKEN_ISSUER, aud: TOKEN_AUDIENCE, expiresIn: accessTokenTtlSeconds },
    verify: {
      algorithms: ['HS256'],
      allowedIss: TOKEN_ISSUER,
      allowedAud: TOKEN_AUDIENCE,
      // allowedIss and allowedAud only check the claims when present: they must be required too,
      // or a token signed with the key but without iss or aud would pass as an access token.
      requiredClaims: ['sub', 'sid', 'role', 'token_use', 'iss', 'aud', 'iat', 'exp'],
    },
  };
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
    typeof claims.email === 'string'
  );
}

/** The `bearerAuth` security scheme: a valid, unexpired access token of a session still open, or 401. */
export async function bearerAuth(request: FastifyRequest): Promise<void> {
  const header = request.headers.authorization;
  // The service's tokens are a few hundred bytes; a huge one is refused before any work on it.
  if (header === undefined || header.length > MAX_AUTHORIZATION_LENGTH || !/^Bearer [^\s]+$/i.test(header)) {
    throw new ApiError('UNAUTHORIZED', 'A Bearer access token is required in the Authorization header');
  }
  const token = header.slice('Bearer '.length);
  const cache = verifiedTokensOf(request.server);
  const known = cache.get(token, Date.now());
  if (known !== undefined) {
    // Checked after the cache: a token verified before its session ended is refused all the same.
    if (request.server.sessionRevocations.isRevoked(known.sid)) throw sessionRevoked();
    request.user = known;
    return;
  }
  try {
    await request.jwtVerify();
  } catch (err) {
    const expired = (err as { code?: string }).code === 'FST_JWT_AUTHORIZATION_TOKEN_EXPIRED';
    throw new AccessTokenRefused(expired ? 'expired' : 'invalid');
  }
  if (!hasAccessTokenClaims(request.user)) throw new AccessTokenRefused('invalid');
  cache.set(token, request.user, Date.now());
  if (request.server.sessionRevocations.isRevoked(request.user.sid)) throw sessionRevoked();
}

/**
 * Verifies an access token given outside an Authorization header (a socket's handshake): the same
 * checks as bearerAuth (its session included), the same 401 errors.
 */
export function verifyAccessToken(app: FastifyInstance, token: string): AccessTokenClaims {
  if (token.length > MAX_AUTHORIZATION_LENGTH) throw new AccessTokenRefused('invalid');
  const cache = verifiedTokensOf(app);
  const known = cache.get(token, Date.now());
  if (known !== undefined) {
    if (app.sessionRevocations.isRevoked(known.sid)) throw sessionRevoked();
    return known;
  }
  let claims: AccessTokenClaims;
  try {
    claims = app.jwt.verify<AccessTokenClaims>(token);
  } catch (err) {
    // app.jwt.verify throws the verifier's own error (fast-jwt's), not the request decorator's.
    throw new AccessTokenRefused((err as { code?: string }).code === 'FAST_JWT_EXPIRED' ? 'expired' : 'invalid');
  }
  if (!hasAccessTokenClaims(claims)) throw new AccessTokenRefused('invalid');
  cache.set(token, claims, Date.now());
  if (app.sessionRevocations.isRevoked(claims.sid)) throw sessionRevoked();
  return claims;
}

// One cache per app: a token is only known to the app (and signing key) that verified it.
const verifiedTokens = new WeakMap<FastifyInstance, VerifiedTokenCache<AccessTokenClaims>>();
function verifiedTokensOf(app: FastifyInstance): VerifiedTokenCache<AccessTokenClaims> {
  let cache = verifiedTokens.get(app);
  if (cache === undefined) {
    cache = new VerifiedTokenCache();
    verifiedTokens.set(app, cache);
  }
  return cache;
}
