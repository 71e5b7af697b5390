/**
 * GET /api/realtime/permissions (served from the in-memory policy cache) beside a bare Fastify
 * route measured in the same run.
 *
 *   npm run bench:realtime -- [--duration 10] [--connections 10] [--database postgres|pglite]
 *
 * With postgres (the default) the service uses DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test)
 * and keeps its LISTEN connection for policy changes; with pglite, an in-memory database.
 */
import os from 'node:os';
import { freePort, type RunningService, startService, waitFor200 } from '../scripts/lib/service-process.ts';
import { type LoadResult, resultTable, runLoad } from './lib/load.ts';
import { adminAccessToken, benchArgs, benchServiceEnv, ceilingTitle, startCeiling, stopAll } from './lib/setup.ts';

const args = benchArgs({ database: 'postgres' });
const { durationSeconds, connections } = args;
const database = args.options.database === 'pglite' ? 'pglite' : 'postgres';

const started: RunningService[] = [];
try {
  const port = await freePort();
  started.push(
    startService({
      DATABASE_URL:
        database === 'postgres' ? (process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test') : 'memory://',
      PORT: String(port),
      ...benchServiceEnv,
    }),
  );
  const base = `http://127.0.0.1:${port}`;
  await waitFor200(`${base}/api/health`, 60_000);
  const accessToken = await adminAccessToken(base);
  const ceilingUrl = await startCeiling(started);

  const results: LoadResult[] = [await runLoad({ title: ceilingTitle, url: ceilingUrl, connections, durationSeconds })];
  results.push(
    await runLoad({
      title: `GET /api/realtime/permissions (${database})`,
      url: `${base}/api/realtime/permissions`,
      headers: { authorization: `Bearer ${accessToken}` },
      connections,
      durationSeconds,
    }),
  );
  console.log(
    `\n${os.cpus().length} cores; Node ${process.version}; ${connections} connections, ${durationSeconds} s each\n`,
  );
  console.log(resultTable(results));
} finally {
  await stopAll(started);
}
