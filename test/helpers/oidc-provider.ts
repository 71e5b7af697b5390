/**
 * A real OpenID Provider (panva's oidc-provider) on loopback for OAuth / OpenID Connect sign-in
 * tests: authorization code flow with PKCE (S256, required), scopes openid, email and profile, and
 * the built-in development login and consent pages, which `followAuthorization` fills in.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, type JWTPayload, SignJWT } from 'jose';
// @ts-expect-error oidc-provider ships no type declarations; the little used here is typed below.
import OidcProvider from 'oidc-provider';
import * as oidc from 'openid-client';
import { followAuthorization } from './oauth-browser.ts';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;
const Provider: new (issuer: string, configuration: object) => { callback(): Handler } = OidcProvider;

/** A client registered at the provider (always confidential, client_secret_basic, code flow). */
export interface ClientSpec {
  clientId: string;
  clientSecret: string;
  /** Besides these, `ISSUE_REDIRECT_URI` is always registered (for `issueIdToken`). */
  redirectUris?: string[];
}

/** Claims of a login id; unset ones fall back to the defaults of `startOidcProvider`. */
export interface TestAccount {
  email?: string;
  /** `null` leaves the claim out (as Microsoft does). */
  email_verified?: boolean | null;
  /** Microsoft's optional claim: the address's domain is verified by its owner. */
  xms_edov?: boolean;
  name?: string | null;
  picture?: string;
}

/** The client the service signs in as (registered by default). */
export const SERVICE_CLIENT = {
  clientId: 'accounts-service',
  clientSecret: 'accounts-service-secret-0123456789abcdef',
} as const;

/** Another relying party at the same provider, for "ID token for another audience" tests. */
export const OTHER_CLIENT = { clientId: 'other-app', clientSecret: 'other-app-secret-fedcba9876543210' } as const;

/** The redirect URI `issueIdToken` uses; nothing listens there, the browser stops before requesting it. */
export const ISSUE_REDIRECT_URI = 'http://127.0.0.1/never-listened/cb';

export interface TestOidcProvider {
  /** `http://127.0.0.1:<port>`, no trailing slash. */
  issuer: string;
  /** An absolute URL on the provider, e.g. `url('/.well-known/openid-configuration')`. */
  url(path: string): string;
  /**
   * Claims per login id. Any login id signs in; without an entry it gets email `<id>@example.test`
   * (verified) and name `<id>`. The subject (`sub`) is always the login id.
   */
  accounts: Map<string, TestAccount>;
  /**
   * Replaces a client's registered redirect URIs (the service's callback, once its URL is known).
   * The provider is rebuilt with the same issuer and signing key: sessions, codes and tokens issued
   * before are forgotten, ID tokens stay valid.
   */
  setRedirectUris(clientId: string, uris: string[]): void;
  /**
   * Runs a full authorization code flow (PKCE, scope `openid email profile`) as a registered client,
   * signing in as `login`, and returns the ID token. The secret defaults to the registered one.
   */
  issueIdToken(params: { clientId: string; clientSecret?: string; login: string; nonce?: string }): Promise<string>;
  /**
   * Signs any claims as an RS256 JWT with the provider's own key (kid included), for tokens a real
   * flow would never produce. `iss` defaults to the issuer, `iat` to now and `exp` to an hour later.
   */
  signIdToken(claims: JWTPayload): Promise<string>;
  close(): Promise<void>;
}

/**
 * Starts the provider on 127.0.0.1 (a free port). Clients: `SERVICE_CLIENT` and `OTHER_CLIENT`, and
 * `options.clients` (an entry with the clientId of a default replaces it). Redirect URIs may be given
 * here, when the service's callback URL is known first, or later with `setRedirectUris`.
 */
export async function startOidcProvider(options: { clients?: ClientSpec[] } = {}): Promise<TestOidcProvider> {
  const clients = new Map<string, ClientSpec>();
  for (const client of [SERVICE_CLIENT, OTHER_CLIENT, ...(options.clients ?? [])]) {
    clients.set(client.clientId, { ...client });
  }
  const accounts = new Map<string, TestAccount>();
  const { privateKey } = await generateKeyPair('RS256', { extractable: true });
  const kid = randomUUID();
  const jwks = { keys: [{ ...(await exportJWK(privateKey)), kid, alg: 'RS256', use: 'sig' }] };
  const cookieKeys = [randomBytes(32).toString('hex')];

  let handler: Handler = (_req, res) => res.writeHead(503).end();
  const server = createServer((req, res) => handler(req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  const findAccount = (_ctx: unknown, id: string) => ({
    accountId: id,
    async claims() {
      const account = accounts.get(id) ?? {};
      return {
        sub: id,
        email: account.email ?? `${id}@example.test`,
        ...(account.email_verified === null ? {} : { email_verified: account.email_verified ?? true }),
        ...(account.xms_edov === undefined ? {} : { xms_edov: account.xms_edov }),
        name: account.name === undefined ? id : account.name,
        ...(account.picture === undefined ? {} : { picture: account.picture }),
      };
    },
  });

  const build = () =>
    quietly(() =>
      new Provider(issuer, {
        clients: [...clients.values()].map((c) => ({
          client_id: c.clientId,
          client_secret: c.clientSecret,
          redirect_uris: [...(c.redirectUris ?? []), ISSUE_REDIRECT_URI],
          grant_types: ['authorization_code'],
          response_types: ['code'],
          token_endpoint_auth_method: 'client_secret_basic',
        })),
        findAccount,
        claims: { openid: ['sub'], email: ['email', 'email_verified', 'xms_edov'], profile: ['name', 'picture'] },
        scopes: ['openid', 'email', 'profile'],
        // By default, claims asked for by scope go only to userinfo when an access token is issued too.
        conformIdTokenClaims: false,
        pkce: { required: () => true },
        responseTypes: ['code'],
        jwks,
        cookies: { keys: cookieKeys },
        // Explicit values keep the "you SHOULD change" notices off stdout, which tap reads.
        ttl: { AccessToken: 3600, AuthorizationCode: 60, IdToken: 3600, Interaction: 3600, Session: 3600, Grant: 3600 },
        clientBasedCORS: () => false,
        renderError(ctx: { type: string; body: unknown }, out: Record<string, string>) {
          ctx.type = 'json';
          ctx.body = out;
        },
      }).callback(),
    );
  handler = build();

  return {
    issuer,
    url: (path) => new URL(path, issuer).href,
    accounts,
    setRedirectUris(clientId, uris) {
      const client = clients.get(clientId);
      if (!client) throw new Error(`no client ${clientId} at the test OpenID Provider`);
      client.redirectUris = [...uris];
      handler = build();
    },
    async issueIdToken({ clientId, clientSecret, login, nonce }) {
      const secret = clientSecret ?? clients.get(clientId)?.clientSecret ?? '';
      const config = await oidc.discovery(new URL(issuer), clientId, undefined, oidc.ClientSecretBasic(secret), {
        execute: [oidc.allowInsecureRequests],
      });
      const verifier = oidc.randomPKCECodeVerifier();
      const state = oidc.randomState();
      const authUrl = oidc.buildAuthorizationUrl(config, {
        redirect_uri: ISSUE_REDIRECT_URI,
        scope: 'openid email profile',
        code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
        code_challenge_method: 'S256',
        state,
        ...(nonce === undefined ? {} : { nonce }),
      });
      const { finalUrl } = await followAuthorization(authUrl.href, { login, stopAt: ISSUE_REDIRECT_URI });
      const tokens = await oidc.authorizationCodeGrant(config, finalUrl, {
        pkceCodeVerifier: verifier,
        expectedState: state,
        ...(nonce === undefined ? {} : { expectedNonce: nonce }),
      });
      if (tokens.id_token === undefined) throw new Error('the test OpenID Provider issued no ID token');
      return tokens.id_token;
    },
    async signIdToken(claims) {
      const now = Math.floor(Date.now() / 1000);
      return new SignJWT({ iss: issuer, iat: now, exp: now + 3600, ...claims })
        .setProtectedHeader({ alg: 'RS256', kid, typ: 'JWT' })
        .sign(privateKey);
    },
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        server.closeAllConnections();
      }),
  };
}

/** Runs `fn` without oidc-provider's "development-only" warnings (in-memory adapter, devInteractions). */
function quietly<T>(fn: () => T): T {
  const warn = console.warn;
  console.warn = (...args: unknown[]) => {
    if (!String(args[0]).includes('development-only')) warn(...args);
  };
  try {
    return fn();
  } finally {
    console.warn = warn;
  }
}
