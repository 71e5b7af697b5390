import { readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { parse } from 'yaml';
import { freePort } from '../scripts/lib/service-process.ts';
import { BREAKER_MIN_CALLS } from '../src/embeddings/upstream-breaker.ts';
import { version } from '../src/version.ts';
import { buildTestApp } from './helpers/app.ts';
import { newRedisKeyPrefix } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { startFakeUpstream } from './helpers/fake-embeddings-upstream.ts';
import { redisAvailable, TEST_REDIS_URL } from './helpers/redis.ts';
import { accessTokenFor } from './helpers/tokens.ts';

t.test('GET /api/health: 200 while the database answers, 503 once it does not', async (t) => {
  const { api, database } = await buildTestApp(t);
  const ok = await api.get('/api/health');
  t.equal(ok.statusCode, 200);
  t.equal(ok.json().database, 'up');
  // The connection pool goes away under the app, as when the database server is lost.
  await database.handle.db.destroy();
  const down = await api.get('/api/health');
  const body = assertErrorBody(t, down, 503, 'SERVICE_UNAVAILABLE');
  t.match(body.message, /database/);
  t.equal(down.headers['retry-after'], '5', 'with a Retry-After');
});

t.test(
  'one version: package.json, the SDK, info.version of openapi.yaml, CHANGELOG.md and what health reports',
  async (t) => {
    const root = path.resolve(import.meta.dirname, '..');
    const packageVersion = (JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { version: string })
      .version;
    const spec = parse(readFileSync(path.join(root, 'openapi.yaml'), 'utf8')) as { info: { version: string } };
    t.equal(spec.info.version, packageVersion, "openapi.yaml's info.version is package.json's version");
    t.equal(version, packageVersion, 'src/version.ts reads package.json');
    const sdkVersion = (JSON.parse(readFileSync(path.join(root, 'sdk/package.json'), 'utf8')) as { version: string })
      .version;
    t.equal(sdkVersion, packageVersion, 'the SDK package has the same version');
    const changelog = readFileSync(path.join(root, 'CHANGELOG.md'), 'utf8');
    t.equal(/^## (\S+)/m.exec(changelog)?.[1], packageVersion, "CHANGELOG.md's latest entry is this version");
    const { api } = await buildTestApp(t);
    t.equal((await api.get('/api/health')).json().version, packageVersion, 'health reports it');
  },
);

t.test('health reports Redis and the embeddings breaker; the database alone decides the status', async (t) => {
  await t.test('neither configured', async (t) => {
    const { api } = await buildTestApp(t);
    const res = await api.get('/api/health');
    t.equal(res.statusCode, 200);
    t.match(res.json(), { status: 'ok', database: 'up', redis: 'not configured', embeddingsBreaker: 'not configured' });
  });

  await t.test(
    'Redis answering, a provider whose breaker is closed',
    { skip: !(await redisAvailable()) && 'no Redis on 127.0.0.1:6379' },
    async (t) => {
      const fake = await startFakeUpstream();
      t.teardown(() => fake.close());
      const { api } = await buildTestApp(t, {
        env: {
          REDIS_URL: TEST_REDIS_URL,
          REDIS_KEY_PREFIX: newRedisKeyPrefix('health'),
          EMBEDDINGS_BASE_URL: fake.baseUrl,
        },
      });
      const res = await api.get('/api/health');
      t.equal(res.statusCode, 200);
      t.match(res.json(), { redis: 'up', embeddingsBreaker: 'closed' });
    },
  );

  await t.test('Redis not answering, the breaker open: still 200', async (t) => {
    const fake = await startFakeUpstream();
    t.teardown(() => fake.close());
    const { app, api } = await buildTestApp(t, {
      env: {
        REDIS_URL: `redis://127.0.0.1:${await freePort()}`,
        EMBEDDINGS_BASE_URL: fake.baseUrl,
        EMBEDDINGS_RETRY_BASE_MS: '1',
        EMBEDDINGS_BREAKER_RESET_MS: '60000',
      },
    });
    const token = accessTokenFor(app);
    // Each call tries three times (two retries); enough failing calls open the circuit.
    fake.enqueue(...Array.from({ length: BREAKER_MIN_CALLS * 3 }, () => ({ status: 503 })));
    for (let i = 0; i < BREAKER_MIN_CALLS; i++) {
      const res = await api.post('/api/ai/embeddings', {
        headers: { authorization: `Bearer ${token}` },
        body: { model: 'text-embedding-3-small', input: 'hello' },
      });
      t.equal(res.statusCode, 502, `failing call ${i + 1}`);
    }
    const started = Date.now();
    const res = await api.get('/api/health');
    t.equal(res.statusCode, 200, 'neither decides the status');
    t.match(res.json(), { status: 'ok', database: 'up', redis: 'down', embeddingsBreaker: 'open' });
    t.ok(Date.now() - started < 1_500, 'a Redis that is down costs the check at most its short timeout');
  });
});
