import t from 'tap';
import { localEmbedding } from '../src/embeddings/local-model.ts';
import { LOCAL_MODEL, LOCAL_MODEL_DIMENSIONS } from '../src/embeddings/models.ts';
import { buildTestApp } from './helpers/app.ts';
import { decodeClaims } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { assertMatchesSchema } from './helpers/spec-schema.ts';
import { accessTokenFor } from './helpers/tokens.ts';

const cosine = (a: ArrayLike<number>, b: ArrayLike<number>) => {
  let dot = 0;
  for (let i = 0; i < a.length; i++) dot += (a[i] as number) * (b[i] as number);
  return dot;
};
const decode = (base64: string) => {
  const bytes = Buffer.from(base64, 'base64');
  return Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(i * 4));
};

t.test('the local model on a fresh app with no embeddings configuration', async (t) => {
  // No EMBEDDINGS_* variable at all: what a new user has after cloning.
  // The per-user tokens-per-minute limit is test/embeddings-token-limit.test.ts's: room here for
  // the large bodies below, all from one user within one minute.
  const { app, database } = await buildTestApp(t, { env: { EMBEDDINGS_TOKENS_PER_MINUTE: '100000000' } });
  const headers = { authorization: `Bearer ${accessTokenFor(app)}` };
  const embed = (payload: object) => app.inject({ method: 'POST', url: '/api/ai/embeddings', headers, payload });

  t.test('a single string gives one unit vector of the native size, in the spec’s shape', async (t) => {
    const res = await embed({ model: LOCAL_MODEL, input: 'hello' });
    t.equal(res.statusCode, 200);
    const body = res.json();
    assertMatchesSchema(t, body, 'EmbeddingsResponse');
    t.equal(body.object, 'list');
    t.equal(body.data.length, 1);
    t.same(Object.keys(body.data[0]).sort(), ['embedding', 'index', 'object']);
    t.equal(body.data[0].object, 'embedding');
    t.equal(body.data[0].index, 0);
    t.equal(body.data[0].embedding.length, LOCAL_MODEL_DIMENSIONS);
    t.ok(Math.abs(cosine(body.data[0].embedding, body.data[0].embedding) - 1) < 1e-6, 'L2-normalised');
    t.same(body.metadata, { model: LOCAL_MODEL, usage: { promptTokens: 1, completionTokens: 0, totalTokens: 1 } });
  });

  t.test('deterministic: the same text always gives the same vector', async (t) => {
    const a = (await embed({ model: LOCAL_MODEL, input: 'same text' })).json().data[0].embedding;
    const b = (await embed({ model: LOCAL_MODEL, input: ['other', 'same text'] })).json().data[1].embedding;
    t.same(a, b);
  });

  t.test('base64 is the float32 little-endian form of the float answer', async (t) => {
    const input = ['The quick brown fox', 'jumps over the lazy dog', 'émoji 🦊 and ünïcode'];
    const floats = (await embed({ model: LOCAL_MODEL, input })).json();
    const base64 = (await embed({ model: LOCAL_MODEL, input, encoding_format: 'base64' })).json();
    assertMatchesSchema(t, base64, 'EmbeddingsResponse');
    t.same(
      base64.data.map((d: { index: number }) => d.index),
      [0, 1, 2],
    );
    for (const [i, item] of base64.data.entries()) {
      t.type(item.embedding, 'string');
      const decoded = decode(item.embedding);
      t.equal(decoded.length, LOCAL_MODEL_DIMENSIONS);
      t.same(
        decoded,
        floats.data[i].embedding.map((x: number) => Math.fround(x)),
        `input ${i}: same float32 values`,
      );
    }
    t.same(base64.metadata, floats.metadata);
  });

  t.test('dimensions gives shorter unit vectors; 0 is the full size; more than 512 is refused', async (t) => {
    const res = await embed({ model: LOCAL_MODEL, input: 'hello world', dimensions: 64 });
    const v = res.json().data[0].embedding;
    t.equal(v.length, 64);
    t.ok(Math.abs(cosine(v, v) - 1) < 1e-6);
    const full = (await embed({ model: LOCAL_MODEL, input: 'hello world' })).json();
    const zero = await embed({ model: LOCAL_MODEL, input: 'hello world', dimensions: 0 });
    t.equal(zero.statusCode, 200);
    t.same(zero.json().data, full.data, '0: the same vectors as without the field');
    t.match(
      assertErrorBody(t, await embed({ model: LOCAL_MODEL, input: 'x', dimensions: 513 }), 400, 'INVALID_INPUT')
        .message,
      /at most 512/,
    );
    assertErrorBody(t, await embed({ model: LOCAL_MODEL, input: 'x', dimensions: -1 }), 400, 'INVALID_INPUT');
    assertErrorBody(t, await embed({ model: LOCAL_MODEL, input: 'x', dimensions: 1.5 }), 400, 'INVALID_INPUT');
  });

  t.test('texts that share words are closer than unrelated texts', async (t) => {
    const [cat1, cat2, other] = (
      await embed({
        model: LOCAL_MODEL,
        input: ['the cat sat on the mat', 'a cat was sitting on the mat', 'quarterly revenue grew by ten percent'],
      })
    )
      .json()
      .data.map((d: { embedding: number[] }) => d.embedding);
    const related = cosine(cat1, cat2);
    const unrelated = cosine(cat1, other);
    t.ok(related > 0.4, `shared words: cosine ${related.toFixed(3)}`);
    t.ok(Math.abs(unrelated) < 0.15, `no shared words: cosine ${unrelated.toFixed(3)}`);
    t.ok(related > unrelated + 0.3);
  });

  t.test('without a provider only local models exist, and the error lists them', async (t) => {
    const body = assertErrorBody(
      t,
      await embed({ model: 'text-embedding-3-small', input: 'x' }),
      400,
      'MODEL_NOT_ALLOWED',
    );
    t.match(body.message, LOCAL_MODEL);
    assertErrorBody(t, await embed({ model: 'local/unknown', input: 'x' }), 400, 'MODEL_NOT_ALLOWED');
  });

  t.test('input limits: empty strings, item count, tokens per item and per request', async (t) => {
    t.match(assertErrorBody(t, await embed({ model: LOCAL_MODEL, input: '' }), 400).message, /input must not be empty/);
    t.match(
      assertErrorBody(t, await embed({ model: LOCAL_MODEL, input: ['ok', ''] }), 400).message,
      /input\[1\] must not be empty/,
    );
    t.match(assertErrorBody(t, await embed({ model: LOCAL_MODEL, input: [] }), 400).message, /at least 1 item/);
    t.match(
      assertErrorBody(t, await embed({ model: LOCAL_MODEL, input: Array(2049).fill('a') }), 400).message,
      /at most 2048 items/,
    );
    t.equal((await embed({ model: LOCAL_MODEL, input: Array(2048).fill('a') })).statusCode, 200, '2048 items pass');
    // ' hello' is one token in cl100k_base: 8192 of them pass, 8193 do not.
    const tokens = (n: number) => ' hello'.repeat(n);
    t.equal((await embed({ model: LOCAL_MODEL, input: tokens(8192) })).json().metadata.usage.promptTokens, 8192);
    t.match(
      assertErrorBody(t, await embed({ model: LOCAL_MODEL, input: ['x', tokens(8193)] }), 400).message,
      /input\[1\] is longer than 8192 tokens/,
    );
    t.match(
      assertErrorBody(t, await embed({ model: LOCAL_MODEL, input: Array(37).fill(tokens(8192)) }), 400).message,
      /more than 300,000 tokens/,
    );
    // A long run without spaces is where BPE is quadratic; counting it must stay quick (the test
    // would time out otherwise) and still refuse it.
    t.match(
      assertErrorBody(t, await embed({ model: LOCAL_MODEL, input: 'a'.repeat(2_000_000) }), 400).message,
      /input is longer than 8192 tokens/,
    );
    // White space runs too (200,000 spaces took 23 s before they were sliced), and a run of 8
    // million characters (which overflowed the regexp that found runs: a 500).
    t.equal((await embed({ model: LOCAL_MODEL, input: ' '.repeat(200_000) })).statusCode, 200, '200,000 spaces');
    t.equal(
      (await embed({ model: LOCAL_MODEL, input: `a${'\n'.repeat(100_000)}b` })).statusCode,
      200,
      '100,000 newlines',
    );
    t.match(
      assertErrorBody(t, await embed({ model: LOCAL_MODEL, input: 'a'.repeat(8_000_000) }), 400).message,
      /input is longer than 8192 tokens/,
    );
    t.equal(
      (await embed({ model: LOCAL_MODEL, input: `${'é'.repeat(3000)} fine` })).statusCode,
      200,
      'a long run within the limit passes',
    );
    t.match(assertErrorBody(t, await embed({ model: LOCAL_MODEL, input: 42 }), 400).message, /string or array/);
    t.match(
      assertErrorBody(t, await embed({ model: LOCAL_MODEL, input: 'x', owner: 'me' }), 400).message,
      /body\.owner is not an accepted field/,
    );
    t.match(assertErrorBody(t, await embed({ model: LOCAL_MODEL, input: 'x', user: '' }), 400).message, /body\.user/);
    assertErrorBody(t, await embed({ input: 'x' }), 400, 'INVALID_INPUT');
    assertErrorBody(t, await embed({ model: LOCAL_MODEL, input: 'x', encoding_format: 'int8' }), 400, 'INVALID_INPUT');
  });

  t.test('bodies: up to 8 MiB here (the auth operations take 16 KiB), 413 beyond', async (t) => {
    const words = Array.from({ length: 40 }, () => ' hello'.repeat(7_000)); // 280,000 tokens, ~1.7 MB
    const big = await embed({ model: LOCAL_MODEL, input: words });
    t.equal(big.statusCode, 200, 'a 1.7 MB body is accepted');
    t.equal(big.json().metadata.usage.promptTokens, 280_000);
    const huge = await app.inject({
      method: 'POST',
      url: '/api/ai/embeddings',
      headers: { ...headers, 'content-type': 'application/json' },
      payload: JSON.stringify({ model: LOCAL_MODEL, input: 'x'.repeat(9 * 1024 * 1024) }),
    });
    assertErrorBody(t, huge, 413, 'PAYLOAD_TOO_LARGE');
  });

  t.test('a model outside local/ with no provider configured is 503', async (t) => {
    const { app: listed } = await buildTestApp(t, {
      env: { EMBEDDINGS_MODELS: `${LOCAL_MODEL},text-embedding-3-small` },
    });
    const res = await listed.inject({
      method: 'POST',
      url: '/api/ai/embeddings',
      headers: { authorization: `Bearer ${accessTokenFor(listed)}` },
      payload: { model: 'text-embedding-3-small', input: 'x' },
    });
    t.match(assertErrorBody(t, res, 503, 'SERVICE_UNAVAILABLE').message, /none is configured/);
  });

  t.test('special-token text is ordinary input', async (t) => {
    const res = await embed({ model: LOCAL_MODEL, input: 'end <|endoftext|> here' });
    t.equal(res.statusCode, 200);
    t.ok(res.json().metadata.usage.promptTokens > 3);
  });

  t.test('a token is required', async (t) => {
    const res = await app.inject({
      method: 'POST',
      url: '/api/ai/embeddings',
      payload: { model: LOCAL_MODEL, input: 'x' },
    });
    assertErrorBody(t, res, 401, 'UNAUTHORIZED');
  });

  t.test('successful calls are recorded for accounting', async (t) => {
    const token = accessTokenFor(app);
    const user = String(decodeClaims(token).sub);
    const res = await app.inject({
      method: 'POST',
      url: '/api/ai/embeddings',
      headers: { authorization: `Bearer ${token}` },
      payload: { model: LOCAL_MODEL, input: ['one two', 'three'] },
    });
    t.equal(res.statusCode, 200);
    const deadline = Date.now() + 5_000;
    let rows: { model: string; inputs: number; prompt_tokens: number; total_tokens: number }[] = [];
    while (rows.length === 0 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      rows = await database.handle.db
        .selectFrom('embedding_usage')
        .select(['model', 'inputs', 'prompt_tokens', 'total_tokens'])
        .where('user_id', '=', user)
        .execute();
    }
    t.same(rows, [{ model: LOCAL_MODEL, inputs: 2, prompt_tokens: 3, total_tokens: 3 }]);
  });
});

t.test('local model: unit vectors of any size, lexical neighbours', async (t) => {
  for (const size of [1, 7, 512, 1024]) {
    const v = localEmbedding('some text', size);
    t.equal(v.length, size);
    t.ok(Math.abs(cosine(v, v) - 1) < 1e-5, `size ${size} is unit length`);
  }
  const punctuation = localEmbedding('!!!', 16);
  t.ok(Math.abs(cosine(punctuation, punctuation) - 1) < 1e-5, 'punctuation-only input still has a direction');
  const typo = cosine(localEmbedding('password reset', 512), localEmbedding('pasword reset', 512));
  t.ok(typo > 0.5, `a typo stays close (${typo.toFixed(3)})`);
});
