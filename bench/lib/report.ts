import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { projectRoot } from '../../scripts/lib/service-process.ts';
import type { LoadResult } from './load.ts';

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

/** What a benchmark run ran on and with (the suite's and the soak's reports). */
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

export interface Report {
  meta: RunMeta;
  cases: CaseResult[];
  resources: ResourceFigure[];
  /** EXPLAIN ANALYZE of the directory's statements, by case title (PostgreSQL only). */
  plans: Record<string, string>;
}

const verdict = (met: boolean | undefined) => (met === undefined ? '' : met ? 'met' : '**missed**');
const n = (x: number) => x.toLocaleString('en-US');

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
  const dir = path.join(projectRoot, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  const base = path.join(dir, `bench-${r.meta.database.toLowerCase()}${r.meta.quick ? '-quick' : ''}`);
  writeFileSync(`${base}.json`, `${JSON.stringify(r, null, 2)}\n`);
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
  writeFileSync(`${base}.md`, md);
  return [`${base}.md`, `${base}.json`];
}
