import type { FastifyRequest } from 'fastify';
import { type AccessTokenClaims, verifyAccessToken } from '../auth/access-token.ts';
import { ApiError } from '../errors.ts';

/** The body of refresh and logout: the refresh token under either of the names clients send. */
export interface RefreshBody {
  refreshToken?: string | undefined;
  refresh_token?: string | undefined;
}

/**
 * The refresh token of a mobile or desktop body. Clients name it `refreshToken` (this service, and
 * InsForge's SDK when it refreshes by itself) or `refresh_token` (the SDK's refreshSession in server
 * mode); both may be sent only when they carry the same token, so that no request can mean two
 * different sessions.
 */
export function refreshTokenFromBody(body: RefreshBody | undefined): string | undefined {
  const camel = body?.refreshToken;
  const snake = body?.refresh_token;
  if (camel !== undefined && snake !== undefined && camel !== snake) {
    throw new ApiError(
      400,
      'INVALID_INPUT',
      'body.refreshToken and body.refresh_token name different tokens: send one of them',
    );
  }
  return camel ?? snake;
}

const MAX_AUTHORIZATION_LENGTH = 4096;

/**
 * The claims of the access token in the Authorization header, verified as bearerAuth verifies them
 * (signature, claims, expiry, and a session still open: 401 otherwise); undefined when there is
 * no Authorization header.
 */
export function verifiedBearerClaims(request: FastifyRequest): AccessTokenClaims | undefined {
  const header = request.headers.authorization;
  if (header === undefined) return undefined;
  if (header.length > MAX_AUTHORIZATION_LENGTH || !/^Bearer [^\s]+$/i.test(header)) {
    throw new ApiError(401, 'UNAUTHORIZED', 'The Authorization header must be a Bearer access token');
  }
  return verifyAccessToken(request.server, header.slice('Bearer '.length));
}
