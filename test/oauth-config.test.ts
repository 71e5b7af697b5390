// OAuth provider settings and the redirect allow-list: what starts, and the one line for what does not.
import t from 'tap';
import { createPublicAuthConfig } from '../src/auth/public-config.ts';
import { allowedRedirect } from '../src/auth/redirects.ts';
import { type Env, loadConfig } from '../src/config.ts';

const base: Env = { NODE_ENV: 'test' };
const google = { OAUTH_GOOGLE_CLIENT_ID: 'g-id', OAUTH_GOOGLE_CLIENT_SECRET: 'g-secret' };

function refusal(env: Env): string {
  try {
    loadConfig({ ...base, ...env });
  } catch (err) {
    return (err as Error).message;
  }
  return 'started';
}

t.test('providers: defaults, kinds and the public configuration', async (t) => {
  const config = loadConfig({
    ...base,
    OAUTH_PROVIDERS: 'google, GitHub, corp-sso, microsoft',
    ...google,
    OAUTH_GITHUB_CLIENT_ID: 'gh-id',
    OAUTH_GITHUB_CLIENT_SECRET: 'gh-secret',
    OAUTH_CORP_SSO_CLIENT_ID: 'c-id',
    OAUTH_CORP_SSO_CLIENT_SECRET: 'c-secret',
    OAUTH_CORP_SSO_ISSUER: 'https://sso.example.com/realms/main',
    OAUTH_CORP_SSO_SCOPES: 'openid email',
    OAUTH_MICROSOFT_CLIENT_ID: 'm-id',
    OAUTH_MICROSOFT_CLIENT_SECRET: 'm-secret',
  });
  const byName = Object.fromEntries(config.oauthProviders.map((p) => [p.name, p]));
  t.match(byName.google, {
    kind: 'oidc',
    builtIn: true,
    issuer: 'https://accounts.google.com',
    scopes: ['openid', 'email', 'profile'],
  });
  t.match(byName.github, {
    kind: 'github',
    builtIn: true,
    baseUrl: 'https://github.com',
    apiUrl: 'https://api.github.com',
  });
  t.match(byName['corp-sso'], {
    kind: 'oidc',
    builtIn: false,
    issuer: 'https://sso.example.com/realms/main',
    scopes: ['openid', 'email'],
  });
  t.match(byName.microsoft, { kind: 'oidc', issuer: /^https:\/\/login\.microsoftonline\.com\/[0-9a-f-]+\/v2\.0$/ });
  t.equal(byName.google?.linkByEmail, true, 'providers link by address unless told not to');
  const strict = loadConfig({
    ...base,
    OAUTH_PROVIDERS: 'google, github',
    ...google,
    OAUTH_GOOGLE_LINK_BY_EMAIL: 'false',
    OAUTH_GITHUB_CLIENT_ID: 'gh-id',
    OAUTH_GITHUB_CLIENT_SECRET: 'gh-secret',
  });
  t.same(
    strict.oauthProviders.map((p) => [p.name, p.linkByEmail]),
    [
      ['google', false],
      ['github', true],
    ],
    'OAUTH_<NAME>_LINK_BY_EMAIL=false, for that provider only',
  );
  const { body } = createPublicAuthConfig(config);
  t.same(body.oAuthProviders, ['google', 'github', 'microsoft']);
  t.same(body.customOAuthProviders, ['corp-sso']);
  t.same(createPublicAuthConfig(loadConfig(base)).body.oAuthProviders, [], 'none without OAUTH_PROVIDERS');
});

t.test('providers: bad settings stop the start with one line naming the variable', async (t) => {
  t.match(refusal({ OAUTH_PROVIDERS: 'google' }), /^OAUTH_GOOGLE_CLIENT_ID is required/);
  t.match(
    refusal({ OAUTH_PROVIDERS: 'google', OAUTH_GOOGLE_CLIENT_ID: 'x' }),
    /^OAUTH_GOOGLE_CLIENT_SECRET is required/,
  );
  t.match(
    refusal({ OAUTH_PROVIDERS: 'corp', OAUTH_CORP_CLIENT_ID: 'x', OAUTH_CORP_CLIENT_SECRET: 'y' }),
    /^OAUTH_CORP_ISSUER is required/,
  );
  t.match(refusal({ OAUTH_PROVIDERS: 'bad name!' }), /^OAUTH_PROVIDERS must list names/);
  t.match(refusal({ OAUTH_PROVIDERS: 'google,google', ...google }), /names "google" twice/);
  t.match(refusal({ OAUTH_PROVIDERS: 'custom' }), /must not use the name "custom"/);
  t.match(
    refusal({ OAUTH_PROVIDERS: 'email' }),
    /must not use the name "email"/,
    "the name of an account's own address among its sign-in methods",
  );
  t.match(
    refusal({ OAUTH_PROVIDERS: 'google', ...google, OAUTH_GOOGLE_LINK_BY_EMAIL: 'no' }),
    /^OAUTH_GOOGLE_LINK_BY_EMAIL must be true or false/,
  );
  t.match(
    refusal({ OAUTH_PROVIDERS: 'google', ...google, OAUTH_GOOGLE_SCOPES: 'email' }),
    /^OAUTH_GOOGLE_SCOPES must include openid/,
  );
  for (const issuer of [
    'http://sso.example.com',
    'http://10.0.0.1',
    'ftp://127.0.0.1',
    'https://user:pw@sso.example.com',
    'not a url',
  ]) {
    t.match(
      refusal({
        OAUTH_PROVIDERS: 'corp',
        OAUTH_CORP_CLIENT_ID: 'x',
        OAUTH_CORP_CLIENT_SECRET: 'y',
        OAUTH_CORP_ISSUER: issuer,
      }),
      /^OAUTH_CORP_ISSUER must be an https URL \(http only on a loopback address/,
      `refused: ${issuer}`,
    );
  }
  for (const issuer of [
    'http://127.0.0.1:9000',
    'http://127.1.2.3',
    'http://localhost:8080/realm',
    'http://[::1]:4000',
  ]) {
    t.equal(
      refusal({
        OAUTH_PROVIDERS: 'corp',
        OAUTH_CORP_CLIENT_ID: 'x',
        OAUTH_CORP_CLIENT_SECRET: 'y',
        OAUTH_CORP_ISSUER: issuer,
      }),
      'started',
      `an http issuer on loopback needs no setting: ${issuer}`,
    );
  }
  t.match(
    refusal({
      OAUTH_PROVIDERS: 'github',
      OAUTH_GITHUB_CLIENT_ID: 'x',
      OAUTH_GITHUB_CLIENT_SECRET: 'y',
      OAUTH_GITHUB_API_URL: 'http://api.example.com',
    }),
    /^OAUTH_GITHUB_API_URL must be an https URL/,
  );
});

t.test('AUTH_REDIRECT_ALLOWLIST: origins and URL prefixes', async (t) => {
  const config = loadConfig({
    ...base,
    AUTH_REDIRECT_ALLOWLIST: 'https://app.example.com, https://www.example.com/auth/, com.example.app:/oauth',
  });
  const ok = (url: string) => allowedRedirect(config, url, 'redirect_uri');
  t.equal(ok('https://app.example.com/any/where?x=1'), 'https://app.example.com/any/where?x=1');
  t.equal(ok('https://www.example.com/auth/callback'), 'https://www.example.com/auth/callback');
  t.equal(ok('com.example.app:/oauth?x=1'), 'com.example.app:/oauth?x=1');
  for (const bad of [
    'https://www.example.com/other',
    'https://www.example.com/auth/../other',
    'https://www.example.com/authx',
    'https://app.example.com.evil.test/',
    'https://user@app.example.com/',
    'http://app.example.com/',
    'com.example.app:/oauthx',
    'javascript:alert(1)',
    '/relative',
  ]) {
    t.throws(() => ok(bad), { statusCode: 400, code: 'INVALID_INPUT' }, `refused: ${bad}`);
  }
  const fallback = loadConfig({ ...base, AUTH_REDIRECT_URL: 'https://app.example.com/welcome' });
  t.same(fallback.authRedirectAllowlist, ['https://app.example.com'], "without the list: AUTH_REDIRECT_URL's origin");
  t.same(loadConfig(base).authRedirectAllowlist, [], 'neither: nothing is allowed');
  t.match(
    refusal({ AUTH_REDIRECT_ALLOWLIST: 'https://*.example.com' }),
    /^AUTH_REDIRECT_ALLOWLIST must list origins or URL prefixes, without wildcards/,
  );
  t.match(
    refusal({ AUTH_REDIRECT_ALLOWLIST: 'javascript:alert(1)' }),
    /^AUTH_REDIRECT_ALLOWLIST must not list javascript: URLs/,
  );
});
