import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { ConfigError, configVariableNames, loadConfig } from '../src/config.ts';
import { estimateEntropyBits } from '../src/secret-strength.ts';

/** A random signing key as `openssl rand -base64 48` prints it. */
const strongSecret = () => randomBytes(48).toString('base64');

t.test('defaults: port 7130 on 127.0.0.1, PGlite under ./data', async (t) => {
  const config = loadConfig({});
  t.equal(config.port, 7130);
  t.equal(config.host, '127.0.0.1');
  t.equal(config.nodeEnv, 'development');
  t.equal(config.logLevel, 'info');
  t.same(config.database, { kind: 'pglite', dataDir: path.resolve('data', 'pglite') });
  t.ok(Object.isFrozen(config), 'config is frozen');
  t.ok(Object.isFrozen(config.database), 'nested config is frozen');
});

t.test('DATABASE_URL chooses the dialect', async (t) => {
  t.same(loadConfig({ DATABASE_URL: 'memory://' }).database, { kind: 'pglite-memory' });
  t.same(loadConfig({ DATABASE_URL: 'postgres://u@h:5432/db' }).database, {
    kind: 'postgres',
    url: 'postgres://u@h:5432/db',
  });
  t.same(loadConfig({ DATABASE_URL: '', DATA_DIR: '/tmp/x' }).database, { kind: 'pglite', dataDir: '/tmp/x/pglite' });
});

t.test('a bad value fails with one line naming the variable', async (t) => {
  const cases: Array<[Record<string, string>, RegExp]> = [
    [{ PORT: 'eighty' }, /^PORT must be a port number \(1-65535\) \(got "eighty"\)$/],
    [{ PORT: '70000' }, /^PORT must be a port number/],
    [{ LOG_LEVEL: 'loud' }, /^LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent/],
    [{ NODE_ENV: 'staging' }, /^NODE_ENV must be development, production or test/],
    [{ DATABASE_URL: 'mysql://x' }, /^DATABASE_URL must be postgres:\/\/.* or memory:\/\//],
    [{ JWT_SECRET: 'short' }, /^JWT_SECRET must be at least 32 characters$/],
    [{ NODE_ENV: 'production' }, /^JWT_SECRET is required when NODE_ENV=production/],
  ];
  for (const [env, message] of cases) {
    t.throws(() => loadConfig(env), { name: 'ConfigError', message }, JSON.stringify(env));
  }
  t.throws(() => loadConfig({ JWT_SECRET: 'short' }), ConfigError);
  try {
    loadConfig({ JWT_SECRET: 'not-long-enough-secret' });
  } catch (err) {
    t.notMatch((err as Error).message, /not-long-enough-secret/, 'a secret is never echoed');
  }
});

t.test('TRUST_PROXY never trusts every X-Forwarded-For hop', async (t) => {
  t.equal(loadConfig({}).trustProxy, false);
  t.equal(loadConfig({ TRUST_PROXY: 'false' }).trustProxy, false);
  t.equal(loadConfig({ TRUST_PROXY: 'true' }).trustProxy, 1, 'true means the one proxy in front');
  t.equal(loadConfig({ TRUST_PROXY: '2' }).trustProxy, 2);
  t.equal(loadConfig({ TRUST_PROXY: '10.0.0.0/8, 127.0.0.1' }).trustProxy, '10.0.0.0/8, 127.0.0.1');
  t.throws(() => loadConfig({ TRUST_PROXY: 'yes please' }), /^TRUST_PROXY must be false, true/);
});

t.test('production refuses insecure or incomplete auth settings', async (t) => {
  const prod = { NODE_ENV: 'production', JWT_SECRET: strongSecret(), SMTP_URL: 'smtp://mail.example.com:587' };
  t.ok(loadConfig(prod), 'a complete production config loads');
  t.throws(() => loadConfig({ ...prod, SMTP_URL: '' }), /^SMTP_URL is required when NODE_ENV=production/);
  t.throws(() => loadConfig({ ...prod, COOKIE_SECURE: 'false' }), /^COOKIE_SECURE=false is refused/);
  t.throws(() => loadConfig({ ADMIN_EMAIL: 'a@example.com' }), {
    message:
      "ADMIN_EMAIL is set without ADMIN_PASSWORD: set both (the administrator's address and password) or neither",
  });
  t.throws(() => loadConfig({ ADMIN_PASSWORD: 'a long passphrase' }), {
    message:
      "ADMIN_PASSWORD is set without ADMIN_EMAIL: set both (the administrator's address and password) or neither",
  });
});

t.test('production refuses a JWT_SECRET that is public, a placeholder or guessable', async (t) => {
  const prod = { NODE_ENV: 'production', SMTP_URL: 'smtp://mail.example.com:587' };
  const refused: Array<[string, string, RegExp]> = [
    [
      'the old docker-compose default',
      'change-me-to-a-long-random-secret-of-32-or-more-chars',
      /it is the public example value of docker-compose\.yml/,
    ],
    ['change-me', `change-me-${randomBytes(48).toString('base64url')}`, /placeholder, containing "changeme"/],
    ['CHANGEME', `${randomBytes(48).toString('hex')}CHANGEME`, /placeholder, containing "changeme"/],
    ['placeholder', `placeholder-${randomBytes(48).toString('base64')}`, /placeholder, containing "placeholder"/],
    ['your-secret', `your_secret_${randomBytes(48).toString('hex')}`, /placeholder, containing "yoursecret"/],
    ['secret repeated', 'my-app-secret-jwt-secret-prod-secret-key-2024-v1', /placeholder/],
    ['one character repeated', 's'.repeat(64), /it is one character repeated/],
    ['one character repeated, long', '7'.repeat(300), /it is one character repeated/],
    ['a sequence repeated', randomBytes(24).toString('base64').repeat(4), /it is a sequence of 32 characters repeated/],
    ['32 characters of base64 (192 bits)', randomBytes(24).toString('base64'), /fewer than 256/],
    ['32 bytes as base64 but with one repeated half', 'Zm9vYmFyYmF6cXV4'.repeat(2) + 'x'.repeat(16), /fewer than 256/],
    ['40 hex digits (160 bits)', randomBytes(20).toString('hex'), /it has about 160 bits of estimated entropy/],
    ['lower-case letters only', 'thisismylongproductionkeyforsigningaccesstokens', /fewer than 256/],
    ['a sentence', 'our-company-production-jwt-signing-key-for-2024', /fewer than 256/],
    [
      'few distinct characters',
      'abcabbacbcaacbbacabcbacabcabbcacbabcbacabcabcbacbacbbacbabcabcbacbacbacbab',
      /fewer than 256/,
    ],
    ['0s and 1s', '0110100111010010110100101101001011010010110100101101001011010011', /fewer than 256/],
    ['a phrase repeated, then one more character', `${'MyCompanyName2024!'.repeat(4)}x`, /parts of it repeat/],
    ['base64 of a phrase repeated, then one more character', `${'dXNlcm5hbWU6cGFzc3dvcmQ='.repeat(3)}x`, /repeat/],
    [
      'a random value repeated, then one more character',
      `${randomBytes(24).toString('base64').repeat(2)}x`,
      /fewer than 256, as parts of it repeat/,
    ],
    [
      'a repeated stem with a counter',
      'MyKey01MyKey02MyKey03MyKey04MyKey05MyKey06MyKey07MyKey08',
      /parts of it repeat/,
    ],
    ['words run together, capitalised', 'ItWasTheBestOfTimesItWasTheWorstOfTimes', /as it reads as words/],
    [
      'a longer phrase run together, capitalised',
      'ItWasTheBestOfTimesItWasTheWorstOfTimesItWasTheAgeOfWisdomItWasTheAgeOfFoolishness',
      /fewer than 256, as it reads as words/,
    ],
    [
      'a phrase run together, with a year and a mark',
      'ThisIsMyVeryLongAndSecureProductionSigningKeyForTheAccountsService2024!',
      /as it reads as words/,
    ],
    ['lower-case words run together', 'productionjwtkeyforaccountsservicedonotshare', /as it reads as words/],
    [
      'longer lower-case words run together',
      'productionjwtsigningkeyforaccountsservicedonotsharewithanyoneatallever',
      /fewer than 256, as it reads as words/,
    ],
    [
      'lower-case words next to random characters',
      `${randomBytes(12).toString('hex')}productionjwtsigningkeyforaccountsservicedonotsharewithanyone`,
      /as it reads as words/,
    ],
    [
      'the base64 alphabet reversed',
      '/+9876543210zyxwvutsrqponmlkjihgfedcbaZYXWVUTSRQPONMLKJIHGFEDCBA',
      /fewer than 256, as it runs along the alphabet or the keyboard/,
    ],
    [
      'the alphabet reversed, both cases',
      'zyxwvutsrqponmlkjihgfedcbaZYXWVUTSRQPONMLKJIHGFEDCBA',
      /as it runs along the alphabet or the keyboard/,
    ],
    [
      'the keyboard backwards',
      'mnbvcxzlkjhgfdsapoiuytrewq0987654321MNBVCXZLKJHGFDSAPOIUYTREWQ',
      /as it runs along the alphabet or the keyboard/,
    ],
  ];
  for (const [label, secret, reason] of refused) {
    let message = '';
    t.throws(() => loadConfig({ ...prod, JWT_SECRET: secret }), ConfigError, label);
    try {
      loadConfig({ ...prod, JWT_SECRET: secret });
    } catch (err) {
      message = (err as Error).message;
    }
    t.match(message, /^JWT_SECRET is refused when NODE_ENV=production: /, `${label}: names the variable`);
    t.match(message, reason, `${label}: says why`);
    t.match(message, /openssl rand -base64 48/, `${label}: says what to use instead`);
    t.notOk(message.includes(secret), `${label}: the value is not echoed`);
    t.equal(message.split('\n').length, 1, `${label}: one line`);
  }
});

t.test('production accepts random keys as openssl prints them', async (t) => {
  const prod = { NODE_ENV: 'production', SMTP_URL: 'smtp://mail.example.com:587' };
  const accepted: Array<[string, () => string]> = [
    ['openssl rand -base64 48', () => randomBytes(48).toString('base64')],
    ['openssl rand -hex 32', () => randomBytes(32).toString('hex')],
    ['openssl rand -hex 32, upper-case', () => randomBytes(32).toString('hex').toUpperCase()],
    ['32 bytes as base64url', () => randomBytes(32).toString('base64url')],
    ['32 bytes as base64 with padding', () => randomBytes(32).toString('base64')],
    ['openssl rand -base64 64 (two lines joined)', () => randomBytes(64).toString('base64')],
    ['openssl rand -base64 32', () => randomBytes(32).toString('base64')],
    ['48 bytes as base64url', () => randomBytes(48).toString('base64url')],
    ['a word, then openssl rand -base64 48', () => `prod-${randomBytes(48).toString('base64')}`],
  ];
  // Every rule that lowers the estimate of a random key by mistake refuses it: 32 random bytes as
  // hexadecimal or base64url are only 0 and 2 bits above the bar.
  const SAMPLES = 2_000;
  for (const [label, make] of accepted) {
    for (let i = 0; i < SAMPLES; i++) {
      const secret = make();
      const config = loadConfig({ ...prod, JWT_SECRET: secret });
      if (config.jwtSecret !== secret) t.fail(`${label}: ${secret} was not kept`);
    }
    t.pass(`${label}: ${SAMPLES} random values accepted`);
  }
  const hex = '3f9c0b6e21d87a54c4e1f0932ab7d56e8c1f47a09b3de26c5f8a71b40e9d2c63';
  t.equal(estimateEntropyBits(hex), 256, 'hexadecimal counts 4 bits a digit');
  // 4 distinct characters in 64 suggest an alphabet of 4, credited as 12: log2(12) = 3.58 bits a character.
  const fourCharacters = 'A9b+9Ab+bA++9bAA9+b9Ab++A9bb9A+9bA+A9b9+bAAb+9+9bAb9A+bA99+Ab+bA';
  t.equal(Math.round(estimateEntropyBits(fourCharacters)), 229, 'few distinct characters count less');
  t.ok(estimateEntropyBits('0123456789abcdef'.repeat(4)) < 100, 'a repeated or sequential run counts for little');
  t.equal(Math.round(estimateEntropyBits(randomBytes(48).toString('base64'))), 384, 'base64 counts 6 bits a character');
});

t.test('outside production a JWT_SECRET of 32 characters is enough, as before', async (t) => {
  for (const NODE_ENV of ['development', 'test']) {
    t.equal(loadConfig({ NODE_ENV, JWT_SECRET: 'a'.repeat(32) }).jwtSecret, 'a'.repeat(32), `${NODE_ENV}: repeated`);
    const sentence = 'change-me-to-a-long-random-secret-of-32-or-more-chars';
    t.equal(loadConfig({ NODE_ENV, JWT_SECRET: sentence }).jwtSecret, sentence, `${NODE_ENV}: the old default`);
    t.throws(() => loadConfig({ NODE_ENV, JWT_SECRET: 'a'.repeat(31) }), /^JWT_SECRET must be at least 32 characters$/);
  }
});

t.test('metrics: off by default; METRICS_TOKEN and METRICS_PORT are checked with one line each', async (t) => {
  t.same(loadConfig({}).metrics, { token: undefined, port: undefined }, 'neither set: off');
  const token = randomBytes(32).toString('hex');
  t.same(loadConfig({ METRICS_TOKEN: token }).metrics, { token, port: undefined });
  t.same(loadConfig({ METRICS_PORT: '9464' }).metrics, { token: undefined, port: 9464 });
  t.same(loadConfig({ METRICS_TOKEN: token, METRICS_PORT: '9464' }).metrics, { token, port: 9464 });
  t.ok(Object.isFrozen(loadConfig({}).metrics), 'frozen');
  const cases: Array<[Record<string, string>, RegExp]> = [
    [{ METRICS_TOKEN: 'a'.repeat(31) }, /^METRICS_TOKEN must be at least 32 characters \(openssl rand -hex 32\)$/],
    [{ METRICS_TOKEN: `${'a'.repeat(20)} ${'b'.repeat(20)}` }, /^METRICS_TOKEN must be printable ASCII without spaces/],
    [{ METRICS_TOKEN: `${'a'.repeat(32)}é` }, /^METRICS_TOKEN must be printable ASCII without spaces/],
    [{ METRICS_PORT: 'nine' }, /^METRICS_PORT must be a port number \(1-65535\) \(got "nine"\)$/],
    [{ METRICS_PORT: '0' }, /^METRICS_PORT must be a port number \(1-65535\) \(got "0"\)$/],
    [{ METRICS_PORT: '65536' }, /^METRICS_PORT must be a port number \(1-65535\)/],
    [{ METRICS_PORT: '7130' }, /^METRICS_PORT must differ from PORT \(both are 7130\)$/],
    [{ PORT: '8080', METRICS_PORT: '8080' }, /^METRICS_PORT must differ from PORT \(both are 8080\)$/],
  ];
  for (const [env, message] of cases) {
    t.throws(() => loadConfig(env), { name: 'ConfigError', message }, JSON.stringify(env));
  }
  t.equal(loadConfig({ PORT: '8080', METRICS_PORT: '7130' }).metrics.port, 7130, 'any other port is fine');
  try {
    loadConfig({ METRICS_TOKEN: 'too-short-metrics-secret' });
    t.fail('a short token is refused');
  } catch (err) {
    t.notMatch((err as Error).message, /too-short-metrics-secret/, 'the token is never echoed');
  }
});

t.test('CORS_ORIGINS and the refresh cookie settings are checked with one line each', async (t) => {
  t.same(loadConfig({}).corsOrigins, [], 'no origin listed by default');
  t.same(loadConfig({}).cookie, { secure: true, sameSite: 'lax', domain: undefined }, 'cookie defaults');
  t.same(
    loadConfig({ CORS_ORIGINS: ' http://a.test , https://b.example:8443,http://localhost:5173 ' }).corsOrigins,
    ['http://a.test', 'https://b.example:8443', 'http://localhost:5173'],
    'a list with spaces',
  );
  t.ok(Object.isFrozen(loadConfig({ CORS_ORIGINS: 'http://a.test' }).corsOrigins), 'frozen');
  const refused: Array<[Record<string, string>, RegExp]> = [
    [{ CORS_ORIGINS: '*' }, /^CORS_ORIGINS must list exact origins: a wildcard .*cannot be trusted with credentials/],
    [{ CORS_ORIGINS: 'http://a.test, *' }, /^CORS_ORIGINS must list exact origins: a wildcard/],
    [{ CORS_ORIGINS: 'null' }, /^CORS_ORIGINS must list exact origins/],
    [
      { CORS_ORIGINS: 'http://a.test/path' },
      /^CORS_ORIGINS must list origins as browsers send them: write http:\/\/a\.test \(/,
    ],
    [{ CORS_ORIGINS: 'http://a.test/' }, /: write http:\/\/a\.test \(got "http:\/\/a\.test\/"\)/],
    [
      { CORS_ORIGINS: 'HTTP://A.test' },
      /^CORS_ORIGINS must list origins as browsers send them: write http:\/\/a\.test \(/,
    ],
    [{ CORS_ORIGINS: 'https://a.test:443' }, /: write https:\/\/a\.test \(/],
    [
      { CORS_ORIGINS: 'ftp://a.test' },
      /^CORS_ORIGINS must list origins such as https:\/\/app\.example\.com \(http or https\)/,
    ],
    [{ CORS_ORIGINS: 'a.test' }, /^CORS_ORIGINS must list origins such as https:\/\/app\.example\.com/],
    [{ CORS_ORIGINS: 'https://ok.example,http://b.test/x' }, /write http:\/\/b\.test\b.*"http:\/\/b\.test\/x"/],
    [{ CORS_ORIGINS: 'https://*.example.com' }, /^CORS_ORIGINS must list exact origins: a wildcard/],
    [{ COOKIE_SAMESITE: 'none', COOKIE_SECURE: 'false' }, /^COOKIE_SAMESITE=none needs COOKIE_SECURE=true/],
    [{ COOKIE_SAMESITE: 'bogus' }, /^COOKIE_SAMESITE must be lax, strict or none \(got "bogus"\)$/],
    [
      { COOKIE_DOMAIN: 'example.com', PUBLIC_URL: 'https://api.other.com' },
      /^COOKIE_DOMAIN must be the host of PUBLIC_URL or a parent domain of it/,
    ],
    [
      { COOKIE_DOMAIN: 'ample.com', PUBLIC_URL: 'https://example.com' },
      /^COOKIE_DOMAIN must be the host of PUBLIC_URL/,
    ],
    [
      { COOKIE_DOMAIN: 'http://x' },
      /^COOKIE_DOMAIN must be a domain name such as example\.com \(no scheme, port or path\)/,
    ],
    [{ COOKIE_DOMAIN: 'example.com:8080' }, /^COOKIE_DOMAIN must be a domain name/],
    [{ COOKIE_DOMAIN: 'example.com' }, /^COOKIE_DOMAIN needs PUBLIC_URL/],
    [
      { COOKIE_DOMAIN: '0.0.1', PUBLIC_URL: 'http://127.0.0.1:7130' },
      /^COOKIE_DOMAIN needs a PUBLIC_URL with a domain name/,
    ],
    [
      { WEBAUTHN_RP_ID: 'other.com', PUBLIC_URL: 'https://accounts.example.com' },
      /^WEBAUTHN_RP_ID must be the host of each WebAuthn origin or a parent domain of it \(got "other\.com" for https:\/\/accounts\.example\.com/,
    ],
    [
      { WEBAUTHN_RP_ID: 'example.com', WEBAUTHN_ORIGINS: 'https://app.example.com,https://evilexample.com' },
      /^WEBAUTHN_RP_ID must be the host .* for https:\/\/evilexample\.com/,
    ],
    [{ WEBAUTHN_RP_ID: 'https://example.com' }, /^WEBAUTHN_RP_ID must be a host name such as example\.com/],
    [{ WEBAUTHN_RP_ID: 'com' }, /^WEBAUTHN_RP_ID must be a domain name such as example\.com, or localhost/],
    [{ WEBAUTHN_RP_ID: '127.0.0.1' }, /^WEBAUTHN_RP_ID must be a domain name/],
    [
      { WEBAUTHN_RP_ID: 'example.com', WEBAUTHN_ORIGINS: 'http://10.0.0.1' },
      /^WEBAUTHN_RP_ID must be the host of each WebAuthn origin/,
    ],
    [{ WEBAUTHN_ORIGINS: '*' }, /^WEBAUTHN_ORIGINS must list exact origins/],
  ];
  for (const [env, message] of refused) {
    t.throws(() => loadConfig(env), { name: 'ConfigError', message }, JSON.stringify(env));
    try {
      loadConfig(env);
    } catch (err) {
      t.notMatch((err as Error).message, /\n/, `${JSON.stringify(env)}: one line`);
    }
  }
  const relyingParty = loadConfig({
    PUBLIC_URL: 'https://accounts.example.com',
    CORS_ORIGINS: 'https://app.example.com,https://other.test,http://plain.example.com',
    WEBAUTHN_RP_ID: 'example.com',
  }).webauthn;
  t.same(
    relyingParty,
    {
      rpId: 'example.com',
      rpName: 'Accounts',
      origins: ['https://accounts.example.com', 'https://app.example.com'],
    },
    'by default, PUBLIC_URL and the secure CORS origins under the RP ID',
  );
  t.same(loadConfig({ PUBLIC_URL: 'http://localhost:7130' }).webauthn.rpId, 'localhost', "PUBLIC_URL's host");
  t.ok(loadConfig({ COOKIE_SAMESITE: 'none', COOKIE_SECURE: 'true' }), 'SameSite=None with Secure loads');
  t.equal(loadConfig({ COOKIE_SAMESITE: 'None' }).cookie.sameSite, 'none', 'written as the attribute is: None');
  t.equal(loadConfig({ COOKIE_SAMESITE: 'none' }).cookie.sameSite, 'none', 'COOKIE_SECURE defaults to true');
  t.equal(loadConfig({ COOKIE_SAMESITE: 'strict', COOKIE_SECURE: 'false' }).cookie.sameSite, 'strict');
  t.equal(
    loadConfig({ COOKIE_DOMAIN: '.Example.COM', PUBLIC_URL: 'https://api.example.com' }).cookie.domain,
    'example.com',
    'lower-cased, no leading dot',
  );
  const parent = loadConfig({ COOKIE_DOMAIN: 'example.com', PUBLIC_URL: 'https://api.example.com' });
  t.equal(parent.cookie.domain, 'example.com', 'a parent domain of PUBLIC_URL');
  t.equal(
    loadConfig({ COOKIE_DOMAIN: 'api.example.com', PUBLIC_URL: 'https://api.example.com' }).cookie.domain,
    'api.example.com',
    "PUBLIC_URL's own host",
  );
});

t.test('docs/configuration.md documents every variable, and only those', async (t) => {
  const page = readFileSync(new URL('../docs/configuration.md', import.meta.url), 'utf8');
  // The first cell of each table row: one or more `NAME`s.
  const documented = page
    .split('\n')
    .filter((line) => line.startsWith('| `'))
    .flatMap((line) => [...(line.split('|')[1] ?? '').matchAll(/`([A-Z0-9_<>]+)`/g)].map((m) => m[1] ?? ''));
  const declared = configVariableNames();
  t.same(
    declared.filter((name) => !documented.includes(name)),
    [],
    'every variable of src/config.ts has a row',
  );
  // OAUTH_* are read by src/auth/oauth/provider-config.ts, one set per provider.
  t.same(
    documented.filter((name) => !declared.includes(name) && !name.startsWith('OAUTH_')),
    [],
    'every row names a variable of src/config.ts',
  );
});
