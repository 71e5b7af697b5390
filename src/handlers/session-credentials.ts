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
      'INVALID_INPUT',
      'body.refreshToken and body.refresh_token name different tokens: send one of them',
    );
  }
  return camel ?? snake;
}

/**
 * Every value of the cookie `name` in the Cookie header, in the order sent, empty ones left out. A
 * browser sends one per path and domain it holds (longer paths first), so a cookie planted on a
 * longer path by a sibling host comes before the service's own; parsers that keep only the first
 * (the cookie plugin's) would see only the planted one.
 */
export function cookieValues(request: FastifyRequest, name: string): string[] {
  const header = request.headers.cookie;
  if (header === undefined) return [];
  const values: string[] = [];
  for (const pair of header.split(';')) {
    const eq = pair.indexOf('=');
    if (eq === -1 || pair.slice(0, eq).trim() !== name) continue;
    let value = pair.slice(eq + 1).trim();
    if (value.length >= 2 && value.startsWith('"') && value.endsWith('"')) value = value.slice(1, -1);
    try {
      value = decodeURIComponent(value);
    } catch {
      // Kept as sent: it matches no token, and the next value is looked at.
    }
    if (value !== '') values.push(value);
  }
  return values;
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
    throw new ApiError('UNAUTHORIZED', 'The Authorization header must be a Bearer access token');
  }
  return verifyAccessToken(request.server, header.slice('Bearer '.length));
}
