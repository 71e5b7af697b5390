import path from 'node:path';
import t from 'tap';
import { ConfigError, loadConfig } from '../src/config.ts';

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
  const prod = { NODE_ENV: 'production', JWT_SECRET: 's'.repeat(40), SMTP_URL: 'smtp://mail.example.com:587' };
  t.ok(loadConfig(prod), 'a complete production config loads');
  t.throws(() => loadConfig({ ...prod, SMTP_URL: '' }), /^SMTP_URL is required when NODE_ENV=production/);
  t.throws(() => loadConfig({ ...prod, COOKIE_SECURE: 'false' }), /^COOKIE_SECURE=false is refused/);
  t.throws(() => loadConfig({ ADMIN_EMAIL: 'a@example.com' }), /^ADMIN_PASSWORD must be set together/);
});
