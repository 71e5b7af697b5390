// Authorization headers for the fuzz test: the real tokens of a session, and every way a Bearer
// token can be wrong (malformed, expired, signed with another key, alg none, other algorithms,
// refresh tokens presented as access tokens, token_use other than access, missing or wrong claims,
// tampered, oversized), each with the answer the spec promises for it on a secured operation.
import { createHmac, randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { accessClaims, forgeJwt, type StolenKey } from './tokens.ts';

/** What the holder of a header gets from a Bearer-secured operation. */
export type AuthExpectation = 'pass' | 'UNAUTHORIZED' | 'AUTH_UNAUTHORIZED';

/** Sound ways to write the scheme (it is case-insensitive) and broken ones. */
const GOOD_SCHEMES = ['Bearer ', 'bearer ', 'BEARER '] as const;
const BAD_SCHEMES = ['', 'Bearer', 'Bearer  ', 'Bearer\t', 'Bearer:', 'Basic ', 'Token ', 'JWT ', 'Bearer , '] as const;

export type AuthSpec =
  | { kind: 'none' }
  /** A token of a real session of the app: a user's or an administrator's. */
  | { kind: 'session'; role: 'user' | 'admin'; scheme: string }
  /** Signed with the app's key for a user that does not exist. */
  | { kind: 'signed'; role: 'user' | 'admin'; scheme: string }
  | { kind: 'badScheme'; scheme: string }
  | { kind: 'malformed'; header: string }
  | { kind: 'expired'; secondsAgo: number; scheme: string }
  | { kind: 'expiredOtherKey'; secondsAgo: number }
  | { kind: 'otherKey'; key: string }
  | { kind: 'algNone'; alg: string; signature: 'empty' | 'hmac' | 'junk' }
  | { kind: 'otherAlg'; alg: 'HS384' | 'HS512' | 'RS256' | 'ES256' | 'PS256' | 'EdDSA' | 'hs256' }
  | { kind: 'refreshToken' }
  | { kind: 'tokenUse'; value: unknown }
  | { kind: 'claims'; change: ClaimChange }
  | { kind: 'tampered'; how: 'payload' | 'truncated' | 'extraSegment' | 'header' | 'swapSignature' }
  | { kind: 'oversized'; length: number };

type ClaimChange =
  | 'wrongIssuer'
  | 'wrongAudience'
  | 'noIssuer'
  | 'noAudience'
  | 'noSub'
  | 'noSid'
  | 'noExp'
  | 'noIat'
  | 'noTokenUse'
  | 'notYetValid'
  | 'expAsString'
  | 'expNull'
  | 'subNotUuid'
  | 'sidNotUuid'
  | 'roleUnknown'
  | 'noEmail';

/** Auth that a secured operation lets through, in the forms a client may send it. */
export function passingAuthArbitrary(): fc.Arbitrary<AuthSpec> {
  const scheme = fc.constantFrom(...GOOD_SCHEMES);
  const role = fc.constantFrom('user' as const, 'admin' as const);
  return fc.oneof(
    { weight: 4, arbitrary: fc.record({ kind: fc.constant('session' as const), role, scheme }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('signed' as const), role, scheme }) },
  );
}

/** Every way of getting Bearer authentication wrong. */
export function failingAuthArbitrary(): fc.Arbitrary<AuthSpec> {
  const scheme = fc.constantFrom(...GOOD_SCHEMES);
  const ago = fc.oneof(fc.constantFrom(1, 2, 60, 3600), fc.integer({ min: 1, max: 10 ** 8 }));
  return fc.oneof(
    { weight: 2, arbitrary: fc.constant({ kind: 'none' as const }) },
    {
      weight: 1,
      arbitrary: fc.record({ kind: fc.constant('badScheme' as const), scheme: fc.constantFrom(...BAD_SCHEMES) }),
    },
    {
      weight: 3,
      arbitrary: fc.record({
        kind: fc.constant('malformed' as const),
        header: fc.oneof(
          fc.constantFrom(
            '',
            'Bearer',
            'Bearer ',
            'Bearer null',
            'Bearer undefined',
            'Bearer [object Object]',
            'Bearer a.b',
            'Bearer a.b.c',
            'Bearer ...',
            'Bearer ..',
            'Bearer eyJhbGciOiJIUzI1NiJ9',
            'Bearer eyJhbGciOiJIUzI1NiJ9..',
            'Bearer e30.e30.',
            'Bearer bm90IGpzb24.bm90IGpzb24.c2ln',
            'Basic dXNlcjpwYXNzd29yZA==',
            'Bearer %00',
          ),
          fc.string({ maxLength: 60 }).map((s) => `Bearer ${s}`),
          fc.string({ unit: 'binary', maxLength: 40 }),
          fc
            .tuple(
              fc.base64String({ maxLength: 40 }),
              fc.base64String({ maxLength: 40 }),
              fc.base64String({ maxLength: 44 }),
            )
            .map((parts) => `Bearer ${parts.join('.')}`),
        ),
      }),
    },
    { weight: 3, arbitrary: fc.record({ kind: fc.constant('expired' as const), secondsAgo: ago, scheme }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('expiredOtherKey' as const), secondsAgo: ago }) },
    {
      weight: 3,
      arbitrary: fc.record({
        kind: fc.constant('otherKey' as const),
        key: fc.oneof(fc.string({ maxLength: 64 }), fc.constantFrom('', 'secret', 'x'.repeat(32))),
      }),
    },
    {
      weight: 3,
      arbitrary: fc.record({
        kind: fc.constant('algNone' as const),
        alg: fc.constantFrom('none', 'None', 'NONE', 'nOnE', ''),
        signature: fc.constantFrom('empty' as const, 'hmac' as const, 'junk' as const),
      }),
    },
    {
      weight: 2,
      arbitrary: fc.record({
        kind: fc.constant('otherAlg' as const),
        alg: fc.constantFrom(
          'HS384' as const,
          'HS512' as const,
          'RS256' as const,
          'ES256' as const,
          'PS256' as const,
          'EdDSA' as const,
          'hs256' as const,
        ),
      }),
    },
    { weight: 3, arbitrary: fc.constant({ kind: 'refreshToken' as const }) },
    {
      weight: 3,
      arbitrary: fc.record({
        kind: fc.constant('tokenUse' as const),
        value: fc.oneof(
          fc.constantFrom(
            'refresh',
            'id',
            'ACCESS',
            'access ',
            ' access',
            'access\u0000',
            '',
            null,
            0,
            1,
            true,
            ['access'],
            {},
          ),
          fc.string({ maxLength: 10 }).filter((s) => s !== 'access'),
        ),
      }),
    },
    {
      weight: 3,
      arbitrary: fc.record({
        kind: fc.constant('claims' as const),
        change: fc.constantFrom<ClaimChange>(
          'wrongIssuer',
          'wrongAudience',
          'noIssuer',
          'noAudience',
          'noSub',
          'noSid',
          'noExp',
          'noIat',
          'noTokenUse',
          'notYetValid',
          'expAsString',
          'expNull',
          'subNotUuid',
          'sidNotUuid',
          'roleUnknown',
          'noEmail',
        ),
      }),
    },
    {
      weight: 2,
      arbitrary: fc.record({
        kind: fc.constant('tampered' as const),
        how: fc.constantFrom(
          'payload' as const,
          'truncated' as const,
          'extraSegment' as const,
          'header' as const,
          'swapSignature' as const,
        ),
      }),
    },
    {
      weight: 1,
      arbitrary: fc.record({ kind: fc.constant('oversized' as const), length: fc.integer({ min: 4000, max: 12000 }) }),
    },
  );
}

/**
 * The answer a secured operation must give to this header (before anything else about the
 * request). `received` is the header's value as the server reads it (undefined: none sent): no
 * `Bearer <token>` within 4 KiB there is "no access token" (UNAUTHORIZED); a token that is
 * expired or not valid is AUTH_UNAUTHORIZED, the code on which clients refresh.
 */
export function authExpectation(spec: AuthSpec, received: string | undefined): AuthExpectation {
  if (spec.kind === 'session' || spec.kind === 'signed') return 'pass';
  if (received === undefined || received.length > 4096 || !/^Bearer [^\s]+$/i.test(received)) return 'UNAUTHORIZED';
  return 'AUTH_UNAUTHORIZED';
}

/** Where real tokens come from when a header is built. */
export interface TokenSource {
  /** The key the app signs access tokens with. */
  key: StolenKey;
  /** JWT_SECRET: an HMAC with it passes for nothing (HS256 is not accepted on a fresh deployment). */
  jwtSecret: string;
  /** Another key, which the app must not accept. */
  otherKey: string;
  /** A token of a real session (`pick` chooses among those known), or undefined when there is none yet. */
  sessionToken(role: 'user' | 'admin', pick: number): string | undefined;
  /** A real refresh token, or undefined. */
  refreshToken(pick: number): string | undefined;
  /** A token signed by the app itself for made-up claims. */
  sign(claims: Record<string, unknown>): string;
}

const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');

function signWith(
  secret: string,
  header: Record<string, unknown>,
  claims: Record<string, unknown>,
  hash = 'sha256',
): string {
  const head = `${b64(header)}.${b64(claims)}`;
  return `${head}.${createHmac(hash, secret).update(head).digest('base64url')}`;
}

/** The Authorization header value for `spec`, or undefined for none. */
export function authorizationHeader(spec: AuthSpec, source: TokenSource, pick: number): string | undefined {
  const now = Math.floor(Date.now() / 1000);
  const fresh = (overrides: Record<string, unknown> = {}) => accessClaims(now, overrides);
  const real = () => source.sessionToken('user', pick) ?? forgeJwt(source.key, fresh());
  switch (spec.kind) {
    case 'none':
      return undefined;
    case 'session':
      return spec.scheme + (source.sessionToken(spec.role, pick) ?? forgeJwt(source.key, fresh({ role: spec.role })));
    case 'signed':
      return (
        spec.scheme +
        source.sign({
          sub: randomUUID(),
          email: 'fuzz@example.com',
          role: spec.role,
          sid: randomUUID(),
          token_use: 'access',
        })
      );
    case 'badScheme':
      return spec.scheme + real();
    case 'malformed':
      return spec.header;
    case 'expired':
      return (
        spec.scheme + forgeJwt(source.key, fresh({ iat: now - spec.secondsAgo - 900, exp: now - spec.secondsAgo }))
      );
    case 'expiredOtherKey':
      return `Bearer ${forgeJwt(source.otherKey, fresh({ iat: now - spec.secondsAgo - 900, exp: now - spec.secondsAgo }))}`;
    case 'otherKey':
      return `Bearer ${forgeJwt(spec.key === source.jwtSecret ? `${spec.key}x` : spec.key, fresh())}`;
    case 'algNone': {
      const unsigned = forgeJwt(null, fresh(), spec.alg);
      const tail =
        spec.signature === 'empty'
          ? ''
          : spec.signature === 'hmac'
            ? createHmac('sha256', source.jwtSecret).update(unsigned.slice(0, -1)).digest('base64url')
            : 'c2lnbmF0dXJl';
      return `Bearer ${unsigned}${tail}`;
    }
    case 'otherAlg': {
      const hash = spec.alg === 'HS384' ? 'sha384' : spec.alg === 'HS512' ? 'sha512' : 'sha256';
      return `Bearer ${signWith(source.jwtSecret, { alg: spec.alg, typ: 'JWT' }, fresh(), hash)}`;
    }
    case 'refreshToken':
      return `Bearer ${source.refreshToken(pick) ?? 'pzRr3YP0PxKdC6W0P3u_r5AnV17-IeYpnDKdYN6nD94'}`;
    case 'tokenUse':
      return `Bearer ${forgeJwt(source.key, fresh({ token_use: spec.value }))}`;
    case 'claims':
      return `Bearer ${forgeJwt(source.key, changedClaims(fresh(), spec.change, now))}`;
    case 'tampered': {
      const token = real();
      const [header = '', payload = '', signature = ''] = token.split('.');
      switch (spec.how) {
        case 'payload': {
          const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as Record<string, unknown>;
          return `Bearer ${header}.${b64({ ...claims, role: 'admin', sub: randomUUID() })}.${signature}`;
        }
        case 'truncated':
          return `Bearer ${header}.${payload}.${signature.slice(0, 20)}`;
        case 'extraSegment':
          return `Bearer ${token}.${signature}`;
        case 'header':
          return `Bearer ${b64({ alg: 'HS256', typ: 'JWT', kid: '../../etc/passwd' })}.${payload}.${signature}`;
        case 'swapSignature':
          return `Bearer ${header}.${payload}.${forgeJwt(source.otherKey, fresh()).split('.')[2]}`;
      }
      return undefined;
    }
    case 'oversized':
      return `Bearer ${'eyJ'.padEnd(spec.length, 'A')}`;
  }
}

function changedClaims(claims: Record<string, unknown>, change: ClaimChange, now: number): Record<string, unknown> {
  const without = (name: string) => {
    const { [name]: _, ...rest } = claims;
    return rest;
  };
  switch (change) {
    case 'wrongIssuer':
      return { ...claims, iss: 'someone-else' };
    case 'wrongAudience':
      return { ...claims, aud: 'someone-else' };
    case 'noIssuer':
      return without('iss');
    case 'noAudience':
      return without('aud');
    case 'noSub':
      return without('sub');
    case 'noSid':
      return without('sid');
    case 'noExp':
      return without('exp');
    case 'noIat':
      return without('iat');
    case 'noTokenUse':
      return without('token_use');
    case 'notYetValid':
      return { ...claims, nbf: now + 3600 };
    case 'expAsString':
      return { ...claims, exp: String(now + 600) };
    case 'expNull':
      return { ...claims, exp: null };
    case 'subNotUuid':
      return { ...claims, sub: 'not-a-uuid' };
    case 'sidNotUuid':
      return { ...claims, sid: 42 };
    case 'roleUnknown':
      return { ...claims, role: 'superuser' };
    case 'noEmail':
      return without('email');
  }
}
