/**
 * The cost of the assurance-level check (x-aal, requireAssurance in src/operation-rules.ts) that every
 * operation with a Bearer token runs: two alike routes in one process of their own
 * (bench/assurance-server.ts), one with the check and one without (the ceiling), loaded in turns
 * so that both see the same machine. Reports the ratio of their rates and the added time per request.
 *
 *   npm run bench:assurance                        # 5 rounds of 3 s per route, 10 connections
 *   npm run bench:assurance -- --rounds 3 --duration 2
 *
 * Writes bench/results/assurance-check.{md,json}.
 */

import { randomUUID } from 'node:crypto';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { operations } from '../generated/contract.ts';
import { freePort, type RunningService, startService, waitFor200 } from '../scripts/lib/service-process.ts';
import { requireAssurance } from '../src/operation-rules.ts';
import { runLoad } from './lib/load.ts';
import { writeResults } from './lib/report.ts';
import { stopAll } from './lib/setup.ts';

const { values } = parseArgs({
  options: { rounds: { type: 'string', default: '5' }, duration: { type: 'string', default: '3' } },
});
const rounds = Number(values.rounds);
const durationSeconds = Number(values.duration);
if (!(Number.isSafeInteger(rounds) && rounds > 0 && Number.isSafeInteger(durationSeconds) && durationSeconds > 0)) {
  console.error('usage: npm run bench:assurance -- [--rounds 5] [--duration 3]');
  process.exit(1);
}

const median = (xs: number[]) => {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
};

/** The check alone, called in this process: nanoseconds per call (the best of 5 runs of a million calls). */
function nanosecondsPerCheck(): number {
  const check = requireAssurance(operations.getRealtimePermissions, {
    mfa: { issuer: 'x', requiredForAdmins: false },
  }) as unknown as (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) => void;
  const request = {
    user: { sub: randomUUID(), sid: randomUUID(), role: 'user', aal: 'aal2', amr: [] },
  } as unknown as FastifyRequest;
  let failures = 0;
  const done = (err?: Error) => {
    if (err) failures++;
  };
  let best = Number.POSITIVE_INFINITY;
  for (let run = 0; run < 5; run++) {
    const start = performance.now();
    for (let i = 0; i < 1_000_000; i++) check(request, {} as FastifyReply, done);
    best = Math.min(best, ((performance.now() - start) * 1e6) / 1_000_000);
  }
  if (failures > 0) throw new Error('the check refused an aal2 caller');
  return best;
}

const perCheckNs = nanosecondsPerCheck();
const started: RunningService[] = [];
try {
  const port = await freePort();
  started.push(startService({ PORT: String(port) }, 'bench/assurance-server.ts'));
  const base = `http://127.0.0.1:${port}`;
  await waitFor200(`${base}/without`, 30_000);
  const rates: Record<'without' | 'with', number[]> = { without: [], with: [] };
  for (let round = 1; round <= rounds; round++) {
    for (const route of ['without', 'with'] as const) {
      process.stderr.write(`round ${round}/${rounds}: /${route} (${durationSeconds} s)\n`);
      const result = await runLoad({ title: route, url: `${base}/${route}`, connections: 10, durationSeconds });
      if (result.errors > 0) throw new Error(`/${route}: ${result.errors} errors`);
      rates[route].push(result.requestsPerSecond);
    }
  }
  const without = median(rates.without);
  const withCheck = median(rates.with);
  const ratio = withCheck / without;
  const addedMicroseconds = (1 / withCheck - 1 / without) * 1e6;
  const md = [
    '# The assurance-level check per request',
    '',
    `${new Date().toISOString()}, ${os.cpus().length} cores (${os.cpus()[0]?.model ?? 'unknown'}), Node ${process.version};`,
    `${rounds} rounds of ${durationSeconds} s per route, 10 connections, medians.`,
    '',
    '| route | req/s (median) | rounds |',
    '|---|---:|---|',
    `| without the check (ceiling) | ${Math.round(without).toLocaleString('en-US')} | ${rates.without.map((r) => Math.round(r)).join(', ')} |`,
    `| with the check | ${Math.round(withCheck).toLocaleString('en-US')} | ${rates.with.map((r) => Math.round(r)).join(', ')} |`,
    '',
    `Ratio ${ratio.toFixed(3)}; added time per request ${addedMicroseconds.toFixed(2)} µs (negative: within the noise).`,
    `The check alone: ${perCheckNs.toFixed(1)} ns per call (the best of 5 runs of a million calls, in this process).`,
    '',
  ].join('\n');
  const written = writeResults('assurance-check', md, {
    date: new Date().toISOString(),
    rounds,
    durationSeconds,
    rates,
    ratio,
    addedMicroseconds,
  });
  console.log(md);
  console.log(`Written: ${written.join(', ')}`);
} finally {
  await stopAll(started);
}
