import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { projectRoot } from '../../scripts/lib/service-process.ts';
import type { RunMeta } from './report.ts';
import type { KindFigures, MemoryJudgement, MemorySample, Trend, WindowFigures } from './soak-stats.ts';

export interface SoakReport {
  meta: RunMeta & {
    /** 1-minute load average of the machine just before the load (others may be using it). */
    loadAverageBefore: number;
    windowSeconds: number;
  };
  totals: { requests: number; errors: number; requestsPerSecond: number };
  windows: WindowFigures[];
  /** Per window (same order), the figures of each request kind. */
  windowKinds: KindFigures[][];
  kinds: (KindFigures & { title: string })[];
  memory: MemoryJudgement & { idleBeforeMiB: number; peakMiB: number };
  /** Every 1-s sample (seconds since the load started, MiB). */
  samples: MemorySample[];
  /** The stateful flows: chains of refresh tokens, verifications of prepared sign-ups. */
  flows: Record<string, number>;
  unexpected: Record<string, number>;
  unexpectedBodies: Record<string, string>;
  transportErrors: Record<string, number>;
  passed: boolean;
}

const n = (x: number) => x.toLocaleString('en-US');
const ms = (x: number) => (x < 10 ? x.toFixed(1) : Math.round(x).toString());
const mib = (x: number | undefined) => (x === undefined ? '' : Math.round(x).toString());
const signed = (x: number, digits: number) => `${x >= 0 ? '+' : ''}${x.toFixed(digits)}`;

const flowTitles: Record<string, string> = {
  chainsStarted: 'refresh-token chains started (by a sign-in or a verification)',
  chainsEnded: 'chains ended by a logout (after 50 refreshes)',
  chainsAbandoned: 'sessions left unused (2 × connections chains already live)',
  verified: 'prepared sign-ups verified (at most 40 a second)',
  verifySlotWrongCodes: 'verification slots that sent a wrong code instead (ahead of that pace)',
  chainsLive: 'chains live at the end',
  sessionSlotUses: 'uses of the session slot (sign-in, refresh or logout)',
};

export function soakHeader(r: SoakReport): string {
  const m = r.meta;
  return `${m.database} ${m.databaseVersion}, ${n(m.users)} users; ${m.cores} cores (${m.cpu}); Node ${m.node}; ${m.connections} connections, ${m.durationSeconds} s of mixed traffic in ${m.windowSeconds} s windows${m.quick ? ' (quick)' : ''}; load average ${m.loadAverageBefore.toFixed(2)} before the run; ${m.date}`;
}

/** One progress line for a window (written while the soak runs). */
export function windowLine(w: WindowFigures, durationSeconds: number): string {
  const rate = Math.round(w.requests / (w.toSeconds - w.fromSeconds));
  const width = String(durationSeconds).length;
  return `[${String(w.toSeconds).padStart(width)}/${durationSeconds} s] ${n(rate).padStart(6)} req/s, ${w.errors} errors, p50 ${ms(w.p50Ms)} ms, p99 ${ms(w.p99Ms)} ms, RSS ${mib(w.rssMiB)} MiB${w.heapUsedMiB === undefined ? '' : `, heap ${mib(w.heapUsedMiB)} MiB`}${w.liveHeapMiB === undefined ? '' : `, live heap ${mib(w.liveHeapMiB)} MiB`}`;
}

export function windowTable(r: SoakReport): string {
  return [
    '| window s | requests | req/s | errors | p50 ms | p99 ms | max ms | RSS MiB (mean) | RSS MiB (max) | heap used MiB | live heap MiB |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...r.windows.map(
      (w) =>
        `| ${w.fromSeconds}-${w.toSeconds} | ${n(w.requests)} | ${n(Math.round(w.requests / (w.toSeconds - w.fromSeconds)))} | ${w.errors} | ${ms(w.p50Ms)} | ${ms(w.p99Ms)} | ${ms(w.maxMs)} | ${mib(w.rssMiB)} | ${mib(w.rssMaxMiB)} | ${mib(w.heapUsedMiB)} | ${mib(w.liveHeapMiB)} |`,
    ),
  ].join('\n');
}

export function kindTable(r: SoakReport): string {
  return [
    '| request | share | requests | errors | p50 ms | p99 ms | statuses |',
    '|---|---:|---:|---:|---:|---:|---|',
    ...r.kinds.map(
      (k) =>
        `| ${k.title} | ${((100 * k.requests) / Math.max(1, r.totals.requests)).toFixed(1)}% | ${n(k.requests)} | ${k.errors} | ${ms(k.p50Ms)} | ${ms(k.p99Ms)} | ${Object.entries(
          k.statuses,
        )
          .map(([status, count]) => `${status}: ${n(count)}`)
          .join(', ')} |`,
    ),
  ].join('\n');
}

export function memoryTable(r: SoakReport): string {
  const m = r.memory;
  const t = m.thresholds;
  const trend = (name: string, x: Trend, maxSlope: number, maxGrowth: number) => [
    [
      `${name}: slope after the warm-up (least squares, ${x.samples} points)`,
      `${signed(x.slopeMiBPerMinute, 2)} MiB/min`,
      `growing if above ${maxSlope} MiB/min…`,
    ],
    [
      `${name}: mean of the first quarter after the warm-up → the last`,
      `${x.firstQuarterMeanMiB.toFixed(1)} → ${x.lastQuarterMeanMiB.toFixed(1)} MiB (${signed(x.growthMiB, 1)} MiB)`,
      `…and above +${maxGrowth} MiB: ${x.growing ? '**growing**' : 'not growing'}`,
    ],
  ];
  const rows = [
    ['resident memory before the load (idle, after sign-in)', `${mib(m.idleBeforeMiB)} MiB`, ''],
    ['peak resident memory', `${mib(m.peakMiB)} MiB`, ''],
    ['warm-up left out of the judgement', `${Math.round(m.warmUpSeconds)} s`, ''],
    ...trend('RSS', m.rss, t.slopeMiBPerMinute, t.growthMiB),
    ...(m.liveHeap
      ? trend('live heap (after full GCs)', m.liveHeap, t.liveHeapSlopeMiBPerMinute, t.liveHeapGrowthMiB)
      : [
          [
            'live heap (after full GCs)',
            `${m.fullGcsInQuarters[0]} and ${m.fullGcsInQuarters[1]} full GCs in the first and last quarters`,
            `not judged (fewer than ${t.liveHeapMinFullGcs} in a quarter)`,
          ],
        ]),
    ['memory keeps growing', m.growing ? '**yes**' : 'no', ''],
  ];
  return ['| memory | value | threshold |', '|---|---:|---|', ...rows.map((row) => `| ${row.join(' | ')} |`)].join(
    '\n',
  );
}

export function problems(r: SoakReport): string[] {
  return [
    ...Object.entries(r.unexpected).map(
      ([key, count]) => `unexpected answer ${key}: ${n(count)} (first body: ${r.unexpectedBodies[key] ?? ''})`,
    ),
    ...Object.entries(r.transportErrors).map(([message, count]) => `no answer (${message}): ${n(count)}`),
  ];
}

export function soakMarkdown(r: SoakReport): string {
  const issues = problems(r);
  return [
    '# Soak results',
    '',
    soakHeader(r),
    '',
    `Reproduce with \`npm run bench:soak -- --database ${r.meta.database === 'PGlite' ? 'pglite' : 'postgres'}${r.meta.quick ? ' --quick' : ''}\`.`,
    `${n(r.totals.requests)} requests (${n(r.totals.requestsPerSecond)} req/s), ${n(r.totals.errors)} errors; ${r.passed ? '**passed**' : '**failed**'}.`,
    '',
    '## Per window',
    '',
    windowTable(r),
    '',
    '## Per request kind',
    '',
    kindTable(r),
    '',
    '## Memory',
    '',
    memoryTable(r),
    '',
    '## Flows',
    '',
    ...Object.entries(r.flows).map(([k, v]) => `- ${flowTitles[k] ?? k}: ${n(v)}`),
    ...(issues.length > 0 ? ['', '## Errors', '', ...issues.map((x) => `- ${x}`)] : []),
    '',
  ].join('\n');
}

/** Writes bench/results/soak-<database>[-quick].json and .md; returns their paths. */
export function writeSoakReport(r: SoakReport): string[] {
  const dir = path.join(projectRoot, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  const base = path.join(dir, `soak-${r.meta.database.toLowerCase()}${r.meta.quick ? '-quick' : ''}`);
  writeFileSync(`${base}.json`, `${JSON.stringify(r, null, 2)}\n`);
  writeFileSync(`${base}.md`, soakMarkdown(r));
  return [`${base}.md`, `${base}.json`];
}
