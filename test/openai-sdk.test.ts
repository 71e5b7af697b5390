/**
 * Acceptance by OpenAI's official client (the `openai` npm package, unchanged): pointed at the
 * service's `/api/ai` with an access token as its API key, `client.embeddings.create` gets float
 * vectors, its default base64 (decoded by the client), shortened vectors, batches, `usage` and
 * `model`, and errors as its own classes (status and code; the Error schema's `message` stays in the
 * body, where OpenAI's clients do not look). Over real HTTP on loopback; every answer is also checked
 * against openapi.yaml (the test app's contract check). The end user's id (`user`) is recorded with
 * the usage and reaches the provider only when EMBEDDINGS_FORWARD_USER is set.
 */
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import t, { type Test } from 'tap';
import { LOCAL_MODEL_DIMENSIONS } from '../src/embeddings/models.ts';
import { buildAccountsApp } from './helpers/accounts.ts';
import { FAKE_NATIVE_DIMENSIONS, type FakeUpstream, startFakeUpstream } from './helpers/fake-embeddings-upstream.ts';

const LOCAL = 'local/lexical-v1';
const UPSTREAM = 'text-embedding-3-small';

const fake = await startFakeUpstream();
t.teardown(() => fake.close());

/** A listening app with an upstream, a signed-up user, and an OpenAI client for that user. */
async function setup(t: Test, env: Record<string, string> = {}) {
  const built = await buildAccountsApp(t, {
    label: 'openai-sdk',
    env: { EMBEDDINGS_BASE_URL: fake.baseUrl, EMBEDDINGS_API_KEY: 'sk-openai-sdk-test', ...env },
  });
  await built.app.listen({ port: 0, host: '127.0.0.1' });
  const port = (built.app.server.address() as AddressInfo).port;
  const user = await built.signUp();
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/api/ai`, apiKey: user.accessToken, maxRetries: 0 });
  return { ...built, user, client, port };
}

/** The usage rows of a user, once the recorder has written them (it flushes every second). */
async function usageRows(db: Awaited<ReturnType<typeof setup>>['database']['handle']['db'], userId: string, n: number) {
  const deadline = Date.now() + 5_000;
  for (;;) {
    const rows = await db
      .selectFrom('embedding_usage')
      .select(['model', 'inputs', 'prompt_tokens', 'total_tokens', 'end_user'])
      .where('user_id', '=', userId)
      .orderBy('id')
      .execute();
    if (rows.length >= n || Date.now() > deadline) return rows;
    await new Promise((r) => setTimeout(r, 100));
  }
}

const close = (a: readonly number[], b: readonly number[]) =>
  a.length === b.length && a.every((x, i) => Math.abs(x - (b[i] as number)) < 1e-6);

t.test('embeddings.create: float, default base64, dimensions, arrays, usage and model', async (t) => {
  const { client } = await setup(t);

  const float = await client.embeddings.create({
    model: LOCAL,
    input: 'the quick brown fox',
    encoding_format: 'float',
  });
  t.equal(float.object, 'list');
  t.equal(float.model, LOCAL, 'model at the top level');
  t.equal(float.data.length, 1);
  t.equal(float.data[0]?.object, 'embedding');
  t.equal(float.data[0]?.index, 0);
  const vector = float.data[0]?.embedding as number[];
  t.equal(vector.length, LOCAL_MODEL_DIMENSIONS, 'the model size');
  t.ok(
    vector.every((x) => typeof x === 'number'),
    'numbers',
  );
  t.equal(float.usage.prompt_tokens, 4, 'usage.prompt_tokens');
  t.equal(float.usage.total_tokens, 4, 'usage.total_tokens: r.usage.total_tokens works');

  // Without encoding_format the client asks for base64 and decodes it into numbers itself.
  const fake64 = await client.embeddings.create({ model: LOCAL, input: 'the quick brown fox' });
  t.ok(
    close(fake64.data[0]?.embedding as number[], vector),
    "the client's default (base64) decodes to the same vector",
  );

  const short = await client.embeddings.create({ model: LOCAL, input: 'the quick brown fox', dimensions: 16 });
  t.equal(short.data[0]?.embedding.length, 16, 'dimensions shortens');
  const full = await client.embeddings.create({ model: LOCAL, input: 'the quick brown fox', dimensions: 0 });
  t.ok(close(full.data[0]?.embedding as number[], vector), "dimensions 0: the model's own size");

  const batch = await client.embeddings.create({ model: LOCAL, input: ['one', 'two words', 'and three words'] });
  t.same(
    batch.data.map((d) => d.index),
    [0, 1, 2],
    'one item per input, in order',
  );
  t.same(
    batch.data.map((d) => d.embedding.length),
    [LOCAL_MODEL_DIMENSIONS, LOCAL_MODEL_DIMENSIONS, LOCAL_MODEL_DIMENSIONS],
  );
  t.equal(batch.usage.total_tokens, 6, 'usage counts every input');

  const upstream = await client.embeddings.create({ model: UPSTREAM, input: ['alpha', 'beta'], dimensions: 4 });
  t.equal(upstream.model, UPSTREAM);
  t.same(
    upstream.data.map((d) => d.embedding.length),
    [4, 4],
    'an upstream model, shortened',
  );
  t.ok(upstream.usage.prompt_tokens > 0, "the provider's usage");
  const native = await client.embeddings.create({ model: UPSTREAM, input: 'alpha', encoding_format: 'float' });
  t.equal(native.data[0]?.embedding.length, FAKE_NATIVE_DIMENSIONS);
});

t.test('errors reach the client as its own error classes, with the status and message', async (t) => {
  const { client, port } = await setup(t, { EMBEDDINGS_MODELS: `${LOCAL},${UPSTREAM}` });

  const refused = await client.embeddings.create({ model: 'no-such-model', input: 'x' }).catch((e: unknown) => e);
  t.type(refused, OpenAI.BadRequestError, '400 is a BadRequestError');
  const bad = refused as InstanceType<typeof OpenAI.BadRequestError>;
  t.equal(bad.status, 400);
  // The client keeps the body's `error` (OpenAI nests an object there; the Error schema has the code).
  t.equal(bad.error, 'MODEL_NOT_ALLOWED', 'the stable error code, as the client keeps it');
  t.equal(bad.message, '400 "MODEL_NOT_ALLOWED"', 'and its message: the status and the code');

  const empty = await client.embeddings.create({ model: LOCAL, input: '' }).catch((e: unknown) => e);
  t.type(empty, OpenAI.BadRequestError, 'an empty input: 400');

  const stranger = new OpenAI({ baseURL: `http://127.0.0.1:${port}/api/ai`, apiKey: 'not-a-token', maxRetries: 0 });
  const denied = await stranger.embeddings.create({ model: LOCAL, input: 'x' }).catch((e: unknown) => e);
  t.type(denied, OpenAI.AuthenticationError, 'a bad key (access token): 401 AuthenticationError');
});

/** The `user` field of the last request the provider received, if any. */
const lastUpstreamUser = (f: FakeUpstream) => (f.requests.at(-1)?.body as { user?: unknown } | undefined)?.user;

t.test('user: recorded with the usage; sent to the provider only with EMBEDDINGS_FORWARD_USER', async (t) => {
  await t.test('default: kept here', async (t) => {
    const { client, user, database } = await setup(t);
    fake.reset();
    await client.embeddings.create({ model: LOCAL, input: 'hello', user: 'end-user-42' });
    await client.embeddings.create({ model: UPSTREAM, input: 'hello', user: 'end-user-43' });
    await client.embeddings.create({ model: LOCAL, input: 'hello' });
    t.equal(lastUpstreamUser(fake), undefined, 'the provider never sees it');
    const rows = await usageRows(database.handle.db, user.userId, 3);
    t.same(
      rows.map((r) => r.end_user),
      ['end-user-42', 'end-user-43', null],
      'recorded with each call',
    );
  });

  await t.test('EMBEDDINGS_FORWARD_USER=true: sent on as a pseudonym of the account and the value', async (t) => {
    const { client, signUp, port } = await setup(t, { EMBEDDINGS_FORWARD_USER: 'true' });
    fake.reset();
    await client.embeddings.create({ model: UPSTREAM, input: 'hello', user: 'end-user-44' });
    const sent = lastUpstreamUser(fake);
    t.match(sent, /^[0-9a-f]{32}$/, 'a pseudonym, not the text');
    await client.embeddings.create({ model: UPSTREAM, input: 'again', user: 'end-user-44' });
    t.equal(lastUpstreamUser(fake), sent, 'stable for the same end user');
    await client.embeddings.create({ model: UPSTREAM, input: 'again', user: 'end-user-45' });
    t.not(lastUpstreamUser(fake), sent, 'another end user, another pseudonym');
    const other = await signUp();
    const otherClient = new OpenAI({
      baseURL: `http://127.0.0.1:${port}/api/ai`,
      apiKey: other.accessToken,
      maxRetries: 0,
    });
    await otherClient.embeddings.create({ model: UPSTREAM, input: 'hello', user: 'end-user-44' });
    t.not(lastUpstreamUser(fake), sent, "another account cannot pass for this one's end user");
  });

  await t.test('the schema bounds it', async (t) => {
    const { client } = await setup(t);
    const long = await client.embeddings
      .create({ model: LOCAL, input: 'x', user: 'u'.repeat(257) })
      .catch((e: unknown) => e);
    t.type(long, OpenAI.BadRequestError, 'more than 256 characters: 400');
  });
});
