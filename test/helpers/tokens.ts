import { createHmac, randomUUID, sign } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import type { Kysely } from 'kysely';
import { TOKEN_AUDIENCE } from '../../src/auth/access-token.ts';
import { deriveKeys, unseal } from '../../src/auth/crypto.ts';
import { resolveJwtSecret } from '../../src/auth/service-secret.ts';
import { type Config, loadConfig } from '../../src/config.ts';
import { listSigningKeys } from '../../src/db/repositories/signing-keys.ts';
import type { Database } from '../../src/db/schema.ts';

/** A signed access token for a made-up user, for operations whose behaviour does not need a real account. */
export function accessTokenFor(app: FastifyInstance, role: 'user' | 'admin' = 'user'): string {
  return app.accessTokens.sign({
    sub: randomUUID(),
    email: 'someone@example.com',
    role,
    sid: randomUUID(),
    token_use: 'access',
  });
}

/** The private half of a key, as one who stole it would hold it. */
export interface StolenKey {
  kid: string;
  alg: 'ES256' | 'RS256' | 'EdDSA';
  privatePem: string;
}

/**
 * The service's current signing key, read from the database and opened with the key derived from
 * JWT_SECRET: what a test needs to sign tokens the service accepts with exactly the claims it wants.
 */
export async function currentSigningKey(config: Readonly<Config>, db: Kysely<Database>): Promise<StolenKey> {
  const secret = await resolveJwtSecret(config, db);
  const row = (await listSigningKeys(db)).find((k) => k.status === 'current');
  if (row === undefined) throw new Error('no current signing key');
  return {
    kid: row.kid,
    alg: row.alg,
    privatePem: unseal(deriveKeys(secret).signingKeys, row.private_key_sealed, row.kid),
  };
}

const b64 = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url');

/**
 * A JWT built exactly as a test needs: with an HMAC secret (HS256 by default; the service accepts
 * none on a fresh deployment), with a signing key's private half (its own algorithm and kid), or
 * unsigned (`null`, for `alg: none`).
 */
export function forgeJwt(key: string | StolenKey | null, claims: Record<string, unknown>, alg = 'HS256'): string {
  if (key !== null && typeof key === 'object') {
    // By hand, not with a JWT library: a forger signs claims no library would (an `exp` string).
    const head = `${b64({ alg: key.alg, typ: 'JWT', ...(key.kid === '' ? {} : { kid: key.kid }) })}.${b64(claims)}`;
    const signature = sign(key.alg === 'EdDSA' ? null : 'sha256', Buffer.from(head), {
      key: key.privatePem,
      ...(key.alg === 'ES256' ? { dsaEncoding: 'ieee-p1363' as const } : {}),
    });
    return `${head}.${signature.toString('base64url')}`;
  }
  const head = `${b64({ alg, typ: 'JWT' })}.${b64(claims)}`;
  if (key === null) return `${head}.`;
  return `${head}.${createHmac('sha256', key).update(head).digest('base64url')}`;
}

/** The `iss` of the tokens of an app built with the test defaults (its PUBLIC_URL). */
export const TEST_ISSUER = loadConfig({ NODE_ENV: 'test' }).publicUrl.replace(/\/+$/, '');

/** Access-token claims as the service signs them, valid for ten minutes from `now` (seconds). */
export function accessClaims(now = Math.floor(Date.now() / 1000), overrides: Record<string, unknown> = {}) {
  return {
    sub: randomUUID(),
    email: 'someone@example.com',
    role: 'user',
    sid: randomUUID(),
    token_use: 'access',
    iss: TEST_ISSUER,
    aud: TOKEN_AUDIENCE,
    iat: now,
    exp: now + 600,
    jti: randomUUID(),
    ...overrides,
  };
}
