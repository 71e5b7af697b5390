import { createHmac, randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { TOKEN_AUDIENCE, TOKEN_ISSUER } from '../../src/auth/access-token.ts';

/** A signed access token for a made-up user, for operations whose behaviour does not need a real account. */
export function accessTokenFor(app: FastifyInstance, role: 'user' | 'admin' = 'user'): string {
  return app.jwt.sign({
    sub: randomUUID(),
    email: 'someone@example.com',
    role,
    sid: randomUUID(),
    token_use: 'access',
  });
}

const b64 = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url');

/** A JWT built by hand, so that tests can forge exactly the header and claims they need. */
export function forgeJwt(secret: string | null, claims: Record<string, unknown>, alg = 'HS256'): string {
  const head = `${b64({ alg, typ: 'JWT' })}.${b64(claims)}`;
  if (secret === null) return `${head}.`;
  return `${head}.${createHmac('sha256', secret).update(head).digest('base64url')}`;
}

/** Access-token claims as the service signs them, valid for ten minutes from `now` (seconds). */
export function accessClaims(now = Math.floor(Date.now() / 1000), overrides: Record<string, unknown> = {}) {
  return {
    sub: randomUUID(),
    email: 'someone@example.com',
    role: 'user',
    sid: randomUUID(),
    token_use: 'access',
    iss: TOKEN_ISSUER,
    aud: TOKEN_AUDIENCE,
    iat: now,
    exp: now + 600,
    ...overrides,
  };
}
