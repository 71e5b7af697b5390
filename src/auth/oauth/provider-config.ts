import type { Env } from '../../config.ts';
import { flag } from '../../config-formats.ts';

/** The provider names InsForge's SDK sends to GET /api/auth/oauth/{provider}; others go to /custom/{provider}. */
export const BUILT_IN_PROVIDER_NAMES = [
  'google',
  'github',
  'discord',
  'linkedin',
  'facebook',
  'instagram',
  'tiktok',
  'apple',
  'x',
  'spotify',
  'microsoft',
] as const;

const NAME = /^[a-z0-9_-]{1,64}$/;
/**
 * Names a provider may not have: path segments next to the provider name, and `email`, the name an
 * account's own address has among its sign-in methods (user_providers).
 */
const RESERVED_NAMES = new Set(['custom', 'exchange', 'email']);

/** Issuers the well-known names default to. Microsoft's is its tenant of personal accounts. */
const DEFAULT_ISSUERS: Readonly<Record<string, string>> = {
  google: 'https://accounts.google.com',
  microsoft: 'https://login.microsoftonline.com/9188040d-6c67-4c5b-b112-36a304b66dad/v2.0',
};

interface ProviderBase {
  name: string;
  /** GET /api/auth/oauth/{name} (built-in) or /api/auth/oauth/custom/{name}. */
  builtIn: boolean;
  clientId: string;
  clientSecret: string;
  scopes: readonly string[];
  /**
   * Whether an identity not linked yet is linked to the existing account with the address the
   * provider vouches for (OAUTH_<NAME>_LINK_BY_EMAIL, default true). Never to an administrator's.
   */
  linkByEmail: boolean;
}

/** An OpenID Connect provider, found by discovery from its issuer. */
export interface OidcProviderConfig extends ProviderBase {
  kind: 'oidc';
  issuer: string;
}

/** GitHub: OAuth 2 without OpenID Connect (its authorize, token and user endpoints). */
export interface GithubProviderConfig extends ProviderBase {
  kind: 'github';
  /** Where /login/oauth/authorize and /login/oauth/access_token live. */
  baseUrl: string;
  /** Where /user and /user/emails live. */
  apiUrl: string;
}

export type OAuthProviderConfig = OidcProviderConfig | GithubProviderConfig;

/**
 * Whether an issuer or endpoint URL may be used: https, or http on a loopback address
 * (127.0.0.0/8, localhost, [::1]) so that a provider on the same machine works without a setting.
 */
export function isAcceptableProviderUrl(value: string): boolean {
  const url = URL.parse(value);
  if (url === null || url.username !== '' || url.password !== '' || url.hash !== '') return false;
  if (url.protocol === 'https:') return true;
  return url.protocol === 'http:' && isLoopbackHost(url.hostname);
}

export function isLoopbackHost(hostname: string): boolean {
  return hostname === 'localhost' || hostname === '[::1]' || /^127(\.\d{1,3}){3}$/.test(hostname);
}

/**
 * The providers named in OAUTH_PROVIDERS with their OAUTH_<NAME>_* settings, or a one-line
 * problem naming the variable to fix. <NAME> is the name in upper case with `-` as `_`.
 */
export function oauthProvidersFrom(env: Env): readonly OAuthProviderConfig[] | string {
  const list = env.OAUTH_PROVIDERS?.trim() ?? '';
  if (list === '') return [];
  const names = list.split(/\s*,\s*/);
  const providers: OAuthProviderConfig[] = [];
  for (const raw of names) {
    const name = raw.toLowerCase();
    if (!NAME.test(name)) {
      return `OAUTH_PROVIDERS must list names of 1 to 64 lower-case letters, digits, "-" and "_" (got ${JSON.stringify(raw)})`;
    }
    if (RESERVED_NAMES.has(name)) return `OAUTH_PROVIDERS must not use the name ${JSON.stringify(name)}`;
    if (providers.some((p) => p.name === name)) return `OAUTH_PROVIDERS names ${JSON.stringify(name)} twice`;
    const prefix = `OAUTH_${name.toUpperCase().replaceAll('-', '_')}_`;
    const setting = (key: string) => {
      const value = env[`${prefix}${key}`]?.trim();
      return value === '' ? undefined : value;
    };
    const clientId = setting('CLIENT_ID');
    const clientSecret = setting('CLIENT_SECRET');
    if (clientId === undefined) return `${prefix}CLIENT_ID is required for the provider ${JSON.stringify(name)}`;
    if (clientSecret === undefined)
      return `${prefix}CLIENT_SECRET is required for the provider ${JSON.stringify(name)}`;
    const builtIn = (BUILT_IN_PROVIDER_NAMES as readonly string[]).includes(name);
    const linkSetting = flag.safeParse(setting('LINK_BY_EMAIL') ?? 'true');
    if (!linkSetting.success) return `${prefix}LINK_BY_EMAIL must be true or false`;
    const linkByEmail = linkSetting.data;
    const scopeSetting = setting('SCOPES');
    const scopes = scopeSetting?.split(/[\s,]+/).filter((s) => s !== '');
    if (name === 'github') {
      const urls = {
        BASE_URL: setting('BASE_URL') ?? 'https://github.com',
        API_URL: setting('API_URL') ?? 'https://api.github.com',
      };
      for (const [key, url] of Object.entries(urls)) {
        if (!isAcceptableProviderUrl(url))
          return `${prefix}${key} must be an https URL (http only on a loopback address)`;
      }
      providers.push({
        kind: 'github',
        name,
        builtIn,
        clientId,
        clientSecret,
        linkByEmail,
        scopes: Object.freeze(scopes ?? ['read:user', 'user:email']),
        baseUrl: urls.BASE_URL.replace(/\/+$/, ''),
        apiUrl: urls.API_URL.replace(/\/+$/, ''),
      });
      continue;
    }
    const issuer = setting('ISSUER') ?? DEFAULT_ISSUERS[name];
    if (issuer === undefined)
      return `${prefix}ISSUER is required for the OpenID Connect provider ${JSON.stringify(name)}`;
    if (!isAcceptableProviderUrl(issuer)) {
      return `${prefix}ISSUER must be an https URL (http only on a loopback address: 127.0.0.1, localhost, [::1])`;
    }
    if (scopes !== undefined && !scopes.includes('openid')) return `${prefix}SCOPES must include openid`;
    providers.push({
      kind: 'oidc',
      name,
      builtIn,
      clientId,
      clientSecret,
      linkByEmail,
      scopes: Object.freeze(scopes ?? ['openid', 'email', 'profile']),
      issuer,
    });
  }
  return Object.freeze(providers.map((p) => Object.freeze(p)));
}
