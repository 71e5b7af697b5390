// The embeddings tokens-per-minute limit (EMBEDDINGS_TOKENS_PER_MINUTE) across instances: shared
// through Redis, and still enforced in each instance's memory, with a warning, while Redis is down.
import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import t from 'tap';
import { freePort } from '../scripts/lib/service-process.ts';
import { buildAnotherInstance, buildAppCapturingLogs, buildTestApp } from './helpers/app.ts';
import { newRedisKeyPrefix } from './helpers/auth.ts';
import { assertTokensLimited } from './helpers/error-body.ts';
import { deleteRedisKeys, redisAvailable, TEST_REDIS_URL } from './helpers/redis.ts';
import { accessTokenFor } from './helpers/tokens.ts';

const LOCAL_MODEL = 'local/lexical-v1';

/** A text of exactly `n` cl100k_base tokens: "hello" then " hello" n - 1 times (one token each). */
const tokens = (n: number) => `hello${' hello'.repeat(n - 1)}`;

const embedAs = (app: FastifyInstance, token: string, input: string | string[]) =>
  app.inject({
    method: 'POST',
    url: '/api/ai/embeddings',
    headers: { authorization: `Bearer ${token}` },
    payload: { model: LOCAL_MODEL, input },
  });

/** Asserts a tokens-per-minute refusal: 429 RATE_LIMITED, Retry-After within the minute. */
t.test('across instances through Redis (REDIS_URL): one count per user', async (t) => {
  if (!(await redisAvailable())) {
    t.plan(0, `skipped: no Redis at ${TEST_REDIS_URL}`);
    return;
  }
  const prefix = newRedisKeyPrefix('embeddings-tokens');
  t.teardown(() => deleteRedisKeys(TEST_REDIS_URL, prefix));
  const env = {
    EMBEDDINGS_TOKENS_PER_MINUTE: '100',
    REDIS_URL: TEST_REDIS_URL,
    REDIS_KEY_PREFIX: prefix,
    JWT_SECRET: randomBytes(32).toString('base64url'),
  };
  const first = await buildTestApp(t, { env });
  const a = first.app;
  // Instance B on A's database (and so its signing keys), sharing A's Redis.
  const { app: b } = await buildAnotherInstance(t, first);
  const ann = accessTokenFor(a);
  const annId = JSON.parse(Buffer.from(ann.split('.')[1] as string, 'base64url').toString()).sub as string;

  t.equal((await embedAs(a, ann, tokens(60))).statusCode, 200, '60 tokens on A');
  t.equal((await embedAs(b, ann, tokens(40))).statusCode, 200, '40 on B');
  assertTokensLimited(t, await embedAs(a, ann, 'hello'), 'then A refuses');
  assertTokensLimited(t, await embedAs(b, ann, 'hello'), 'and B refuses');
  t.equal((await embedAs(b, accessTokenFor(b), tokens(100))).statusCode, 200, 'another user is not limited');

  const { Redis } = await import('ioredis');
  const redis = new Redis(TEST_REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
  t.teardown(() => redis.disconnect());
  await redis.connect();
  const key = `${prefix}embeddings-tokens:${annId}`;
  t.equal(await redis.get(key), '100', 'the count lives in Redis under REDIS_KEY_PREFIX');
  const ttl = await redis.pttl(key);
  t.ok(ttl > 0 && ttl <= 60_000, `and ends with its minute (${ttl} ms left)`);
});

t.test('Redis down: each instance still enforces the limit in memory, and says so', async (t) => {
  const port = await freePort(); // nothing listens there
  const { app, lines } = await buildAppCapturingLogs(t, 'info', {
    LOG_LEVEL: 'info',
    EMBEDDINGS_TOKENS_PER_MINUTE: '100',
    REDIS_URL: `redis://127.0.0.1:${port}`,
  });
  await app.ready();
  const ann = accessTokenFor(app);
  t.equal((await embedAs(app, ann, tokens(100))).statusCode, 200, '100 tokens');
  assertTokensLimited(t, await embedAs(app, ann, 'hello'), 'the 101st token is refused: the limit did not vanish');
  t.equal((await embedAs(app, accessTokenFor(app), 'hello')).statusCode, 200, 'another user is not limited');
  t.ok(
    lines.some((l) => l.includes('embeddings tokens per minute counted per instance')),
    'a warning says the counts are per instance',
  );
});
