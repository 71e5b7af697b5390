/**
 * The benchmarks' reports, in one place: what a run ran on (RunMeta), where results go
 * (writeResults: bench/results/<name>.md, and .json beside it), and the Markdown of each report:
 * the benchmark suite (bench/run.ts), the soak (bench/soak.ts) and the realtime benchmark
 * (bench/realtime.ts); the re-check benchmark and the timing comparison write theirs through
 * writeResults too. The suite's tables also become the "Latest figures" of docs/performance.md
 * (writeLatestFigures). Latency figures come from bench/lib/latency.ts (HdrHistogram).
 */
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { projectRoot } from '../../scripts/lib/service-process.ts';
import type { LoadResult } from './load.ts';
import type { CpuFigure } from './realtime-resources.ts';
import type { ConnectFailure } from './realtime-shared.ts';
import type { KindFigures, MemoryJudgement, MemorySample, Trend, WindowFigures } from './soak-stats.ts';

// ---- shared -----------------------------------------------------------------------------------

/** What a benchmark run ran on and with (the suite's, the soak's and the realtime benchmark's reports). */
export interface RunMeta {
  date: string;
  database: string;
  databaseVersion: string;
  users: number;
  cores: number;
  cpu: string;
  node: string;
  connections: number;
  durationSeconds: number;
  quick: boolean;
  wallSeconds: number;
}

/** Where results are written: bench/results/. */
export const resultsDir = path.join(projectRoot, 'bench', 'results');

/**
 * Writes bench/results/<name>.md and, when `data` is given, <name>.json (indented, with a final
 * newline); returns the paths written, the Markdown first.
 */
export function writeResults(name: string, markdown: string, data?: unknown): string[] {
  mkdirSync(resultsDir, { recursive: true });
  const base = path.join(resultsDir, name);
  writeFileSync(`${base}.md`, markdown);
  if (data === undefined) return [`${base}.md`];
  writeFileSync(`${base}.json`, `${JSON.stringify(data, null, 2)}\n`);
  return [`${base}.md`, `${base}.json`];
}

const n = (x: number) => x.toLocaleString('en-US');
const verdict = (met: boolean | undefined) => (met === undefined ? '' : met ? 'met' : '**missed**');

// ---- the benchmark suite (bench/run.ts) ---------------------------------------------------------

/** A measured case, with its target when the suite sets one, judged against the same run. */
export interface CaseResult extends LoadResult {
  id: string;
  ratio: number;
  target?: string;
  met?: boolean;
}

export interface ResourceFigure {
  title: string;
  value: number;
  unit: 'ms' | 'MiB';
  target?: string;
  met?: boolean;
}

export interface Report {
  meta: RunMeta;
  cases: CaseResult[];
  resources: ResourceFigure[];
  /** EXPLAIN ANALYZE of the directory's statements, by case title (PostgreSQL only). */
  plans: Record<string, string>;
}

export function header(r: Report): string {
  const m = r.meta;
  return `${m.database} ${m.databaseVersion}, ${n(m.users)} users; ${m.cores} cores (${m.cpu}); Node ${m.node}; ${m.connections} connections, ${m.durationSeconds} s per case${m.quick ? ' (quick)' : ''}; ${m.date}`;
}

export function markdownTables(r: Report): string {
  const cases = [
    '| case | req/s | p50 ms | p99 ms | errors | ratio | target | |',
    '|---|---:|---:|---:|---:|---:|---|---|',
    ...r.cases.map(
      (c) =>
        `| ${c.title} | ${n(c.requestsPerSecond)} | ${c.p50Ms} | ${c.p99Ms} | ${c.errors + c.non2xx} | ${c.ratio.toFixed(2)} | ${c.target ?? ''} | ${verdict(c.met)} |`,
    ),
  ];
  const resources = [
    '| resource | value | target | |',
    '|---|---:|---|---|',
    ...r.resources.map(
      (x) => `| ${x.title} | ${n(Math.round(x.value))} ${x.unit} | ${x.target ?? ''} | ${verdict(x.met)} |`,
    ),
  ];
  return `${cases.join('\n')}\n\n${resources.join('\n')}`;
}

/** Writes bench/results/bench-<database>[-quick].json and .md; returns their paths. */
export function writeReport(r: Report): string[] {
  const plans = Object.entries(r.plans).map(([title, plan]) => `#### ${title}\n\n\`\`\`\n${plan}\n\`\`\``);
  const md = [
    '# Benchmark results',
    '',
    header(r),
    '',
    'Ratios are to the ceiling (a bare Fastify JSON route) measured in the same run. Reproduce with',
    `\`npm run bench -- --database ${r.meta.database === 'PGlite' ? 'pglite' : 'postgres'}${r.meta.quick ? ' --quick' : ''}\`.`,
    '',
    markdownTables(r),
    ...(plans.length > 0 ? ['', '## Plans of the directory statements (EXPLAIN ANALYZE, limit 10)', '', ...plans] : []),
    '',
  ].join('\n');
  return writeResults(`bench-${r.meta.database.toLowerCase()}${r.meta.quick ? '-quick' : ''}`, md, r);
}

/**
 * The part of docs/performance.md that a full run writes (bench/run.ts decides which runs do):
 * everything between the line that starts with `startPrefix` and the `end` line, which both stay (the
 * start line is rewritten as `start`). Markdown renders neither, and the docs-samples test reads only
 * a `<!-- sample: … -->` comment right before a code fence.
 */
export const latestFiguresMarkers = {
  startPrefix: '<!-- bench:latest-figures:start',
  start:
    '<!-- bench:latest-figures:start (written by a full `npm run bench` on PostgreSQL: edits here are overwritten) -->',
  end: '<!-- bench:latest-figures:end -->',
};

/** docs/performance.md, whose Latest figures writeLatestFigures rewrites. */
export const performanceDoc = path.join(projectRoot, 'docs', 'performance.md');

/**
 * The Latest figures of docs/performance.md: what the run ran on, then the tables of the results
 * file (markdownTables), linked as `resultsFile` (a path; written relative to docs/).
 */
export function latestFigures(r: Report, resultsFile: string): string {
  const m = r.meta;
  const link = path.relative(path.dirname(performanceDoc), resultsFile).split(path.sep).join('/');
  const shown = path.relative(projectRoot, resultsFile).split(path.sep).join('/');
  return [
    `Latest full run ([\`${shown}\`](${link})), ${m.date.slice(0, 10)}:`,
    `${m.database} ${m.databaseVersion.split(' ')[0]}, ${n(m.users)} users, ${m.cores} cores (${m.cpu}), Node ${m.node.replace(/^v/, '')}, ${m.connections} connections, ${m.durationSeconds} s per case;`,
    'the service started as `npm start` starts it. Targets are judged for this configuration only.',
    '',
    markdownTables(r),
  ].join('\n');
}

/**
 * Rewrites what lies between latestFiguresMarkers in docs/performance.md with latestFigures(r, resultsFile);
 * throws, writing nothing, unless each marker is there exactly once and in order. Returns the path.
 */
export function writeLatestFigures(r: Report, resultsFile: string): string {
  const text = readFileSync(performanceDoc, 'utf8');
  const lines = text.split('\n');
  const at = (prefix: string) => lines.flatMap((line, i) => (line.startsWith(prefix) ? [i] : []));
  const starts = at(latestFiguresMarkers.startPrefix);
  const ends = at(latestFiguresMarkers.end);
  const [start] = starts;
  const [end] = ends;
  if (starts.length !== 1 || ends.length !== 1 || start === undefined || end === undefined || end < start) {
    throw new Error(
      `${performanceDoc}: expected one line starting with "${latestFiguresMarkers.startPrefix}" and then one "${latestFiguresMarkers.end}"`,
    );
  }
  const rewritten = [
    ...lines.slice(0, start),
    latestFiguresMarkers.start,
    '',
    latestFigures(r, resultsFile),
    '',
    ...lines.slice(end),
  ].join('\n');
  // Into a file beside it, then renamed over it: a reader never sees half a file.
  const temporary = `${performanceDoc}.${process.pid}.tmp`;
  writeFileSync(temporary, rewritten);
  renameSync(temporary, performanceDoc);
  return performanceDoc;
}

// ---- the soak (bench/soak.ts) ----------------------------------------------------------------

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

const soakMs = (x: number) => (x < 10 ? x.toFixed(1) : Math.round(x).toString());
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
  return `[${String(w.toSeconds).padStart(width)}/${durationSeconds} s] ${n(rate).padStart(6)} req/s, ${w.errors} errors, p50 ${soakMs(w.p50Ms)} ms, p99 ${soakMs(w.p99Ms)} ms, RSS ${mib(w.rssMiB)} MiB${w.heapUsedMiB === undefined ? '' : `, heap ${mib(w.heapUsedMiB)} MiB`}${w.liveHeapMiB === undefined ? '' : `, live heap ${mib(w.liveHeapMiB)} MiB`}`;
}

export function windowTable(r: SoakReport): string {
  return [
    '| window s | requests | req/s | errors | p50 ms | p99 ms | max ms | RSS MiB (mean) | RSS MiB (max) | heap used MiB | live heap MiB |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...r.windows.map(
      (w) =>
        `| ${w.fromSeconds}-${w.toSeconds} | ${n(w.requests)} | ${n(Math.round(w.requests / (w.toSeconds - w.fromSeconds)))} | ${w.errors} | ${soakMs(w.p50Ms)} | ${soakMs(w.p99Ms)} | ${soakMs(w.maxMs)} | ${mib(w.rssMiB)} | ${mib(w.rssMaxMiB)} | ${mib(w.heapUsedMiB)} | ${mib(w.liveHeapMiB)} |`,
    ),
  ].join('\n');
}

export function kindTable(r: SoakReport): string {
  return [
    '| request | share | requests | errors | p50 ms | p99 ms | statuses |',
    '|---|---:|---:|---:|---:|---:|---|',
    ...r.kinds.map(
      (k) =>
        `| ${k.title} | ${((100 * k.requests) / Math.max(1, r.totals.requests)).toFixed(1)}% | ${n(k.requests)} | ${k.errors} | ${soakMs(k.p50Ms)} | ${soakMs(k.p99Ms)} | ${Object.entries(
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
  return writeResults(`soak-${r.meta.database.toLowerCase()}${r.meta.quick ? '-quick' : ''}`, soakMarkdown(r), r);
}

// ---- the realtime benchmark (bench/realtime.ts) --------------------------------------------------

export interface TargetResult {
  title: string;
  target: string;
  value: string;
  met: boolean;
}

export interface ScenarioResult {
  subscribers: number;
  /** A run against bare socket.io (bench/bare-realtime-server.ts): the ceiling of the scenario after it. */
  ceiling?: boolean;
  /** The service's figures as a ratio to the ceiling's in the same run (when it was measured). */
  vsCeiling?: { publishes: number; deliveries: number };
  /** The re-check of live subscriptions during the measured window: its period (null: the server default), passes on both instances, mean time. */
  recheck?: { seconds: number | null; passes: number; meanMs: number };
  /** Subscribers on instance A and on instance B. */
  perInstance: [number, number];
  publishers: number;
  window: number;
  /** Publishes/s offered (paced); 0: a closed loop, as fast as the acknowledgements allow. */
  offeredPerSecond: number;
  measuredSeconds: number;
  connect: { seconds: number; failureCount: number; failures: ConnectFailure[] };
  publishes: {
    sent: number;
    accepted: number;
    acceptedInWindow: number;
    perSecond: number;
    refused: Record<string, number>;
    errors: Record<string, number>;
    acksOutOfOrder: number;
    ackP50Ms: number;
    ackP99Ms: number;
  };
  deliveries: {
    /** Accepted publishes × subscribers connected. */
    expected: number;
    received: number;
    lost: number;
    unexpected: number;
    duplicates: number;
    malformed: number;
    inWindow: number;
    perSecond: number;
    drainSeconds: number;
  };
  latency: { p50Ms: number; p99Ms: number; maxMs: number; samples: number; negative: number };
  order: {
    /** Deliveries whose seq was not above the previous one of the same publisher (all subscribers). */
    perPublisherViolations: number;
    subscribersWithViolations: number;
    /** Subscribers with complete reception, compared by the order of message ids they saw. */
    subscribersCompared: number;
    distinctOrders: number;
    subscribersOffMajorityOrder: number;
    /** Complete subscribers whose message ids differ from those the acks named. */
    messageIdMismatches: number;
    /** Complete subscribers whose order differs from the commit order (realtime.messages.seq). */
    subscribersOffCommitOrder: number;
    /** Rows in realtime.messages from the scenario's publishers (should equal the accepted publishes). */
    committedMessages: number;
  };
  disconnects: Record<string, number>;
  realtimeErrors: Record<string, number>;
  memory: { rssBeforeMiB: [number, number]; rssAfterMiB: [number, number]; perConnectionKiB: number };
  cpu: { groups: CpuFigure[]; machineBusyPercent: number };
  targets: TargetResult[];
  problems: string[];
  /** Why the figures may not be representative (other load on the machine). */
  warnings: string[];
}

export interface RealtimeReport {
  meta: RunMeta & {
    adapter: string;
    loadAverageBefore: number;
    warmUpSeconds: number;
    publishers: number;
    window: number;
    subscriberProcesses: number;
    subscriberAccounts: number;
    /** The command line of the run. */
    command: string;
    /** What ran where (processes, ports). */
    layout: string[];
  };
  scenarios: ScenarioResult[];
  passed: boolean;
}

const whole = (x: number) => Math.round(x).toLocaleString('en-US');
const realtimeMs = (x: number) => (x < 10 ? x.toFixed(2) : x < 100 ? x.toFixed(1) : Math.round(x).toString());
const counts = (r: Record<string, number>) =>
  Object.keys(r).length === 0
    ? '0'
    : Object.entries(r)
        .map(([k, v]) => `${k} ${whole(v)}`)
        .join(', ');

export function realtimeHeader(r: RealtimeReport): string {
  const m = r.meta;
  return `${m.adapter} adapter, 2 instances; ${m.database} ${m.databaseVersion}; ${m.cores} cores (${m.cpu}); Node ${m.node}; ${m.publishers} publishers × window ${m.window}; ${m.durationSeconds} s measured after ${m.warmUpSeconds} s warm-up per scenario${m.quick ? ' (quick)' : ''}; load average ${m.loadAverageBefore.toFixed(2)} before the run; ${m.date}`;
}

export function scenarioTable(r: RealtimeReport): string {
  const s = r.scenarios;
  const row = (title: string, f: (x: ScenarioResult) => string) => `| ${title} | ${s.map(f).join(' | ')} |`;
  return [
    `| | ${s.map((x) => `${whole(x.subscribers)} subscribers${x.ceiling ? ', bare socket.io (ceiling)' : ''}`).join(' | ')} |`,
    `|---|${s.map(() => '---:').join('|')}|`,
    row('re-check period (REALTIME_RECHECK_SECONDS)', (x) =>
      x.ceiling
        ? '-'
        : x.recheck === undefined || x.recheck.seconds === null
          ? 'default (30 s)'
          : x.recheck.seconds === 0
            ? 'off'
            : `${x.recheck.seconds} s`,
    ),
    row('re-check passes (A+B) / mean time (ms)', (x) =>
      x.ceiling || x.recheck === undefined
        ? '-'
        : `${whole(x.recheck.passes)} / ${x.recheck.passes > 0 ? realtimeMs(x.recheck.meanMs) : '-'}`,
    ),
    row('subscribers on instance A / B', (x) => `${x.perInstance[0]} / ${x.perInstance[1]}`),
    row('offered publishes/s', (x) =>
      x.offeredPerSecond > 0 ? x.offeredPerSecond.toLocaleString('en-US') : 'as fast as acks allow',
    ),
    row('connect + subscribe (s)', (x) => x.connect.seconds.toFixed(1)),
    row('connect/subscribe failures', (x) => whole(x.connect.failureCount)),
    row('publishes sent', (x) => whole(x.publishes.sent)),
    row('**accepted publishes/s**', (x) => `**${whole(x.publishes.perSecond)}**`),
    row(
      'publish ack p50 / p99 (ms)',
      (x) => `${realtimeMs(x.publishes.ackP50Ms)} / ${realtimeMs(x.publishes.ackP99Ms)}`,
    ),
    row('refused publishes', (x) => counts(x.publishes.refused)),
    row('publish errors', (x) => counts(x.publishes.errors)),
    row('**deliveries/s**', (x) => `**${whole(x.deliveries.perSecond)}**`),
    row('publishes/s and deliveries/s as a ratio to the ceiling', (x) =>
      x.vsCeiling === undefined ? '-' : `${x.vsCeiling.publishes.toFixed(2)} / ${x.vsCeiling.deliveries.toFixed(2)}`,
    ),
    row('deliveries expected (all accepted × subscribers)', (x) => whole(x.deliveries.expected)),
    row('deliveries received', (x) => whole(x.deliveries.received)),
    row('lost', (x) => whole(x.deliveries.lost)),
    row('unexpected / duplicates / malformed', (x) =>
      [x.deliveries.unexpected, x.deliveries.duplicates, x.deliveries.malformed].map(whole).join(' / '),
    ),
    row('drain after the last ack (s)', (x) => x.deliveries.drainSeconds.toFixed(1)),
    row(
      '**latency p50 / p99 / max (ms)**',
      (x) => `**${realtimeMs(x.latency.p50Ms)} / ${realtimeMs(x.latency.p99Ms)}** / ${realtimeMs(x.latency.maxMs)}`,
    ),
    row('latency samples', (x) => whole(x.latency.samples)),
    row('per-publisher seq order violations', (x) => whole(x.order.perPublisherViolations)),
    row(
      'distinct message-id orders (subscribers compared)',
      (x) => `${x.order.distinctOrders} (${whole(x.order.subscribersCompared)})`,
    ),
    row('subscribers off the commit order (realtime.messages.seq)', (x) =>
      x.ceiling ? '-' : whole(x.order.subscribersOffCommitOrder),
    ),
    row('messages committed / accepted', (x) =>
      x.ceiling ? '-' : `${whole(x.order.committedMessages)} / ${whole(x.publishes.accepted)}`,
    ),
    row('message ids differing from the acks', (x) => whole(x.order.messageIdMismatches)),
    row('acks out of seq order (information)', (x) => whole(x.publishes.acksOutOfOrder)),
    row('disconnects during the run', (x) => counts(x.disconnects)),
    row('realtime:error events', (x) => counts(x.realtimeErrors)),
    row(
      'RSS A+B before / after subscribers (MiB)',
      (x) =>
        `${whole(x.memory.rssBeforeMiB[0] + x.memory.rssBeforeMiB[1])} / ${whole(x.memory.rssAfterMiB[0] + x.memory.rssAfterMiB[1])}`,
    ),
    row('**memory per connection (KiB)**', (x) => `**${x.memory.perConnectionKiB.toFixed(1)}**`),
    row('machine CPU busy during the window', (x) => `${x.cpu.machineBusyPercent}%`),
    ...(s[0]?.cpu.groups ?? []).map((g, i) =>
      row(`CPU: ${g.title} (% of one core)`, (x) => `${x.cpu.groups[i]?.percentOfCore ?? ''}`),
    ),
  ].join('\n');
}

export function targetTable(r: RealtimeReport): string {
  return [
    '| scenario | figure | target | measured | |',
    '|---|---|---|---:|---|',
    ...r.scenarios.flatMap((s) =>
      s.targets.map(
        (t) =>
          `| ${whole(s.subscribers)} subscribers | ${t.title} | ${t.target} | ${t.value} | ${t.met ? 'met' : '**missed**'} |`,
      ),
    ),
  ].join('\n');
}

/** Writes bench/results/realtime-<adapter>[-paced][-quick].{md,json}; returns their paths. */
export function writeRealtimeReport(r: RealtimeReport): string[] {
  const paced = r.scenarios.some((x) => x.offeredPerSecond > 0) ? '-paced' : '';
  const problems = r.scenarios.flatMap((s) => s.problems.map((p) => `- ${whole(s.subscribers)} subscribers: ${p}`));
  const warnings = r.scenarios.flatMap((s) => s.warnings.map((w) => `- ${whole(s.subscribers)} subscribers: ${w}`));
  const md = [
    '# Realtime benchmark results',
    '',
    realtimeHeader(r),
    '',
    `Reproduce with \`${r.meta.command}\`.`,
    '',
    'Latency is receipt minus `sentAt`, both read from CLOCK_MONOTONIC (one clock for all processes of the',
    'machine). Rates count the messages published within the measured window (after the warm-up); the loss',
    'and order checks cover every message of the scenario, warm-up included, after a drain. The publishers',
    'are a closed loop (publishers × window publishes in flight) unless a rate is offered (`--rate`, the',
    '"offered publishes/s" row): then they are paced at that rate, still within the window. In a closed loop',
    'latency includes the wait of a publish behind the others in flight: about in-flight ÷ accepted',
    'publishes/s when the publish path is the limit.',
    '',
    '## Where things ran',
    '',
    ...r.meta.layout.map((l) => `- ${l}`),
    '',
    '## Scenarios',
    '',
    scenarioTable(r),
    '',
    '## Targets',
    '',
    targetTable(r),
    '',
    ...(warnings.length > 0 ? ['## Warnings', '', ...warnings, ''] : []),
    `## Verdict: ${r.passed ? 'passed (no loss, no reordering, no errors)' : 'FAILED'}`,
    ...(problems.length > 0 ? ['', ...problems] : []),
    '',
  ].join('\n');
  return writeResults(`realtime-${r.meta.adapter}${paced}${r.meta.quick ? '-quick' : ''}`, md, r);
}
