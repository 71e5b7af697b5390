import type { FastifyInstance } from 'fastify';
import t, { type Test } from 'tap';
import { buildAppCapturingLogs, buildTestApp } from './helpers/app.ts';
import { decodeClaims } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import {
  FAKE_NATIVE_DIMENSIONS,
  type FakeUpstream,
  fakePromptTokens,
  fakeVector,
  startFakeUpstream,
  type UpstreamBehaviour,
} from './helpers/fake-embeddings-upstream.ts';
import { assertMatchesSchema } from './helpers/spec-schema.ts';
import { accessTokenFor } from './helpers/tokens.ts';

const API_KEY = 'sk-test-secret-key-123';
const MODEL = 'text-embedding-3-small';
const URL_PATH = '/api/ai/embeddings';

const upstreamEnv = (fake: FakeUpstream, extra: Record<string, string> = {}) => ({
  EMBEDDINGS_BASE_URL: fake.baseUrl,
  EMBEDDINGS_API_KEY: API_KEY,
  EMBEDDINGS_RETRY_BASE_MS: '5',
  EMBEDDINGS_TIMEOUT_MS: '400',
  ...extra,
});

/** POST /api/ai/embeddings as the holder of `token`. */
const embedAs = (app: FastifyInstance, token: string) => (payload: unknown) =>
  app.inject({
    method: 'POST',
    url: URL_PATH,
    headers: { authorization: `Bearer ${token}` },
    payload: payload as object,
  });

/** The float32 values of a base64 embedding, read little-endian whatever the host. */
/** Float answers carry 9 significant digits: compare them as the float32 values they stand for. */
const float32s = (values: readonly number[]): number[] => Array.from(Float32Array.from(values));

const decodeBase64 = (base64: string): number[] => {
  const bytes = Buffer.from(base64, 'base64');
  return Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(i * 4));
};

t.test('POST /api/ai/embeddings through an OpenAI-compatible upstream', async (t) => {
  const fake = await startFakeUpstream();
  t.teardown(() => fake.close());
  const { app, database } = await buildTestApp(t, { env: upstreamEnv(fake) });
  const token = accessTokenFor(app);
  const embed = embedAs(app, token);

  /** A call expected to fail: the error body, the number of upstream requests it caused and how long it took. */
  const failure = async (
    t: Test,
    behaviours: UpstreamBehaviour[],
    status: number,
    code: string,
    requests: number,
    payload: object = { model: MODEL, input: 'hello world' },
  ) => {
    fake.enqueue(...behaviours);
    const started = performance.now();
    const res = await embed(payload);
    const elapsed = performance.now() - started;
    const body = assertErrorBody(t, res, status, code);
    t.equal(fake.requests.length, requests, `${requests} upstream request(s)`);
    return { res, body, elapsed };
  };

  t.test('float, single string: the spec’s shape, the fake’s vector and the upstream’s usage figures', async (t) => {
    fake.reset();
    const input = 'The quick brown fox jumps over the lazy dog';
    const res = await embed({ model: MODEL, input });
    t.equal(res.statusCode, 200);
    const body = res.json();
    assertMatchesSchema(t, body, 'EmbeddingsResponse');
    const tokens = fakePromptTokens([input]);
    t.same(float32s(body.data[0].embedding), fakeVector(input, FAKE_NATIVE_DIMENSIONS));
    t.same(body, {
      object: 'list',
      data: [{ object: 'embedding', embedding: body.data[0].embedding, index: 0 }],
      model: MODEL,
      usage: { prompt_tokens: tokens, total_tokens: tokens },
      metadata: { model: MODEL, usage: { promptTokens: tokens, completionTokens: 0, totalTokens: tokens } },
    });
    t.strictSame(
      Object.keys(body),
      ['object', 'data', 'model', 'usage', 'metadata'],
      'no other top-level field, in this order',
    );
    t.strictSame(Object.keys(body.data[0]).sort(), ['embedding', 'index', 'object'], 'no other item field');

    t.equal(fake.requests.length, 1);
    const seen = fake.requests[0];
    t.equal(seen?.method, 'POST');
    t.equal(seen?.path, '/v1/embeddings');
    t.equal(seen?.headers.authorization, `Bearer ${API_KEY}`, 'the service’s key, not the caller’s token');
    t.match(String(seen?.headers['content-type']), /^application\/json/);
    t.same(seen?.body.input, [input], 'input is sent as an array');
    t.equal(seen?.body.model, MODEL);
    t.equal(
      seen?.body.encoding_format,
      'base64',
      'base64 asked for whatever the caller wants (a quarter of the bytes)',
    );
    t.notOk('dimensions' in (seen?.body ?? {}), 'no dimensions unless asked');
  });

  t.test('array input in float and base64: indexes in order, base64 decodes to the float answer exactly', async (t) => {
    fake.reset();
    const input = ['first text', 'second, longer text', 'émoji 🦊 and ünïcode', 'first text'];
    const floats = await embed({ model: MODEL, input });
    t.equal(floats.statusCode, 200);
    const fb = floats.json();
    t.same(
      fb.data.map((d: { index: number }) => d.index),
      [0, 1, 2, 3],
    );
    for (const [i, item] of fb.data.entries())
      t.same(float32s(item.embedding), fakeVector(input[i] as string, 8), `float ${i}`);
    const tokens = fakePromptTokens(input);
    t.same(fb.metadata.usage, { promptTokens: tokens, completionTokens: 0, totalTokens: tokens });
    t.equal(fake.requests[0]?.body.encoding_format, 'base64');
    t.same(fake.requests[0]?.body.input, input);

    const base64 = await embed({ model: MODEL, input, encoding_format: 'base64' });
    t.equal(base64.statusCode, 200);
    const bb = base64.json();
    assertMatchesSchema(t, bb, 'EmbeddingsResponse');
    t.equal(fake.requests.length, 2);
    t.equal(fake.requests[1]?.body.encoding_format, 'base64', 'the upstream was asked for base64');
    t.same(
      bb.data.map((d: { index: number }) => d.index),
      [0, 1, 2, 3],
    );
    for (const [i, item] of bb.data.entries()) {
      t.type(item.embedding, 'string');
      t.same(decodeBase64(item.embedding), float32s(fb.data[i].embedding), `base64 ${i} decodes to the float answer`);
    }
    t.same(bb.metadata, fb.metadata);
  });

  t.test('both formats are right when the upstream ignores encoding_format and answers floats', async (t) => {
    fake.reset();
    fake.ignoreEncodingFormat = true;
    const input = ['alpha', 'beta gamma'];
    const res = await embed({ model: MODEL, input, encoding_format: 'base64' });
    t.equal(res.statusCode, 200);
    t.equal(fake.requests[0]?.body.encoding_format, 'base64');
    for (const [i, item] of res.json().data.entries()) {
      t.type(item.embedding, 'string', 'base64 although the upstream sent floats');
      t.same(decodeBase64(item.embedding), fakeVector(input[i] as string, 8));
    }
    const floats = await embed({ model: MODEL, input });
    t.equal(floats.statusCode, 200);
    for (const [i, item] of floats.json().data.entries()) {
      t.ok(Array.isArray(item.embedding), 'floats');
      t.same(float32s(item.embedding), fakeVector(input[i] as string, 8));
    }
  });

  t.test('float answers are the upstream’s float32 values in at most 9 significant digits', async (t) => {
    fake.reset();
    const dimensions = 1536; // the fake's float32 values need up to 17 digits as doubles
    const res = await embed({ model: MODEL, input: 'precision', dimensions });
    t.equal(res.statusCode, 200);
    const got: number[] = res.json().data[0].embedding;
    const want = fakeVector('precision', dimensions);
    t.equal(got.length, dimensions);
    const wrong = got.filter((x, i) => Math.fround(x) !== want[i]).length;
    t.equal(wrong, 0, 'every number reads back as the upstream’s float32');
    const long = got.filter((x) => x.toExponential().replace(/^-|e.*$|\./g, '').length > 9).length;
    t.equal(long, 0, 'no number has more than 9 significant digits');
    t.ok(
      got.some((x, i) => x !== want[i]),
      'the case is real: some values were shortened',
    );
  });

  t.test('answers whose data items are out of order are put back in order by their index', async (t) => {
    fake.reset();
    const input = ['one', 'two', 'three'];
    fake.enqueue({
      status: 200,
      body: {
        object: 'list',
        data: [2, 0, 1].map((index) => ({
          object: 'embedding',
          index,
          embedding: fakeVector(input[index] as string, 8),
        })),
        usage: { prompt_tokens: 3, total_tokens: 3 },
      },
    });
    const res = await embed({ model: MODEL, input });
    t.equal(res.statusCode, 200);
    for (const [i, item] of res.json().data.entries()) {
      t.equal(item.index, i);
      t.same(float32s(item.embedding), fakeVector(input[i] as string, 8));
    }
  });

  t.test('dimensions: forwarded; too large, unshortenable or 0 is a 400 before any upstream call', async (t) => {
    fake.reset();
    const res = await embed({ model: MODEL, input: 'short me', dimensions: 4 });
    t.equal(res.statusCode, 200);
    t.equal(fake.requests[0]?.body.dimensions, 4, 'the upstream was asked for 4 dimensions');
    t.same(float32s(res.json().data[0].embedding), fakeVector('short me', 4));
    t.equal(res.json().data[0].embedding.length, 4);

    fake.reset();
    const b64 = await embed({ model: MODEL, input: 'short me', dimensions: 4, encoding_format: 'base64' });
    t.same(decodeBase64(b64.json().data[0].embedding), fakeVector('short me', 4));

    fake.reset();
    const tooMany = assertErrorBody(
      t,
      await embed({ model: MODEL, input: 'x', dimensions: 1537 }),
      400,
      'INVALID_INPUT',
    );
    t.match(tooMany.message, /1536/, 'names the native size');
    t.equal(fake.requests.length, 0, 'no upstream request');
    // The native size itself is allowed.
    t.equal((await embed({ model: MODEL, input: 'x', dimensions: 1536 })).statusCode, 200);
    t.equal(fake.requests.length, 1);

    fake.reset();
    const ada = assertErrorBody(
      t,
      await embed({ model: 'text-embedding-ada-002', input: 'x', dimensions: 512 }),
      400,
      'INVALID_INPUT',
    );
    t.match(ada.message, /cannot shorten/);
    t.equal(fake.requests.length, 0, 'no upstream request');
    // Without dimensions the same model is passed on.
    t.equal((await embed({ model: 'text-embedding-ada-002', input: 'x' })).statusCode, 200);
    t.equal(fake.requests.length, 1);

    fake.reset();
    // 0: the model's own size, as without the field; nothing about dimensions goes upstream.
    const zero = await embed({ model: MODEL, input: 'x', dimensions: 0 });
    t.equal(zero.statusCode, 200, 'dimensions 0 is the native size');
    t.equal(zero.json().data[0].embedding.length, FAKE_NATIVE_DIMENSIONS);
    t.equal(fake.requests[0]?.body.dimensions, undefined, 'and is not sent upstream');
    t.equal(
      (await embed({ model: 'text-embedding-ada-002', input: 'x', dimensions: 0 })).statusCode,
      200,
      'even for a model that cannot shorten',
    );
    fake.reset();
    assertErrorBody(t, await embed({ model: MODEL, input: 'x', dimensions: -1 }), 400, 'INVALID_INPUT');
    assertErrorBody(t, await embed({ model: MODEL, input: 'x', dimensions: 2.5 }), 400, 'INVALID_INPUT');
    assertErrorBody(t, await embed({ model: MODEL, input: 'x', dimensions: '4' }), 400, 'INVALID_INPUT');
    t.equal(fake.requests.length, 0, 'no upstream request');
  });

  t.test('usage when the upstream omits it: the service’s own tiktoken count', async (t) => {
    fake.reset();
    fake.omitUsage = true;
    const res = await embed({ model: MODEL, input: 'hello world' });
    t.equal(res.statusCode, 200);
    t.same(res.json().metadata.usage, { promptTokens: 2, completionTokens: 0, totalTokens: 2 });
    const many = await embed({ model: MODEL, input: ['hello world', 'hello'] });
    t.same(many.json().metadata.usage, { promptTokens: 3, completionTokens: 0, totalTokens: 3 });
  });

  t.test('input limits are checked before any upstream call', async (t) => {
    fake.reset();
    const rejected = async (payload: object, pattern: RegExp) => {
      const body = assertErrorBody(t, await embed(payload), 400, 'INVALID_INPUT');
      t.match(body.message, pattern);
      t.equal(fake.requests.length, 0, 'no upstream request');
    };
    await rejected({ model: MODEL, input: '' }, /input.*empty/);
    await rejected({ model: MODEL, input: ['fine', ''] }, /input\[1\].*empty/);
    await rejected({ model: MODEL, input: [] }, /input/);
    await rejected({ model: MODEL, input: Array.from({ length: 2049 }, () => 'x') }, /2048/);
    await rejected({ model: MODEL, input: ['fine', 'hello '.repeat(8200)] }, /input\[1\].*8192 tokens/);
    await rejected({ model: MODEL, input: 'hello '.repeat(8200) }, /8192 tokens/);
    await rejected({ model: MODEL, input: Array.from({ length: 40 }, () => 'hello '.repeat(8000)) }, /300,000 tokens/);
    await rejected({ model: MODEL, input: 'x', owner: 'someone' }, /owner.*not an accepted field/);
    await rejected({ model: MODEL, input: 'x', user: 'u'.repeat(257) }, /user must have at most 256 characters/);
    await rejected({ model: MODEL, input: 42 }, /input must be string or array/);
    await rejected({ model: MODEL, input: { text: 'x' } }, /input/);
    await rejected({ model: MODEL, input: ['x', 7] }, /input/);
    await rejected({ input: 'x' }, /model is required/);
    await rejected({ model: MODEL }, /input is required/);
    await rejected({ model: MODEL, input: 'x', encoding_format: 'int8' }, /encoding_format/);

    // At the limits exactly, the request goes through.
    t.equal((await embed({ model: MODEL, input: Array.from({ length: 2048 }, () => 'x') })).statusCode, 200);
    t.equal((await embed({ model: MODEL, input: 'hello '.repeat(8192).trimEnd() })).statusCode, 200);
    t.equal(fake.requests.length, 2);
  });

  t.test('5xx and dropped connections are retried twice, then 502 PROVIDER_UNAVAILABLE', async (t) => {
    fake.reset();
    const five = await failure(t, [{ status: 500 }, { status: 500 }, { status: 500 }], 502, 'PROVIDER_UNAVAILABLE', 3);
    t.match(five.body.message, /500/);

    fake.reset();
    fake.enqueue({ status: 503 });
    const res = await embed({ model: MODEL, input: 'hello world' });
    t.equal(res.statusCode, 200, '503 then success is a success');
    t.same(float32s(res.json().data[0].embedding), fakeVector('hello world', 8));
    t.equal(fake.requests.length, 2);

    fake.reset();
    await failure(t, [{ drop: true }, { drop: true }, { drop: true }], 502, 'PROVIDER_UNAVAILABLE', 3);

    fake.reset();
    fake.enqueue({ drop: true });
    t.equal((await embed({ model: MODEL, input: 'hello world' })).statusCode, 200, 'a dropped connection then success');
    t.equal(fake.requests.length, 2);
  });

  t.test('408 and 409 are retried', async (t) => {
    for (const status of [408, 409]) {
      fake.reset();
      fake.enqueue({ status });
      t.equal((await embed({ model: MODEL, input: 'hello' })).statusCode, 200, `${status} then success`);
      t.equal(fake.requests.length, 2, `${status} was retried once`);

      fake.reset();
      await failure(t, [{ status }, { status }, { status }], 502, 'PROVIDER_UNAVAILABLE', 3);
    }
  });

  t.test('429: retried, Retry-After honoured up to 60 s, then 429 RATE_LIMITED with Retry-After', async (t) => {
    fake.reset();
    const now = { status: 429, headers: { 'retry-after': '0' } };
    const limited = await failure(t, [now, now, now], 429, 'RATE_LIMITED', 3);
    t.match(String(limited.res.headers['retry-after']), /^[1-9]\d*$/, 'a Retry-After of at least one second');

    fake.reset();
    fake.enqueue({ status: 429, headers: { 'retry-after': '1' } });
    const started = performance.now();
    const res = await embed({ model: MODEL, input: 'hello' });
    const elapsed = performance.now() - started;
    t.equal(res.statusCode, 200);
    t.equal(fake.requests.length, 2);
    t.ok(elapsed >= 950, `waited the upstream’s Retry-After of 1 s (${Math.round(elapsed)} ms)`);

    fake.reset();
    const long = await failure(t, [{ status: 429, headers: { 'retry-after': '120' } }], 429, 'RATE_LIMITED', 1);
    t.equal(long.res.headers['retry-after'], '120', 'the upstream’s wait is passed on');
    t.ok(long.elapsed < 500, `answered at once (${Math.round(long.elapsed)} ms)`);
  });

  t.test('400, 404 and 422 are a 400 with the upstream’s message, never retried', async (t) => {
    const shapes: [number, unknown, string][] = [
      [
        400,
        { error: { message: 'nested shape says no', type: 'invalid_request_error', code: 'bad' } },
        'nested shape says no',
      ],
      [404, { message: 'flat shape: model not found', type: 'NotFound', code: 404 }, 'flat shape: model not found'],
      [422, { error: 'plain text error from the server' }, 'plain text error from the server'],
      [
        422,
        { detail: [{ loc: ['body', 'input'], msg: 'fastapi says field required', type: 'missing' }] },
        'fastapi says field required',
      ],
    ];
    for (const [status, body, message] of shapes) {
      fake.reset();
      const { body: error } = await failure(t, [{ status, body }], 400, 'INVALID_INPUT', 1);
      t.ok(error.message.includes(message), `${status}: the message carries "${message}"`);
    }
  });

  t.test('401 and 403 are 502 PROVIDER_AUTH_FAILED, never retried, without the key', async (t) => {
    for (const status of [401, 403]) {
      fake.reset();
      const body = {
        error: { message: `Incorrect API key provided: ${API_KEY}`, type: 'auth', code: 'invalid_api_key' },
      };
      const { res } = await failure(t, [{ status, body }], 502, 'PROVIDER_AUTH_FAILED', 1);
      t.notOk(res.body.includes(API_KEY), 'the key is not in the response');
      t.notOk(res.body.includes('sk-test'), 'not even part of it');
    }
  });

  t.test('a slow upstream is 504 PROVIDER_TIMEOUT after one request', async (t) => {
    fake.reset();
    const { elapsed } = await failure(t, [{ delayMs: 1500 }], 504, 'PROVIDER_TIMEOUT', 1);
    t.ok(elapsed >= 350 && elapsed < 1200, `gave up after the 400 ms timeout (${Math.round(elapsed)} ms)`);
  });

  t.test('a malformed 200 answer is a 502', async (t) => {
    fake.reset();
    const wrongCount = { object: 'list', data: [{ object: 'embedding', index: 0, embedding: [0.5, 0.25] }] };
    await failure(t, [{ status: 200, body: wrongCount }], 502, 'PROVIDER_UNAVAILABLE', 1, {
      model: MODEL,
      input: ['a', 'b'],
    });

    fake.reset();
    // toJSON returning undefined makes the fake send a 200 with an empty body: not JSON.
    await failure(t, [{ status: 200, body: { toJSON: () => undefined } }], 502, 'PROVIDER_UNAVAILABLE', 1);

    fake.reset();
    const badVector = { object: 'list', data: [{ object: 'embedding', index: 0, embedding: ['x'] }] };
    await failure(t, [{ status: 200, body: badVector }], 502, 'PROVIDER_UNAVAILABLE', 1);

    fake.reset();
    const duplicate = {
      object: 'list',
      data: [
        { object: 'embedding', index: 0, embedding: [0.5] },
        { object: 'embedding', index: 0, embedding: [0.5] },
      ],
    };
    await failure(t, [{ status: 200, body: duplicate }], 502, 'PROVIDER_UNAVAILABLE', 1, {
      model: MODEL,
      input: ['a', 'b'],
    });
  });

  t.test('a model that ignores dimensions is a 400; mixed vector sizes an invalid answer', async (t) => {
    fake.reset();
    const eight = { object: 'embedding', index: 0, embedding: fakeVector('hello world', 8) };
    const ignored = { object: 'list', data: [eight] };
    const { body } = await failure(t, [{ status: 200, body: ignored }], 400, 'INVALID_INPUT', 1, {
      model: 'nomic-embed-text',
      input: 'hello world',
      dimensions: 4,
    });
    t.match(body.message, /"nomic-embed-text" cannot shorten its vectors \(it returned 8 dimensions\)/);
    fake.reset();
    const mixed = {
      object: 'list',
      data: [eight, { object: 'embedding', index: 1, embedding: fakeVector('b', 6) }],
    };
    const second = await failure(t, [{ status: 200, body: mixed }], 502, 'PROVIDER_UNAVAILABLE', 1, {
      model: MODEL,
      input: ['hello world', 'b'],
    });
    t.match(second.body.message, /different sizes/);
  });

  t.test('other upstream refusals (redirect, 402, 413) are the deployment’s problem: 502, not retried', async (t) => {
    for (const status of [302, 402, 413]) {
      fake.reset();
      const { body } = await failure(
        t,
        [{ status, headers: { location: 'http://127.0.0.1:9/' } }],
        502,
        'PROVIDER_UNAVAILABLE',
        1,
      );
      t.match(body.message, new RegExp(`HTTP ${status}`));
    }
  });

  t.test('a 200 whose body is JSON null is an invalid answer, not a connection error', async (t) => {
    fake.reset();
    const { body } = await failure(t, [{ status: 200, body: null }], 502, 'PROVIDER_UNAVAILABLE', 1);
    t.match(body.message, /invalid answer/);
  });

  t.test('the service’s key never reaches the caller, even when the upstream echoes it', async (t) => {
    const echo = { error: { message: `Incorrect API key provided: ${API_KEY}. Check it.`, type: 'x', code: null } };
    fake.reset();
    const refused = await failure(t, [{ status: 400, body: echo }], 400, 'INVALID_INPUT', 1);
    t.notOk(refused.res.body.includes(API_KEY), 'not in a 400');
    t.match(refused.body.message, /Incorrect API key provided/, 'the rest of the upstream’s message is kept');

    fake.reset();
    const failed = await failure(
      t,
      [500, 500, 500].map((status) => ({ status, body: echo })),
      502,
      'PROVIDER_UNAVAILABLE',
      3,
    );
    t.notOk(failed.res.body.includes(API_KEY), 'not in a 502');

    fake.reset();
    const flat = { message: `bad key ${API_KEY}`, type: 'x', code: null };
    const flatRes = await failure(t, [{ status: 422, body: flat }], 400, 'INVALID_INPUT', 1);
    t.notOk(flatRes.res.body.includes(API_KEY), 'not in a flat-shape 400');
  });

  t.test('neither the service’s key nor the caller’s token appears in the logs', async (t) => {
    fake.reset();
    const { app: logged, lines } = await buildAppCapturingLogs(t, 'trace', upstreamEnv(fake));
    const callerToken = accessTokenFor(logged);
    const call = embedAs(logged, callerToken);
    const echo = { error: { message: `Incorrect API key provided: ${API_KEY}`, type: 'x', code: null } };

    t.equal((await call({ model: MODEL, input: 'hello' })).statusCode, 200);
    fake.enqueue({ status: 400, body: echo });
    t.equal((await call({ model: MODEL, input: 'hello' })).statusCode, 400);
    fake.enqueue(...[500, 500, 500].map((status) => ({ status, body: echo })));
    t.equal((await call({ model: MODEL, input: 'hello' })).statusCode, 502);
    fake.enqueue({ status: 401, body: echo });
    t.equal((await call({ model: MODEL, input: 'hello' })).statusCode, 502);
    fake.enqueue({ delayMs: 1000 });
    t.equal((await call({ model: MODEL, input: 'hello' })).statusCode, 504);
    t.equal((await call({ model: MODEL, input: ['a', 'b'], encoding_format: 'base64' })).statusCode, 200);
    t.equal(fake.requests.length, 8);

    const log = lines.join('');
    t.ok(lines.length >= 6, `the log was captured (${lines.length} lines)`);
    t.match(log, /request failed/, 'the 5xx were logged');
    t.notOk(log.includes(API_KEY), 'the API key is not in the log');
    t.notOk(log.includes(callerToken), 'the caller’s token is not in the log');
    t.notOk(log.includes(callerToken.split('.')[2] as string), 'nor its signature');
  });

  t.test('EMBEDDINGS_MODELS: other models are 400 MODEL_NOT_ALLOWED listing the allowed ones', async (t) => {
    fake.reset();
    const { app: listed } = await buildTestApp(t, {
      env: upstreamEnv(fake, { EMBEDDINGS_MODELS: 'text-embedding-3-small,local/lexical-v1' }),
    });
    const call = embedAs(listed, accessTokenFor(listed));
    for (const model of ['text-embedding-3-large', 'openai/text-embedding-3-small', 'local/other']) {
      const body = assertErrorBody(t, await call({ model, input: 'hello' }), 400, 'MODEL_NOT_ALLOWED');
      t.match(body.message, /text-embedding-3-small/);
      t.match(body.message, /local\/lexical-v1/);
    }
    t.equal(fake.requests.length, 0, 'no upstream request');

    const local = await call({ model: 'local/lexical-v1', input: 'hello' });
    t.equal(local.statusCode, 200);
    t.equal(local.json().data[0].embedding.length, 512);
    t.equal(fake.requests.length, 0, 'the local model does not touch the upstream');

    const upstream = await call({ model: MODEL, input: 'hello' });
    t.equal(upstream.statusCode, 200);
    t.same(float32s(upstream.json().data[0].embedding), fakeVector('hello', 8));
    t.equal(fake.requests.length, 1);
  });

  t.test('usage is recorded per successful call (batched), and not for failures', async (t) => {
    fake.reset();
    const spender = accessTokenFor(app);
    const failer = accessTokenFor(app);
    const spenderId = String(decodeClaims(spender).sub);
    const failerId = String(decodeClaims(failer).sub);

    // The failure first: had it been recorded, it would be written with (or before) the successes.
    fake.enqueue({ status: 400 });
    t.equal((await embedAs(app, failer)({ model: MODEL, input: 'fails' })).statusCode, 400);
    const one = await embedAs(app, spender)({ model: MODEL, input: 'one text here' });
    const two = await embedAs(app, spender)({ model: MODEL, input: ['a', 'b c', 'd e f'], dimensions: 4 });
    t.equal(one.statusCode, 200);
    t.equal(two.statusCode, 200);

    const db = database.handle.db;
    const rowsOf = (userId: string) =>
      db.selectFrom('embedding_usage').selectAll().where('user_id', '=', userId).orderBy('id').execute();
    let rows = await rowsOf(spenderId);
    for (const deadline = Date.now() + 5_000; rows.length < 2 && Date.now() < deadline; ) {
      await new Promise((r) => setTimeout(r, 100));
      rows = await rowsOf(spenderId);
    }
    t.equal(rows.length, 2, 'one row per successful call');
    const usage = [one.json().metadata.usage, two.json().metadata.usage];
    t.same(
      rows.map((r) => ({
        user_id: r.user_id,
        model: r.model,
        inputs: r.inputs,
        prompt_tokens: r.prompt_tokens,
        total_tokens: r.total_tokens,
      })),
      [
        {
          user_id: spenderId,
          model: MODEL,
          inputs: 1,
          prompt_tokens: usage[0].promptTokens,
          total_tokens: usage[0].totalTokens,
        },
        {
          user_id: spenderId,
          model: MODEL,
          inputs: 3,
          prompt_tokens: usage[1].promptTokens,
          total_tokens: usage[1].totalTokens,
        },
      ],
    );
    t.equal(usage[1].promptTokens, fakePromptTokens(['a', 'b c', 'd e f']), 'the upstream’s figures were recorded');
    for (const row of rows) {
      t.ok(
        row.created_at instanceof Date && Math.abs(row.created_at.getTime() - Date.now()) < 60_000,
        'created_at is now',
      );
    }
    t.same(await rowsOf(failerId), [], 'the failed call recorded nothing');
  });

  t.test('EMBEDDINGS_RATE_LIMIT is per user: the 4th call in a minute is 429, another user still passes', async (t) => {
    fake.reset();
    const { app: limited } = await buildTestApp(t, { env: upstreamEnv(fake, { EMBEDDINGS_RATE_LIMIT: '3' }) });
    const first = embedAs(limited, accessTokenFor(limited));
    for (let i = 0; i < 3; i++) t.equal((await first({ model: MODEL, input: `call ${i}` })).statusCode, 200);
    const res = await first({ model: MODEL, input: 'call 4' });
    assertErrorBody(t, res, 429, 'RATE_LIMITED');
    t.match(String(res.headers['retry-after']), /^[1-9]\d*$/, 'Retry-After in seconds');
    t.ok(Number(res.headers['retry-after']) <= 60, 'within the minute');
    t.equal(fake.requests.length, 3, 'the limited call did not reach the upstream');

    const other = await embedAs(limited, accessTokenFor(limited))({ model: MODEL, input: 'another user' });
    t.equal(other.statusCode, 200);
    t.equal(fake.requests.length, 4);
  });

  t.test('without a valid token: 401 and no upstream request', async (t) => {
    fake.reset();
    const none = await app.inject({ method: 'POST', url: URL_PATH, payload: { model: MODEL, input: 'hello' } });
    assertErrorBody(t, none, 401, 'UNAUTHORIZED');
    const bad = await app.inject({
      method: 'POST',
      url: URL_PATH,
      headers: { authorization: 'Bearer not.a.token' },
      payload: { model: MODEL, input: 'hello' },
    });
    assertErrorBody(t, bad, 401, 'AUTH_UNAUTHORIZED');
    t.equal(fake.requests.length, 0);
  });
});
