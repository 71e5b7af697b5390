import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { projectRoot } from '../../scripts/lib/service-process.ts';
import type { CpuFigure } from './realtime-resources.ts';
import type { ConnectFailure } from './realtime-shared.ts';
import type { RunMeta } from './report.ts';

export interface TargetResult {
  title: string;
  target: string;
  value: string;
  met: boolean;
}

export interface ScenarioResult {
  subscribers: number;
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

const n = (x: number) => Math.round(x).toLocaleString('en-US');
const ms = (x: number) => (x < 10 ? x.toFixed(2) : x < 100 ? x.toFixed(1) : Math.round(x).toString());
const counts = (r: Record<string, number>) =>
  Object.keys(r).length === 0
    ? '0'
    : Object.entries(r)
        .map(([k, v]) => `${k} ${n(v)}`)
        .join(', ');

export function realtimeHeader(r: RealtimeReport): string {
  const m = r.meta;
  return `${m.adapter} adapter, 2 instances; ${m.database} ${m.databaseVersion}; ${m.cores} cores (${m.cpu}); Node ${m.node}; ${m.publishers} publishers × window ${m.window}; ${m.durationSeconds} s measured after ${m.warmUpSeconds} s warm-up per scenario${m.quick ? ' (quick)' : ''}; load average ${m.loadAverageBefore.toFixed(2)} before the run; ${m.date}`;
}

export function scenarioTable(r: RealtimeReport): string {
  const s = r.scenarios;
  const row = (title: string, f: (x: ScenarioResult) => string) => `| ${title} | ${s.map(f).join(' | ')} |`;
  return [
    `| | ${s.map((x) => `${n(x.subscribers)} subscribers`).join(' | ')} |`,
    `|---|${s.map(() => '---:').join('|')}|`,
    row('re-check period (REALTIME_RECHECK_SECONDS)', (x) =>
      x.recheck === undefined || x.recheck.seconds === null
        ? 'default (30 s)'
        : x.recheck.seconds === 0
          ? 'off'
          : `${x.recheck.seconds} s`,
    ),
    row('re-check passes (A+B) / mean time (ms)', (x) =>
      x.recheck === undefined ? '-' : `${n(x.recheck.passes)} / ${x.recheck.passes > 0 ? ms(x.recheck.meanMs) : '-'}`,
    ),
    row('subscribers on instance A / B', (x) => `${x.perInstance[0]} / ${x.perInstance[1]}`),
    row('offered publishes/s', (x) =>
      x.offeredPerSecond > 0 ? x.offeredPerSecond.toLocaleString('en-US') : 'as fast as acks allow',
    ),
    row('connect + subscribe (s)', (x) => x.connect.seconds.toFixed(1)),
    row('connect/subscribe failures', (x) => n(x.connect.failureCount)),
    row('publishes sent', (x) => n(x.publishes.sent)),
    row('**accepted publishes/s**', (x) => `**${n(x.publishes.perSecond)}**`),
    row('publish ack p50 / p99 (ms)', (x) => `${ms(x.publishes.ackP50Ms)} / ${ms(x.publishes.ackP99Ms)}`),
    row('refused publishes', (x) => counts(x.publishes.refused)),
    row('publish errors', (x) => counts(x.publishes.errors)),
    row('**deliveries/s**', (x) => `**${n(x.deliveries.perSecond)}**`),
    row('deliveries expected (all accepted × subscribers)', (x) => n(x.deliveries.expected)),
    row('deliveries received', (x) => n(x.deliveries.received)),
    row('lost', (x) => n(x.deliveries.lost)),
    row('unexpected / duplicates / malformed', (x) =>
      [x.deliveries.unexpected, x.deliveries.duplicates, x.deliveries.malformed].map(n).join(' / '),
    ),
    row('drain after the last ack (s)', (x) => x.deliveries.drainSeconds.toFixed(1)),
    row(
      '**latency p50 / p99 / max (ms)**',
      (x) => `**${ms(x.latency.p50Ms)} / ${ms(x.latency.p99Ms)}** / ${ms(x.latency.maxMs)}`,
    ),
    row('latency samples', (x) => n(x.latency.samples)),
    row('per-publisher seq order violations', (x) => n(x.order.perPublisherViolations)),
    row(
      'distinct message-id orders (subscribers compared)',
      (x) => `${x.order.distinctOrders} (${n(x.order.subscribersCompared)})`,
    ),
    row('subscribers off the commit order (realtime.messages.seq)', (x) => n(x.order.subscribersOffCommitOrder)),
    row('messages committed / accepted', (x) => `${n(x.order.committedMessages)} / ${n(x.publishes.accepted)}`),
    row('message ids differing from the acks', (x) => n(x.order.messageIdMismatches)),
    row('acks out of seq order (information)', (x) => n(x.publishes.acksOutOfOrder)),
    row('disconnects during the run', (x) => counts(x.disconnects)),
    row('realtime:error events', (x) => counts(x.realtimeErrors)),
    row(
      'RSS A+B before / after subscribers (MiB)',
      (x) =>
        `${n(x.memory.rssBeforeMiB[0] + x.memory.rssBeforeMiB[1])} / ${n(x.memory.rssAfterMiB[0] + x.memory.rssAfterMiB[1])}`,
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
          `| ${n(s.subscribers)} subscribers | ${t.title} | ${t.target} | ${t.value} | ${t.met ? 'met' : '**missed**'} |`,
      ),
    ),
  ].join('\n');
}

/** Writes bench/results/realtime-<adapter>[-paced][-quick].{md,json}; returns their paths. */
export function writeRealtimeReport(r: RealtimeReport): string[] {
  const dir = path.join(projectRoot, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  const paced = r.scenarios.some((x) => x.offeredPerSecond > 0) ? '-paced' : '';
  const base = path.join(dir, `realtime-${r.meta.adapter}${paced}${r.meta.quick ? '-quick' : ''}`);
  writeFileSync(`${base}.json`, `${JSON.stringify(r, null, 2)}\n`);
  const problems = r.scenarios.flatMap((s) => s.problems.map((p) => `- ${n(s.subscribers)} subscribers: ${p}`));
  const warnings = r.scenarios.flatMap((s) => s.warnings.map((w) => `- ${n(s.subscribers)} subscribers: ${w}`));
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
  writeFileSync(`${base}.md`, md);
  return [`${base}.md`, `${base}.json`];
}
