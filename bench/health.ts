/**
 * GET /api/health beside a bare Fastify route (the ceiling), measured in one run, plus start-up time
 * on an empty and an existing DATA_DIR and idle resident memory.
 *
 *   npm run bench:health -- [--duration 10] [--connections 10] [--database pglite|postgres]
 *
 * With --database postgres the service uses DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  freePort,
  type RunningService,
  residentMiB,
  startService,
  waitFor200,
} from '../scripts/lib/service-process.ts';
import { type LoadResult, resultTable, runLoad } from './lib/load.ts';
import { benchArgs, ceilingTitle, startCeiling, stopAll } from './lib/setup.ts';

const args = benchArgs({ database: 'pglite' });
const { durationSeconds, connections } = args;
const database = args.options.database === 'postgres' ? 'postgres' : 'pglite';

const dataDir = mkdtempSync(path.join(os.tmpdir(), 'bench-health-'));
const env: Record<string, string> = {
  DATA_DIR: dataDir,
  LOG_LEVEL: 'warn',
  NODE_ENV: 'production',
  JWT_SECRET: 'b'.repeat(48),
  SMTP_URL: 'smtp://127.0.0.1:9', // never used here
};
if (database === 'postgres') env.DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

const started: RunningService[] = [];
try {
  // Start-up: empty DATA_DIR, then the same directory again.
  const port = await freePort();
  const first = startService({ ...env, PORT: String(port) });
  started.push(first);
  const emptyMs = await waitFor200(`http://127.0.0.1:${port}/api/health`, 60_000);
  first.child.kill('SIGTERM');
  await first.exited;
  const service = startService({ ...env, PORT: String(port) });
  started.push(service);
  const existingMs = await waitFor200(`http://127.0.0.1:${port}/api/health`, 60_000);
  await new Promise((r) => setTimeout(r, 2000));
  const idleMiB = residentMiB(service.child.pid as number);

  const ceilingUrl = await startCeiling(started);

  const results: LoadResult[] = [];
  results.push(
    await runLoad({
      title: ceilingTitle,
      url: ceilingUrl,
      connections,
      durationSeconds,
    }),
  );
  results.push(
    await runLoad({
      title: 'GET /api/health',
      url: `http://127.0.0.1:${port}/api/health`,
      connections,
      durationSeconds,
    }),
  );

  console.log(
    `\nDatabase: ${database}; ${os.cpus().length} cores; Node ${process.version}; ${connections} connections, ${durationSeconds} s each\n`,
  );
  console.log(resultTable(results));
  console.log(`\nstart to first 200: empty DATA_DIR ${emptyMs} ms, existing DATA_DIR ${existingMs} ms`);
  console.log(`idle resident memory: ${idleMiB.toFixed(0)} MiB`);
} finally {
  await stopAll(started); // before removing the data directory they hold
  rmSync(dataDir, { recursive: true, force: true });
}
