// Embeddings cannot monopolise an instance: tokens are counted in worker threads (the event loop
// never loads the tokenizer), and each user has a number of tokens per minute
// (EMBEDDINGS_TOKENS_PER_MINUTE) as well as of requests. Across instances and during a Redis outage:
// embeddings-token-limit-redis.test.ts.
import { randomBytes } from 'node:crypto';
import module from 'node:module';
import type { FastifyInstance } from 'fastify';
import t from 'tap';
import { createTokenCounter, TOKEN_COUNTING_PER_USER } from '../src/embeddings/token-counter.ts';
import { buildTestApp } from './helpers/app.ts';
import { TestClock } from './helpers/clock.ts';
import { assertErrorBody, assertTokensLimited } from './helpers/error-body.ts';
import { accessTokenFor } from './helpers/tokens.ts';

// Every module this thread (the event loop's) resolves from here on: the tokenizer must not be one.
// Hooks registered this way apply to this thread only, not to worker threads.
const tokenizerOnEventLoop: string[] = [];
module.registerHooks({
  resolve(specifier, context, next) {
    const resolved = next(specifier, context);
    if (/gpt-tokenizer/.test(specifier) || resolved.url.includes('/gpt-tokenizer/')) {
      tokenizerOnEventLoop.push(resolved.url);
    }
    return resolved;
  },
});

const LOCAL_MODEL = 'local/lexical-v1';
const METRICS_TOKEN = randomBytes(32).toString('hex');

/** A text of exactly `n` cl100k_base tokens: "hello" then " hello" n - 1 times (one token each). */
const tokens = (n: number) => `hello${' hello'.repeat(n - 1)}`;

const embedAs = (app: FastifyInstance, token: string, input: string | string[]) =>
  app.inject({
    method: 'POST',
    url: '/api/ai/embeddings',
    headers: { authorization: `Bearer ${token}` },
    payload: { model: LOCAL_MODEL, input },
  });

/** One value of the app's Prometheus metrics (0 when the series is absent). */
async function metric(app: FastifyInstance, name: string, labels = ''): Promise<number | undefined> {
  const res = await app.inject({ url: '/metrics', headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
  const line = res.body.split('\n').find((l) => l.startsWith(`${name}${labels} `) || l.startsWith(`${name}${labels}{`));
  return line === undefined ? undefined : Number(line.split(' ').pop());
}

/** Asserts a tokens-per-minute refusal: 429 RATE_LIMITED, Retry-After within the minute. */
t.test('tokens are counted in worker threads: the event loop never loads the tokenizer', async (t) => {
  const { app } = await buildTestApp(t, { env: { METRICS_TOKEN } });
  const token = accessTokenFor(app);
  const big = await embedAs(app, token, [tokens(8000), tokens(8000), tokens(8000)]);
  t.equal(big.statusCode, 200);
  t.equal(big.json().usage.prompt_tokens, 24_000, 'counted exactly (cl100k_base)');
  const over = await embedAs(app, token, ['x', tokens(8193)]);
  t.match(assertErrorBody(t, over, 400, 'INVALID_INPUT').message, /body\.input\[1\] is longer than 8192 tokens/);
  const small = await embedAs(app, token, 'hello');
  t.equal(small.json().usage.prompt_tokens, 1);

  t.same(tokenizerOnEventLoop, [], 'no gpt-tokenizer module was loaded on the event loop');
  t.equal(
    await metric(app, 'embeddings_token_counting_requests_total'),
    3,
    'the worker threads counted all 3 requests',
  );
  t.equal(await metric(app, 'embeddings_token_counting_queued_requests'), 0, 'none waiting');
});

t.test('EMBEDDINGS_TOKENS_PER_MINUTE per user, in one instance (no Redis)', async (t) => {
  const clock = new TestClock();
  const { app } = await buildTestApp(t, { clock, env: { EMBEDDINGS_TOKENS_PER_MINUTE: '100', METRICS_TOKEN } });
  const ann = accessTokenFor(app);
  const bob = accessTokenFor(app);

  t.equal((await embedAs(app, ann, tokens(60))).statusCode, 200, '60 tokens');
  t.equal((await embedAs(app, ann, tokens(30))).statusCode, 200, '30 more fit in the 40 left');
  assertTokensLimited(t, await embedAs(app, ann, [tokens(10), tokens(10)]), '20 more do not fit in the 10 left: 429');
  const counted = await metric(app, 'embeddings_token_counting_requests_total');
  assertTokensLimited(t, await embedAs(app, ann, 'hello'), 'the refused 20 were charged: all 100 used, even 1 is 429');
  t.equal(
    await metric(app, 'embeddings_token_counting_requests_total'),
    counted,
    'a user with no tokens left is refused before any counting work',
  );

  t.equal((await embedAs(app, bob, tokens(100))).statusCode, 200, 'another user has a minute of their own');
  const carl = accessTokenFor(app);
  const tooBig = await embedAs(app, carl, tokens(101));
  t.match(
    assertErrorBody(t, tooBig, 400, 'INVALID_INPUT').message,
    /more than the 100 tokens per minute/,
    'a request larger than the whole limit could never pass: 400, not 429',
  );
  assertTokensLimited(t, await embedAs(app, carl, 'hello'), 'and its counted tokens were charged: 429');
  t.equal(
    await metric(app, 'http_rate_limited_requests_total', '{operation="createEmbeddings",limit="tokens"}'),
    3,
    'the refusals are counted in the metrics',
  );

  clock.advance(61);
  t.equal((await embedAs(app, ann, tokens(100))).statusCode, 200, 'a minute later the tokens are back');
});

t.test('one user flooding the counting neither holds it up for others nor escapes their own limit', async (t) => {
  const { app } = await buildTestApp(t, { env: { EMBEDDINGS_TOKENS_PER_MINUTE: '50000', METRICS_TOKEN } });
  const ann = accessTokenFor(app);
  const bob = accessTokenFor(app);
  // 2,000 tokens and 11,999 bytes each: at most 5 of them hold Ann's minute at a time before counting.
  const flood = Array.from({ length: 80 }, () => embedAs(app, ann, tokens(2000)));
  const bobs = embedAs(app, bob, 'hello');
  const answers = await Promise.all(flood);
  t.equal((await bobs).statusCode, 200, "Bob's request is answered");

  const statuses = answers.map((res) => res.statusCode);
  t.same([...new Set(statuses)].sort(), [200, 429], 'Ann gets 200 or 429, never a 503 (the shared queue never filled)');
  t.ok(statuses.filter((s) => s === 200).length <= 25, 'at most 25 × 2,000 of her 50,000 tokens were embedded');
  for (const res of answers.filter((res) => res.statusCode === 429)) {
    const seconds = Number(res.headers['retry-after']);
    t.ok(Number.isInteger(seconds) && seconds >= 1 && seconds <= 60, `Retry-After ${seconds}`);
  }
  // Each holds up to its 11,999 bytes of her 50,000 before counting: four whole holds and a fifth
  // with what is left.
  const peak = (await metric(app, 'embeddings_token_counting_peak_requests_per_user')) ?? 99;
  t.ok(peak <= 5, `at most 5 of her requests (what her minute could hold) were being counted at once (${peak})`);
  const counted = (await metric(app, 'embeddings_token_counting_requests_total')) ?? 0;
  t.ok(counted <= 1 + 27, `only what her minute could pay for was counted (${counted - 1} of her 80)`);

  // A flood of requests over the whole allowance: the first holds all of Dan's minute while it is
  // counted, and its 400 is charged, so none of the others is ever counted.
  const dan = accessTokenFor(app);
  const tooBig = await Promise.all(Array.from({ length: 20 }, () => embedAs(app, dan, tokens(50_001))));
  t.same(
    tooBig.map((res) => res.statusCode).sort(),
    [400, ...Array(19).fill(429)],
    'one 400 (counted), 19 refused before counting',
  );
  t.equal(
    await metric(app, 'embeddings_token_counting_requests_total'),
    counted + 1,
    'only the first of the 20 was counted',
  );
  assertTokensLimited(t, await embedAs(app, dan, 'hello'), 'its counted tokens were charged: 1 more token is refused');
});

t.test('a user has at most TOKEN_COUNTING_PER_USER (16) requests in the counting queue; one more is 429', async (t) => {
  const counter = createTokenCounter({ threads: 1 });
  t.teardown(() => counter.close());
  t.equal(TOKEN_COUNTING_PER_USER, 16, 'a quarter of the 64 places');
  // Called together: the first holds the one thread, the others wait their turn.
  const hers = Array.from({ length: TOKEN_COUNTING_PER_USER }, () => counter.count('ann', [tokens(2000)], true));
  const oneMore = counter.count('ann', ['hello'], true);
  const his = counter.count('bob', ['hello'], true);
  const refused = await oneMore.then(
    () => undefined,
    (err: { statusCode?: number; code?: string; headers?: Record<string, string> }) => err,
  );
  t.match(refused, { statusCode: 429, code: 'RATE_LIMITED' }, `her request number ${TOKEN_COUNTING_PER_USER + 1}: 429`);
  t.same((await Promise.all(hers)).flat(), Array(TOKEN_COUNTING_PER_USER).fill(2000), 'her 16 are counted');
  t.same(await his, [1], "another user's request is counted meanwhile");
  t.equal(counter.stats().peakPerUser, TOKEN_COUNTING_PER_USER, 'the peak shows her 16');
  t.same(await counter.count('ann', ['hello'], true), [1], 'once hers are counted she has places again');
});
