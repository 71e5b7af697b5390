import { fullFormats } from 'ajv-formats/dist/formats.js';
import { createRemoteJWKSet, type JWTPayload, jwtVerify } from 'jose';
import type * as oidc from 'openid-client';
import type { Clock } from '../../clock.ts';
import { ApiError } from '../../errors.ts';
import type { GithubProviderConfig, OAuthProviderConfig, OidcProviderConfig } from './provider-config.ts';

/** The OAuth client library, loaded at the first sign-in through a provider (an idle service does not hold it). */
const openidClient = () => import('openid-client');

/** Who the provider says signed in. `emailVerified` is true only when the provider asserts it. */
export interface ProviderIdentity {
  subject: string;
  email: string | undefined;
  emailVerified: boolean;
  name: string | undefined;
  picture: string | undefined;
}

/** What the service keeps between sending the browser to the provider and its return. */
export interface AuthorizationChecks {
  state: string;
  nonce: string;
  /** The PKCE verifier towards the provider (the app has its own towards the service). */
  verifier: string;
}

/** The `email` format of the contract's validator (ajv-formats). */
const EMAIL_FORMAT = fullFormats.email as RegExp;

/** Seconds any call to a provider may take. */
const PROVIDER_TIMEOUT_S = 10;
/** Seconds after its `iat` that an ID token is still taken. */
const MAX_ID_TOKEN_AGE_S = 24 * 3600;
/** Seconds of clock difference allowed with a provider. */
const CLOCK_TOLERANCE_S = 30;

function providerUnavailable(name: string): ApiError {
  return new ApiError('PROVIDER_UNAVAILABLE', `The OAuth provider "${name}" could not be reached`);
}

/** The provider's answer did not pass the checks, or it answered with an error: the callback's `?error=`. */
export class ProviderRefused extends Error {
  override name = 'ProviderRefused';
}

/**
 * A provider's address as an account's: only what sign-up accepts (ASCII, the contract's `email`
 * format, at most 254 characters), then in lower case; anything else is no address. Checked before
 * lower-casing, which would turn some non-ASCII letters into ASCII ones (U+212A into `k`).
 */
export function accountEmail(value: unknown): string | undefined {
  if (typeof value !== 'string' || value.length > 254 || !EMAIL_FORMAT.test(value)) return undefined;
  return value.toLowerCase();
}

/**
 * Whether a provider is Microsoft's (the built-in name `microsoft`, or an issuer on
 * login.microsoftonline.com: Entra ID under a custom name), whose optional claim `xms_edov` is its
 * way of vouching for an address. The claim means nothing coming from anyone else: any issuer may
 * put any claim in its tokens.
 */
export function vouchesWithXmsEdov(config: OidcProviderConfig): boolean {
  return config.name === 'microsoft' || URL.parse(config.issuer)?.hostname === 'login.microsoftonline.com';
}

function identityFromClaims(claims: JWTPayload, microsoft: boolean): ProviderIdentity {
  const text = (v: unknown) => (typeof v === 'string' && v !== '' ? v : undefined);
  const email = accountEmail(claims.email);
  // Some issuers send email_verified as the string "true". Microsoft sends none; its optional claim
  // xms_edov (the address's domain is verified by its owner) says as much, when it is asked for,
  // and only Microsoft's xms_edov counts.
  const yes = (v: unknown) => v === true || v === 'true' || v === 1 || v === '1';
  const verified =
    claims.email_verified === true || claims.email_verified === 'true' || (microsoft && yes(claims.xms_edov));
  return {
    subject: String(claims.sub),
    email,
    emailVerified: verified && email !== undefined,
    name: text(claims.name),
    picture: text(claims.picture),
  };
}

/** An ID token that passed every check: who it names, and until when it could be taken. */
export interface VerifiedIdToken {
  identity: ProviderIdentity;
  /** After this the token is refused anyway (its expiry, or 24 hours after its `iat`, plus the clock tolerance). */
  usableUntil: Date;
}

/** The client of one provider: its authorization URL, the callback's exchange, and ID-token checks. */
export interface ProviderClient {
  readonly config: OAuthProviderConfig;
  authorizationUrl(callbackUrl: string, checks: AuthorizationChecks): Promise<string>;
  /** The identity behind the provider's return to `currentUrl`; throws ProviderRefused when it does not check out. */
  finish(currentUrl: URL, checks: AuthorizationChecks): Promise<ProviderIdentity>;
  /**
   * An ID token issued for this service's client id (401 ID_TOKEN_INVALID otherwise). `nonce` is the
   * request's: when given, the token must carry it; when not, the token must carry none.
   */
  verifyIdToken(token: string, nonce: string | undefined): Promise<VerifiedIdToken>;
}

function oidcClient(config: OidcProviderConfig, clock: Clock): ProviderClient {
  const insecure = new URL(config.issuer).protocol === 'http:';
  const microsoft = vouchesWithXmsEdov(config);
  let discovered: Promise<oidc.Configuration> | undefined;
  let keys: ReturnType<typeof createRemoteJWKSet> | undefined;

  /** Discovery, once; a failure is retried on the next use. */
  function configuration(): Promise<oidc.Configuration> {
    discovered ??= openidClient()
      .then((client) =>
        client.discovery(
          new URL(config.issuer),
          config.clientId,
          undefined,
          client.ClientSecretBasic(config.clientSecret),
          {
            timeout: PROVIDER_TIMEOUT_S,
            ...(insecure ? { execute: [client.allowInsecureRequests] } : {}),
          },
        ),
      )
      .catch((err: unknown) => {
        discovered = undefined;
        throw err;
      });
    return discovered.catch(() => {
      throw providerUnavailable(config.name);
    });
  }

  async function keySet() {
    const metadata = (await configuration()).serverMetadata();
    if (metadata.jwks_uri === undefined) throw providerUnavailable(config.name);
    keys ??= createRemoteJWKSet(new URL(metadata.jwks_uri), { timeoutDuration: PROVIDER_TIMEOUT_S * 1000 });
    return keys;
  }

  /**
   * Signature (the issuer's keys), issuer, audience, expiry and nonce of an ID token. The nonce is
   * the one the sign-in asked for: a token must carry it when there is one, and carry none when
   * there is none (a token minted for a sign-in that asked for a nonce is not taken without it).
   */
  async function checkIdToken(token: string, nonce: string | undefined): Promise<VerifiedIdToken> {
    const jwks = await keySet();
    // Google's older tokens name the issuer without the scheme.
    const issuers =
      config.issuer === 'https://accounts.google.com' ? [config.issuer, 'accounts.google.com'] : config.issuer;
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, jwks, {
        issuer: issuers,
        audience: config.clientId,
        currentDate: clock.now(),
        requiredClaims: ['sub', 'exp', 'iat'],
        clockTolerance: CLOCK_TOLERANCE_S,
        // Providers issue ID tokens for minutes to an hour; one issued long ago is not a sign-in now.
        maxTokenAge: MAX_ID_TOKEN_AGE_S,
      }));
    } catch (err) {
      const code = (err as { code?: string }).code ?? '';
      // The keys could not be fetched: the provider's fault, not the token's.
      if (code === 'ERR_JWKS_TIMEOUT' || !code.startsWith('ERR_J')) throw providerUnavailable(config.name);
      throw new ApiError('ID_TOKEN_INVALID', 'The ID token is not valid for this service');
    }
    // A token for several audiences must name this client as the party it was issued to (OpenID
    // Connect Core 3.1.3.7); a single audience may name another (Google's Android client ids do).
    const severalAudiences = Array.isArray(payload.aud) && payload.aud.length > 1;
    const issuedLater =
      typeof payload.iat === 'number' && payload.iat * 1000 > clock.now().getTime() + CLOCK_TOLERANCE_S * 1000;
    if ((severalAudiences && payload.azp !== config.clientId) || issuedLater) {
      throw new ApiError('ID_TOKEN_INVALID', 'The ID token is not valid for this service');
    }
    if (nonce === undefined ? payload.nonce !== undefined : payload.nonce !== nonce) {
      throw new ApiError(
        'ID_TOKEN_INVALID',
        nonce === undefined
          ? 'The ID token carries a nonce: send the nonce the sign-in asked for'
          : 'The ID token does not carry this nonce',
      );
    }
    // requiredClaims made exp and iat numbers.
    const until = Math.min(Number(payload.exp), Number(payload.iat) + MAX_ID_TOKEN_AGE_S) + CLOCK_TOLERANCE_S;
    return { identity: identityFromClaims(payload, microsoft), usableUntil: new Date(until * 1000) };
  }

  return {
    config,
    async authorizationUrl(callbackUrl, checks) {
      const c = await configuration();
      const oidc = await openidClient();
      return oidc.buildAuthorizationUrl(c, {
        redirect_uri: callbackUrl,
        scope: config.scopes.join(' '),
        state: checks.state,
        nonce: checks.nonce,
        code_challenge: await oidc.calculatePKCECodeChallenge(checks.verifier),
        code_challenge_method: 'S256',
      }).href;
    },
    async finish(currentUrl, checks) {
      const c = await configuration();
      const oidc = await openidClient();
      let idToken: string | undefined;
      try {
        const tokens = await oidc.authorizationCodeGrant(c, currentUrl, {
          pkceCodeVerifier: checks.verifier,
          expectedState: checks.state,
          expectedNonce: checks.nonce,
          idTokenExpected: true,
        });
        idToken = tokens.id_token;
      } catch (err) {
        throw new ProviderRefused(`token exchange failed: ${(err as Error).message}`);
      }
      if (idToken === undefined) throw new ProviderRefused('no ID token');
      try {
        return (await checkIdToken(idToken, checks.nonce)).identity;
      } catch (err) {
        if (err instanceof ApiError && err.code === 'ID_TOKEN_INVALID') throw new ProviderRefused('ID token refused');
        throw err;
      }
    },
    verifyIdToken: checkIdToken,
  };
}

interface GithubEmail {
  email: string;
  primary: boolean;
  verified: boolean;
}

function githubClient(config: GithubProviderConfig): ProviderClient {
  const server: oidc.ServerMetadata = {
    issuer: config.baseUrl,
    authorization_endpoint: `${config.baseUrl}/login/oauth/authorize`,
    token_endpoint: `${config.baseUrl}/login/oauth/access_token`,
  };
  const insecure = new URL(config.baseUrl).protocol === 'http:' || new URL(config.apiUrl).protocol === 'http:';
  let configured: oidc.Configuration | undefined;
  /** The library and its configuration for GitHub, made at the first use. */
  async function client(): Promise<{ oidc: typeof oidc; c: oidc.Configuration }> {
    const oidc = await openidClient();
    if (configured === undefined) {
      configured = new oidc.Configuration(
        server,
        config.clientId,
        undefined,
        oidc.ClientSecretPost(config.clientSecret),
      );
      configured.timeout = PROVIDER_TIMEOUT_S;
      if (insecure) oidc.allowInsecureRequests(configured);
    }
    return { oidc, c: configured };
  }
  const headers = { accept: 'application/vnd.github+json', 'user-agent': 'accounts-service' };

  async function api<T>(accessToken: string, path: string): Promise<T> {
    const { oidc, c } = await client();
    const res = await oidc.fetchProtectedResource(
      c,
      accessToken,
      new URL(`${config.apiUrl}${path}`),
      'GET',
      undefined,
      new Headers(headers),
    );
    if (!res.ok) throw new ProviderRefused(`GitHub ${path} answered ${res.status}`);
    return (await res.json()) as T;
  }

  return {
    config,
    async authorizationUrl(callbackUrl, checks) {
      const { oidc, c } = await client();
      return oidc.buildAuthorizationUrl(c, {
        redirect_uri: callbackUrl,
        scope: config.scopes.join(' '),
        state: checks.state,
        code_challenge: await oidc.calculatePKCECodeChallenge(checks.verifier),
        code_challenge_method: 'S256',
      }).href;
    },
    async finish(currentUrl, checks) {
      const { oidc, c } = await client();
      let accessToken: string;
      try {
        const tokens = await oidc.authorizationCodeGrant(c, currentUrl, {
          pkceCodeVerifier: checks.verifier,
          expectedState: checks.state,
          idTokenExpected: false,
        });
        accessToken = tokens.access_token;
      } catch (err) {
        throw new ProviderRefused(`token exchange failed: ${(err as Error).message}`);
      }
      try {
        const user = await api<{ id?: unknown; name?: unknown; avatar_url?: unknown }>(accessToken, '/user');
        const emails = await api<GithubEmail[]>(accessToken, '/user/emails');
        if (typeof user.id !== 'number' && typeof user.id !== 'string')
          throw new ProviderRefused('GitHub user without id');
        // The primary address if it is verified; GitHub's other verified addresses are not used.
        const primary = Array.isArray(emails) ? emails.find((e) => e.primary === true) : undefined;
        return {
          subject: String(user.id),
          email: accountEmail(primary?.email),
          emailVerified: primary?.verified === true && accountEmail(primary?.email) !== undefined,
          name: typeof user.name === 'string' && user.name !== '' ? user.name : undefined,
          picture: typeof user.avatar_url === 'string' ? user.avatar_url : undefined,
        };
      } catch (err) {
        if (err instanceof ProviderRefused) throw err;
        throw new ProviderRefused(`GitHub API failed: ${(err as Error).message}`);
      }
    },
    async verifyIdToken() {
      throw new ApiError('INVALID_INPUT', `body.provider "${config.name}" issues no ID tokens (OAuth 2 only)`);
    },
  };
}

/** One client per configured provider, by name. */
export function createProviderClients(
  providers: readonly OAuthProviderConfig[],
  clock: Clock,
): ReadonlyMap<string, ProviderClient> {
  return new Map(providers.map((p) => [p.name, p.kind === 'github' ? githubClient(p) : oidcClient(p, clock)]));
}
