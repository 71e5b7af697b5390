import t, { type Test } from 'tap';
import { BREAKER_MIN_CALLS } from '../src/embeddings/upstream-breaker.ts';
import { buildTestApp } from './helpers/app.ts';
import { pause } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { type FakeUpstream, startFakeUpstream } from './helpers/fake-embeddings-upstream.ts';
import { accessTokenFor } from './helpers/tokens.ts';

const RESET_MS = 1_000;
const MODEL = 'text-embedding-3-small';

/** An app whose embeddings go to `fake`, with short retries and a 1 s breaker reset. */
async function appWith(t: Test, fake: FakeUpstream) {
  const { app } = await buildTestApp(t, {
    env: {
      EMBEDDINGS_BASE_URL: fake.baseUrl,
      EMBEDDINGS_RETRY_BASE_MS: '5',
      EMBEDDINGS_TIMEOUT_MS: '400',
      EMBEDDINGS_BREAKER_RESET_MS: String(RESET_MS),
      EMBEDDINGS_RATE_LIMIT: '100000',
    },
  });
  const token = accessTokenFor(app);
  const embed = () =>
    app.inject({
      method: 'POST',
      url: '/api/ai/embeddings',
      headers: { authorization: `Bearer ${token}` },
      payload: { model: MODEL, input: 'hello' },
    });
  return { app, embed };
}

t.test('a dead upstream opens the circuit: calls are refused at once with 503, then a trial closes it', async (t) => {
  let fake = await startFakeUpstream();
  const port = Number(new URL(fake.baseUrl).port);
  t.teardown(() => fake.close());
  const { embed } = await appWith(t, fake);

  t.equal((await embed()).statusCode, 200, 'the upstream works at first');
  await fake.close();

  // One success and four failures in the window: 80% failed over five calls, so it opens.
  for (let i = 0; i < BREAKER_MIN_CALLS - 1; i++) assertErrorBody(t, await embed(), 502, 'PROVIDER_UNAVAILABLE');
  // Open: the next calls fail without touching the network, with a Retry-After until the trial.
  fake = await startFakeUpstream(port);
  for (let i = 0; i < 20; i++) {
    const res = await embed();
    assertErrorBody(t, res, 503, 'SERVICE_UNAVAILABLE');
    const retryAfter = Number(res.headers['retry-after']);
    t.ok(retryAfter >= 1 && retryAfter <= RESET_MS / 1000, `Retry-After ${retryAfter} s is within the reset time`);
  }
  t.equal(fake.requests.length, 0, 'nothing reached the upstream while the circuit was open');

  await pause(RESET_MS + 100);
  const trial = await embed();
  t.equal(trial.statusCode, 200, 'after the reset time one trial call goes through and succeeds');
  t.equal(fake.requests.length, 1, 'the trial reached the upstream');
  for (let i = 0; i < 5; i++) t.equal((await embed()).statusCode, 200, 'closed again: calls flow');
  t.equal(fake.requests.length, 6);
});

t.test('a failed trial opens the circuit again', async (t) => {
  const fake = await startFakeUpstream();
  t.teardown(() => fake.close());
  const { embed } = await appWith(t, fake);
  const failing = { status: 503 };
  // Each call tries three times (two retries).
  fake.enqueue(...Array.from({ length: BREAKER_MIN_CALLS * 3 }, () => failing));
  for (let i = 0; i < BREAKER_MIN_CALLS; i++) assertErrorBody(t, await embed(), 502, 'PROVIDER_UNAVAILABLE');
  assertErrorBody(t, await embed(), 503, 'SERVICE_UNAVAILABLE');

  await pause(RESET_MS + 100);
  fake.reset();
  fake.enqueue(failing, failing, failing);
  assertErrorBody(t, await embed(), 502, 'PROVIDER_UNAVAILABLE'); // the trial call fails
  t.equal(fake.requests.length, 3, 'only the trial reached the upstream');
  const refused = await embed();
  assertErrorBody(t, refused, 503, 'SERVICE_UNAVAILABLE'); // open again at once
  t.equal(fake.requests.length, 3);
});

t.test('refusals of the request itself (4xx) and rate limits do not open the circuit', async (t) => {
  const fake = await startFakeUpstream();
  t.teardown(() => fake.close());
  const { embed } = await appWith(t, fake);
  const n = BREAKER_MIN_CALLS * 2;
  fake.enqueue(...Array.from({ length: n }, () => ({ status: 400 })));
  for (let i = 0; i < n; i++) assertErrorBody(t, await embed(), 400, 'INVALID_INPUT');
  fake.enqueue(...Array.from({ length: n }, () => ({ status: 429, headers: { 'retry-after': '120' } })));
  for (let i = 0; i < n; i++) assertErrorBody(t, await embed(), 429, 'RATE_LIMITED');
  t.equal((await embed()).statusCode, 200, 'the circuit stayed closed');
});
