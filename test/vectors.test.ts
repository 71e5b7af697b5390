import t from 'tap';
import type { EmbeddingsResult } from '../src/embeddings/embeddings-service.ts';
import { embeddingsResponseJson } from '../src/embeddings/response-json.ts';
import { base64ToFloat32, float32ToBase64, type Vector } from '../src/embeddings/vectors.ts';
import { assertMatchesSchema } from './helpers/spec-schema.ts';

const significantDigits = (x: number) => x.toExponential().replace(/^-|e.*$|\./g, '').length;
const metadata = { model: 'model "quoted" é', usage: { promptTokens: 3, completionTokens: 0, totalTokens: 3 } };
const written = (vectors: Vector[], encoding: 'float' | 'base64' = 'float') =>
  JSON.parse(embeddingsResponseJson({ encoding, vectors, metadata } satisfies EmbeddingsResult).toString('utf8'));

t.test('float32 vectors: every value reads back as the same float32, in at most 9 significant digits', async (t) => {
  // Random bit patterns cover every exponent, subnormals included; the rest are typical embedding values.
  const bits = new Uint32Array(200_000);
  for (let i = 0; i < bits.length; i++) bits[i] = (Math.random() * 2 ** 32) >>> 0;
  const finite = new Float32Array(bits.buffer).filter(Number.isFinite);
  const typical = Float32Array.from({ length: 100_000 }, () => (Math.random() - 0.5) * 0.2);
  for (const [name, values] of [
    ['random bit patterns', finite],
    ['typical values', typical],
  ] as const) {
    const got: number[] = written([values]).data[0].embedding;
    t.equal(got.length, values.length, name);
    t.equal(got.filter((x, i) => !Object.is(Math.fround(x), values[i])).length, 0, `${name}: none changes`);
    t.equal(got.filter((x) => significantDigits(x) > 9).length, 0, `${name}: none needs more than 9 digits`);
  }
  t.strictSame(
    written([Float32Array.from([0.1, 0.5, -2, 0, -0, 123456.789, 3.4e38, 1e-45, 1e-7, 1000, 1e9])]).data[0].embedding,
    [0.100000001, 0.5, -2, 0, 0, 123456.789, 3.39999995e38, 1.40129846e-45, 1.00000001e-7, 1000, 1e9],
  );
});

t.test('the longest numbers fit: answers sized for the worst case, not the average', async (t) => {
  // Both need 25 characters and a comma: -0.0000000000000123456791 and -0.0000012345678901234567.
  const tiny = Float32Array.from({ length: 5000 }, () => Math.fround(-1.23456791e-14));
  const got: number[] = written([tiny, tiny]).data[1].embedding;
  t.equal(got.length, 5000);
  t.ok(got.every((x) => Math.fround(x) === tiny[0]));
  const long = Array.from({ length: 5000 }, () => -1.2345678901234567e-6);
  t.strictSame(written([long]).data[0].embedding, long);
});

t.test('plain numbers (an upstream that sent floats) are written exactly', async (t) => {
  const values = [0.1, -0.30000000000000004, 5e-324, 1.7976931348623157e308, 123456789, 1234567890, 1e21, -0, 42];
  const random = Array.from({ length: 20_000 }, () => (Math.random() - 0.5) * 10 ** (Math.random() * 20 - 10));
  t.strictSame(written([values]).data[0].embedding, [...values.slice(0, 7), 0, 42]);
  t.strictSame(written([random]).data[0].embedding, random);
});

t.test('the whole answer: order, indexes, base64, model, usage, metadata; it matches the schema', async (t) => {
  const a = Float32Array.from([0.5, -1.25]);
  const b = Float32Array.from([3, 0.25]);
  const floats = written([a, b]);
  assertMatchesSchema(t, floats, 'EmbeddingsResponse');
  t.strictSame(floats, {
    object: 'list',
    data: [
      { object: 'embedding', embedding: [0.5, -1.25], index: 0 },
      { object: 'embedding', embedding: [3, 0.25], index: 1 },
    ],
    model: metadata.model,
    usage: { prompt_tokens: 3, total_tokens: 3 },
    metadata,
  });
  t.strictSame(
    Object.keys(floats),
    ['object', 'data', 'model', 'usage', 'metadata'],
    "InsForge's fields, OpenAI's between",
  );
  const base64 = written([a, b], 'base64');
  assertMatchesSchema(t, base64, 'EmbeddingsResponse');
  t.strictSame([...(base64ToFloat32(base64.data[1].embedding) as Float32Array)], [3, 0.25]);
  t.strictSame(base64.metadata, metadata);
});

t.test('base64 round trip of float32 values', async (t) => {
  const values = Float32Array.from([0.5, -1.25, 3.4e38, -1e-45, 0]);
  const encoded = float32ToBase64(values);
  t.equal(Buffer.from(encoded, 'base64').length, 20);
  t.strictSame([...(base64ToFloat32(encoded) as Float32Array)], [...values]);
  t.equal(base64ToFloat32(''), undefined, 'empty');
  t.equal(base64ToFloat32('AAAAAAA='), undefined, 'not a whole number of float32 values (5 bytes)');
  const decoded = base64ToFloat32(float32ToBase64([1, 2, 3])) as Float32Array;
  t.equal(decoded.byteOffset, 0, 'a buffer of its own, not a view into a shared pool');
  t.equal(decoded.buffer.byteLength, 12);
});
