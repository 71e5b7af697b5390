/**
 * POST /api/ai/embeddings: the service's added cost in front of an OpenAI-compatible upstream,
 * and the throughput of the in-process local model. Measured in one run, beside a bare Fastify
 * route (the ceiling):
 *   - the loopback fake upstream called directly (1 input, 1536-dimension float vectors);
 *   - the same request through the service (float, then base64);
 *   - the local model with a 1,000-token input.
 *
 *   npm run bench:embeddings -- [--duration 10] [--connections 10]
 *
 * The service runs on an in-memory database (usage rows are written in batches, off the path).
 */
import os from 'node:os';
import { countTokens } from 'gpt-tokenizer/encoding/cl100k_base';
import { freePort, type RunningService, startService, waitFor200 } from '../scripts/lib/service-process.ts';
import { type LoadResult, resultTable, runLoad } from './lib/load.ts';
import { adminAccessToken, benchArgs, benchServiceEnv, ceilingTitle, startCeiling, stopAll } from './lib/setup.ts';

const { durationSeconds, connections } = benchArgs();

/** A text of exactly `tokens` cl100k tokens, made of ordinary English words. */
function textOf(tokens: number): string {
  const words = 'the service computes vectors for every text it receives and returns them in order'.split(' ');
  let text = '';
  for (let i = 0; countTokens(text) < tokens; i++) text += `${i === 0 ? '' : ' '}${words[i % words.length]}`;
  while (countTokens(text) > tokens) text = text.slice(0, text.lastIndexOf(' '));
  return text;
}

/** Waits for the fake upstream to answer a POST. */
async function untilUp(url: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const ok = await fetch(url, { method: 'POST', body: JSON.stringify({ model: 'm', input: 'x' }) }).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`${url} did not come up`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const started: RunningService[] = [];
try {
  const upstreamPort = await freePort();
  started.push(startService({ PORT: String(upstreamPort) }, 'bench/fake-upstream-server.ts'));
  const upstream = `http://127.0.0.1:${upstreamPort}/v1`;
  await untilUp(`${upstream}/embeddings`);

  const port = await freePort();
  started.push(
    startService({
      DATABASE_URL: 'memory://',
      PORT: String(port),
      ...benchServiceEnv,
      EMBEDDINGS_BASE_URL: upstream,
      EMBEDDINGS_API_KEY: 'bench-upstream-key',
      EMBEDDINGS_RATE_LIMIT: '1000000000',
    }),
  );
  const base = `http://127.0.0.1:${port}`;
  await waitFor200(`${base}/api/health`, 60_000);
  const accessToken = await adminAccessToken(base);
  const ceilingUrl = await startCeiling(started);

  const json = { 'content-type': 'application/json' };
  const auth = { ...json, authorization: `Bearer ${accessToken}` };
  const upstreamBody = (format: string) =>
    JSON.stringify({
      model: 'text-embedding-3-small',
      input: 'The quick brown fox jumps over the lazy dog',
      dimensions: 1536,
      encoding_format: format,
    });
  const thousand = textOf(1000);
  const results: LoadResult[] = [await runLoad({ title: ceilingTitle, url: ceilingUrl, connections, durationSeconds })];
  const post = (title: string, url: string, headers: Record<string, string>, body: string) =>
    runLoad({ title, url, method: 'POST', headers, body, connections, durationSeconds });
  results.push(
    await post(
      'fake upstream, called directly (float, 1536 dims)',
      `${upstream}/embeddings`,
      json,
      upstreamBody('float'),
    ),
  );
  results.push(
    await post('through the service (float, 1536 dims)', `${base}/api/ai/embeddings`, auth, upstreamBody('float')),
  );
  results.push(
    await post('through the service (base64, 1536 dims)', `${base}/api/ai/embeddings`, auth, upstreamBody('base64')),
  );
  results.push(
    await post(
      `local/lexical-v1, ${countTokens(thousand)}-token input (float, 512 dims)`,
      `${base}/api/ai/embeddings`,
      auth,
      JSON.stringify({ model: 'local/lexical-v1', input: thousand }),
    ),
  );
  console.log(
    `\n${os.cpus().length} cores; Node ${process.version}; ${connections} connections, ${durationSeconds} s each\n`,
  );
  console.log(resultTable(results));
} finally {
  await stopAll(started);
}
