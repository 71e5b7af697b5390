/**
 * The soak: mixed, realistic traffic against the service (run as `npm start` runs it) for a long
 * time, reporting errors (none expected: any status a request should not get counts), latency per
 * window and the service's resident memory every second; fails when memory keeps growing after the
 * warm-up.
 *
 *   npm run bench:soak                               # PostgreSQL, 1,000,000 users, 10 minutes, 10 s windows
 *   npm run bench:soak -- --quick                    # 20,000 users, 1 minute, 5 s windows
 *   npm run bench:soak -- --database pglite          # the embedded database
 *   npm run bench:soak -- --duration 1800 --connections 20 --window 30
 *
 * The service runs from its build with a fake OpenAI-compatible upstream in a process of its own,
 * as in `npm run bench` (same databases: see bench/run.ts). Its per-IP rate limits are raised out of
 * the way: every request comes from 127.0.0.1, where real traffic comes from many addresses. A
 * probe loaded with NODE_OPTIONS=--import (bench/lib/soak-stats.ts) reports its V8 heap each second.
 * Writes bench/results/soak-<database>[-quick].{md,json}; exits 1 on any error or growing memory.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import autocannon from 'autocannon';
import { type RunningService, residentMiB } from '../scripts/lib/service-process.ts';
import { parseBenchOptions } from './lib/options.ts';
import { prepareDatabase } from './lib/prepare.ts';
import {
  kindTable,
  memoryTable,
  problems,
  type SoakReport,
  soakHeader,
  windowLine,
  windowTable,
  writeSoakReport,
} from './lib/report.ts';
import { adminAccessToken, startBenchService, stopAll } from './lib/setup.ts';
import {
  heapProbeEnv,
  judgeMemory,
  type MemorySample,
  type MemoryThresholds,
  readHeapProbe,
  SoakRecorder,
} from './lib/soak-stats.ts';
import { kindTitles, soakTraffic, VERIFICATIONS_PER_SECOND } from './lib/soak-traffic.ts';

const usage =
  'usage: npm run bench:soak -- [--quick] [--database postgres|pglite] [--users N] [--duration S] [--window S] [--connections C]\n' +
  '(the duration must hold at least four windows)';
const { quick, kind, users, durationSeconds, connections, extra } = parseBenchOptions(usage, { quick: 60, full: 600 }, [
  'window',
]);
const windowSeconds = Number(extra.window ?? (quick ? 5 : 10));
if (!(Number.isSafeInteger(windowSeconds) && windowSeconds > 0) || durationSeconds < 4 * windowSeconds) {
  console.error(usage);
  process.exit(1);
}
const wallStart = Date.now();
const progress = (text: string) => process.stderr.write(`${text}\n`);
const round = (x: number) => Math.round(x * 10) / 10;

/**
 * Memory keeps growing when, after the warm-up (the first 20%: connections, JIT, V8's heap sizing,
 * the caches filling), a figure's least-squares slope AND the rise of its last quarter's mean over
 * its first quarter's are both above their thresholds (see judgeMemory). Two figures are judged:
 *
 * - RSS, as the operating system sees it. Under steady load it follows V8's collector: garbage is
 *   allowed to pile up to several times the live heap before a full collection returns it, so RSS
 *   saws between about 180 and 450 MiB here with a live heap of 58 MiB, and 2-minute means of a
 *   healthy 10-minute run ranged from 198 to 330 MiB. Hence, for runs judging 5 minutes or more,
 *   10 MiB/min and 128 MiB: the quarters' centres are 6 minutes apart, so RSS rising by about
 *   20 MiB a minute or more fails. A short run (--quick judges 48 s, quarters of 12 s) may see no
 *   full collection at all (RSS then climbs by ~100 MiB of uncollected garbage in a minute), so it
 *   allows 150 MiB/min and 160 MiB: it catches runaways only and proves the soak works in CI.
 * - The live heap (heap in use right after each full collection, from the probe), the figure a
 *   JavaScript leak moves without GC noise: steady within ±3 MiB here once the caches are full. The
 *   largest bounded cache, the verified access tokens (10,000), is about 12 MiB, so 16 MiB and
 *   2 MiB/min cannot be reached by a cache filling. Judged only with 3 or more full collections in
 *   each of the first and last quarters (a full run has about 10; a quick one usually none).
 */
const judgedMinutes = (durationSeconds * 0.8) / 60;
const thresholds: MemoryThresholds = {
  warmUpShare: 0.2,
  ...(judgedMinutes >= 5 ? { slopeMiBPerMinute: 10, growthMiB: 128 } : { slopeMiBPerMinute: 150, growthMiB: 160 }),
  liveHeapSlopeMiBPerMinute: 2,
  liveHeapGrowthMiB: 16,
  liveHeapMinFullGcs: 2,
};
/** Prepared sign-ups kept for wrong codes (never verified). */
const WRONG_CODE_ACCOUNTS = 100;

progress(`preparing the ${kind} database`);
const prepared = await prepareDatabase({
  kind,
  serverUrl: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres',
  users,
  signUps: Math.ceil((durationSeconds + 5) * VERIFICATIONS_PER_SECOND) + WRONG_CODE_ACCOUNTS,
});

const started: RunningService[] = [];
const probeDir = mkdtempSync(path.join(os.tmpdir(), 'soak-heap-'));
const probeFile = path.join(probeDir, 'heap.json');
const timers: NodeJS.Timeout[] = [];
try {
  const bench = await startBenchService(started, { ...prepared.env, ...heapProbeEnv(probeFile) });
  const { service, pid, base } = bench;
  let adminToken = bench.adminToken;
  const traffic = soakTraffic({
    connections,
    signUps: prepared.signUps,
    wrongCodeAccounts: WRONG_CODE_ACCOUNTS,
    adminToken: () => adminToken,
  });
  await traffic.seed(base);
  await new Promise((r) => setTimeout(r, 1000));
  const idleBeforeMiB = residentMiB(pid);
  const loadAverageBefore = os.loadavg()[0] ?? 0;

  const recorder = new SoakRecorder(windowSeconds, durationSeconds);
  progress(
    `soak: ${durationSeconds} s of mixed traffic, ${connections} connections, ${traffic.requests.length} requests per loop; resident memory ${Math.round(idleBeforeMiB)} MiB before`,
  );
  const loadStart = Date.now();
  const elapsed = () => (Date.now() - loadStart) / 1000;
  traffic.start();
  let instance!: autocannon.Instance;
  const done = new Promise<autocannon.Result>((resolve, reject) => {
    instance = autocannon(
      {
        url: base,
        connections,
        duration: durationSeconds,
        timeout: 10,
        requests: traffic.requests,
      },
      (err, result) => (err ? reject(err) : resolve(result)),
    );
  });
  instance.on('response', (_client, _status, _bytes, latencyMs) => {
    const outcome = traffic.takeOutcome();
    if (outcome === undefined) recorder.transportError(elapsed(), 'an answer that no request claimed');
    else recorder.answer(elapsed(), outcome.kind, outcome.status, outcome.ok, latencyMs, outcome.body);
  });
  instance.on('reqError', (err: Error) => recorder.transportError(elapsed(), err.message));

  let peakMiB = idleBeforeMiB;
  let fullGcsSeen = readHeapProbe(probeFile)?.fullGcs ?? 0;
  timers.push(
    setInterval(() => {
      let rssMiB: number;
      try {
        rssMiB = residentMiB(pid);
      } catch {
        return; // the service has gone: the requests' errors say so
      }
      peakMiB = Math.max(peakMiB, rssMiB);
      const heap = readHeapProbe(probeFile);
      const fullGc = heap !== undefined && heap.fullGcs > fullGcsSeen;
      if (heap !== undefined) fullGcsSeen = heap.fullGcs;
      recorder.sample({
        seconds: elapsed(),
        rssMiB,
        ...(heap === undefined
          ? {}
          : { heapUsedMiB: heap.heapUsedMiB, heapTotalMiB: heap.heapTotalMiB, externalMiB: heap.externalMiB }),
        ...(fullGc && heap.heapAfterFullGcMiB !== undefined ? { heapAfterFullGcMiB: heap.heapAfterFullGcMiB } : {}),
      });
    }, 1000),
  );
  // A line per window, just after it closes.
  for (let i = 0; i < recorder.windowCount; i++) {
    const end = Math.min(durationSeconds, (i + 1) * windowSeconds);
    timers.push(setTimeout(() => progress(windowLine(recorder.windowFigures(i), durationSeconds)), end * 1000 + 150));
  }
  // Administrator tokens live 15 minutes: sign in again every 5 (a long --duration).
  timers.push(
    setInterval(() => {
      adminAccessToken(base).then(
        (token) => {
          adminToken = token;
        },
        (err: Error) => recorder.transportError(elapsed(), `administrator sign-in: ${err.message}`),
      );
    }, 300_000),
  );

  await done;
  await new Promise((r) => setTimeout(r, 400)); // the last window's line
  for (const t of timers) clearInterval(t);
  const alive = await fetch(`${base}/api/health`).then(
    (r) => r.status === 200,
    () => false,
  );
  if (!alive) recorder.transportError(durationSeconds, 'the service did not answer GET /api/health after the soak');

  const memory = judgeMemory(recorder.samples, durationSeconds, thresholds);
  const totals = recorder.totals();
  const report: SoakReport = {
    meta: {
      date: new Date().toISOString(),
      database: kind === 'postgres' ? 'PostgreSQL' : 'PGlite',
      databaseVersion: prepared.version,
      users: prepared.users,
      cores: os.cpus().length,
      cpu: os.cpus()[0]?.model ?? 'unknown',
      node: process.version,
      loadAverageBefore,
      connections,
      durationSeconds,
      windowSeconds,
      quick,
      wallSeconds: Math.round((Date.now() - wallStart) / 1000),
    },
    totals: { ...totals, requestsPerSecond: Math.round(totals.requests / durationSeconds) },
    windows: recorder.allWindows(),
    windowKinds: recorder.windowKindFigures(),
    kinds: recorder
      .kindFigures()
      .sort((a, b) => Object.keys(kindTitles).indexOf(a.kind) - Object.keys(kindTitles).indexOf(b.kind))
      .map((k) => ({ ...k, title: kindTitles[k.kind] })),
    memory: { ...memory, idleBeforeMiB, peakMiB },
    samples: recorder.samples.map(
      (x) => Object.fromEntries(Object.entries(x).map(([k, v]) => [k, round(v)])) as unknown as MemorySample,
    ),
    flows: traffic.stats(),
    unexpected: recorder.unexpected,
    unexpectedBodies: recorder.unexpectedBodies,
    transportErrors: recorder.transportErrors,
    passed: totals.errors === 0 && !memory.growing,
  };
  const files = writeSoakReport(report);
  console.log(`\n${soakHeader(report)}\n\n${windowTable(report)}\n\n${kindTable(report)}\n\n${memoryTable(report)}\n`);
  const issues = problems(report);
  for (const issue of issues) console.error(issue);
  if (issues.length > 0) {
    console.error(`the service's last output:\n${service.output().slice(-3000)}`);
  }
  if (memory.growing) console.error('memory keeps growing after the warm-up (see the memory table)');
  console.log(
    `${report.passed ? 'passed' : 'FAILED'}: ${totals.requests.toLocaleString('en-US')} requests, ${totals.errors} errors. Written: ${files.join(', ')} (${report.meta.wallSeconds} s in all)`,
  );
  if (!report.passed) process.exitCode = 1;
} finally {
  for (const t of timers) clearInterval(t);
  await stopAll(started);
  await prepared.close();
  rmSync(probeDir, { recursive: true, force: true });
}
