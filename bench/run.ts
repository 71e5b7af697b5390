/**
 * The benchmark suite: every operation beside a ceiling (a bare Fastify JSON route) measured in the
 * same run, plus start-up time and memory. The service runs as `npm start` runs it: this Node with the
 * flags of package.json's `start` script (read from it, see NPM_START in scripts/lib/service-process.ts)
 * on `src/server.ts`, with no build step; on loopback, with a fake OpenAI-compatible upstream in a
 * process of its own.
 *
 *   npm run bench                                   # PostgreSQL, 1,000,000 users, 10 s per case
 *   npm run bench -- --quick                        # 20,000 users, 3 s per case: under 2 minutes
 *   npm run bench -- --database pglite              # the embedded database
 *   npm run bench -- --users 100000 --duration 5 --connections 20
 *   npm run bench -- --only 'verify|users, first'   # the ceiling and the cases whose title has either (writes no files)
 *
 * PostgreSQL: DATABASE_URL names the server (default postgres://postgres@127.0.0.1:5432/postgres);
 * a database bench_users_<N> is created beside it, seeded once and kept. PGlite: the data lives in
 * <tmpdir>/service-bench/users-<N>. Writes bench/results/bench-<database>[-quick].{md,json}; a full
 * run on PostgreSQL in the reference configuration (1,000,000 users, 10 connections, 10 s per case)
 * whose cases all answered as expected also rewrites the "Latest figures" of docs/performance.md
 * (between its bench:latest-figures markers).
 */
import os from 'node:os';
import { countTokens } from 'gpt-tokenizer/encoding/cl100k_base';
import { NPM_START, type RunningService, residentMiB } from '../scripts/lib/service-process.ts';
import { userDirectoryQuery } from '../src/db/repositories/user-directory.ts';
import { type LoadOptions, runLoad } from './lib/load.ts';
import { parseBenchOptions } from './lib/options.ts';
import { EMAIL_CODE, PREPARED_DOMAIN, prepareDatabase, SIGN_IN, VERIFY_CODE } from './lib/prepare.ts';
import {
  type CaseResult,
  header,
  markdownTables,
  type Report,
  type ResourceFigure,
  writeLatestFigures,
  writeReport,
} from './lib/report.ts';
import { pgliteStartFigures, trackPeakMemory } from './lib/resources.ts';
import { ceilingTitle, startBenchService, startCeiling, stopAll } from './lib/setup.ts';

const {
  quick,
  kind,
  users,
  durationSeconds,
  connections,
  extra: { only },
} = parseBenchOptions(
  'usage: npm run bench -- [--quick] [--database postgres|pglite] [--users N] [--duration S] [--connections C] [--only TEXT|TEXT…]',
  { quick: 3, full: 10 },
  ['only'],
);
const wallStart = Date.now();
const progress = (text: string) => process.stderr.write(`\n${text}\n`);

// Targets hold on the reference machine (2 cores) for PostgreSQL, 10 connections and a million users.
const judged = kind === 'postgres' && connections === 10 && users >= 1_000_000;
// Only the reference configuration's full run writes docs/performance.md's Latest figures.
const notForTheDocs = [
  ...(kind === 'postgres' ? [] : ['not PostgreSQL']),
  ...(quick ? ['quick'] : []),
  ...(users === 1_000_000 ? [] : [`${users.toLocaleString('en-US')} users`]),
  ...(connections === 10 ? [] : [`${connections} connections`]),
  ...(durationSeconds === 10 ? [] : [`${durationSeconds} s per case`]),
  ...(only === undefined ? [] : [`only the cases --only "${only}" names`]),
];
const atLeast = (rps: number, p99?: number) => ({
  text: `≥ ${rps.toLocaleString('en-US')} req/s${p99 === undefined ? '' : `, p99 ≤ ${p99} ms`}`,
  check: (c: CaseResult) => c.requestsPerSecond >= rps && (p99 === undefined || c.p99Ms <= p99),
});

progress(
  `the service runs as \`npm start\` does: node ${[...NPM_START.flags, NPM_START.script].join(' ')} (no build step)`,
);
progress(
  notForTheDocs.length === 0
    ? 'a full run on PostgreSQL: docs/performance.md (Latest figures) is rewritten at the end'
    : `docs/performance.md is left as it is (${notForTheDocs.join(', ')}): only a full run on PostgreSQL with 1,000,000 users, 10 connections and 10 s per case writes its Latest figures`,
);
progress(
  'start-up and idle memory on PGlite (a new data directory, then the same one: an empty compile cache, a filled one, through `npm start`)',
);
const start = await pgliteStartFigures();

progress(`preparing the ${kind} database`);
const signUpCount = durationSeconds * 2500;
const prepared = await prepareDatabase({
  kind,
  serverUrl: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres',
  users,
  signUps: signUpCount,
});

const started: RunningService[] = [];
const cases: CaseResult[] = [];
const plans: Record<string, string> = {};
try {
  const { service, base, upstream, adminToken: accessToken } = await startBenchService(started, prepared.env);
  await new Promise((r) => setTimeout(r, 1000));
  const serviceIdleMiB = residentMiB(service.child.pid as number);
  const ceilingUrl = await startCeiling(started);
  const memory = trackPeakMemory(service.child.pid as number);

  const json = { 'content-type': 'application/json' };
  const bearer = { authorization: `Bearer ${accessToken}` };
  const fiftyTerm = 'james.smith';
  const half = Math.floor(users / 2);
  const matches = async (search: string) => {
    const res = await fetch(`${base}/api/auth/users?limit=1&search=${encodeURIComponent(search)}`, { headers: bearer });
    return ((await res.json()) as { pagination: { total: number } }).pagination.total;
  };
  const embeddingsBody = (format: 'float' | 'base64') =>
    JSON.stringify({
      model: 'text-embedding-3-small',
      input: 'The quick brown fox jumps over the lazy dog',
      dimensions: 1536,
      encoding_format: format,
    });
  const thousandTokens = (() => {
    const words = 'the service computes vectors for every text it receives and returns them in order'.split(' ');
    let text = '';
    for (let i = 0; countTokens(text) < 1000; i++) text += `${i === 0 ? '' : ' '}${words[i % words.length]}`;
    return text;
  })();
  let nextSignUp = 0;
  let nextResetSend = 0;
  let nextVerificationSend = 0;
  let nextExchange = 0;
  let nextReset = 0;
  let nextOtp = 0;
  const cycle = <T>(items: T[], n: number): T => items[n % items.length] as T;

  type Case = Omit<LoadOptions, 'connections' | 'durationSeconds'> & {
    id: string;
    target?: { text: string; check: (c: CaseResult) => boolean };
    /** For the directory: the statement whose plan goes into the Markdown report. */
    plan?: { offset: number; search: string | undefined };
  };
  const directory = (id: string, title: string, offset: number, search?: string, target?: Case['target']): Case => ({
    id,
    title: `GET /api/auth/users, ${title}`,
    url: `${base}/api/auth/users?offset=${offset}${search === undefined ? '' : `&search=${encodeURIComponent(search)}`}`,
    headers: bearer,
    plan: { offset, search },
    ...(target ? { target } : {}),
  });
  const relative = (directId: string) => ({
    text: `≥ 70% of direct, added p50 ≤ 1 ms`,
    check: (c: CaseResult) => {
      const direct = cases.find((x) => x.id === directId);
      return (
        direct !== undefined && c.requestsPerSecond >= 0.7 * direct.requestsPerSecond && c.p50Ms - direct.p50Ms <= 1
      );
    },
  });
  const plan: Case[] = [
    { id: 'ceiling', title: ceilingTitle, url: ceilingUrl },
    { id: 'health', title: 'GET /api/health', url: `${base}/api/health` },
    {
      id: 'permissions',
      title: 'GET /api/realtime/permissions',
      url: `${base}/api/realtime/permissions`,
      headers: bearer,
      target: atLeast(15_000),
    },
    directory('users-first', 'first page', 0, undefined, atLeast(2_000, 15)),
    directory('users-offset', `offset ${half.toLocaleString('en-US')}`, half),
    directory(
      'users-search',
      `search "${fiftyTerm}" (${(await matches(fiftyTerm)).toLocaleString('en-US')} matches)`,
      0,
      fiftyTerm,
      atLeast(1_000, 30),
    ),
    directory('users-letter', `search "a" (${(await matches('a')).toLocaleString('en-US')} matches)`, 0, 'a'),
    {
      id: 'verify-success',
      title: 'POST /api/auth/email/verify, success (a prepared sign-up each)',
      url: `${base}/api/auth/email/verify?client_type=mobile`,
      method: 'POST',
      headers: json,
      setupRequest: (request) => ({
        ...request,
        body: JSON.stringify({ otp: VERIFY_CODE, email: prepared.signUps[nextSignUp++ % prepared.signUps.length] }),
      }),
      target: atLeast(500),
    },
    {
      id: 'verify-wrong',
      title: 'POST /api/auth/email/verify, wrong code',
      url: `${base}/api/auth/email/verify?client_type=mobile`,
      method: 'POST',
      headers: json,
      body: JSON.stringify({ otp: '000001', email: `sign-up-0@${PREPARED_DOMAIN}` }),
      expectStatus: 400,
      target: atLeast(2_000),
    },
    {
      id: 'sign-in',
      title: 'POST /api/auth/sessions (sign-in; scrypt by design)',
      url: `${base}/api/auth/sessions?client_type=mobile`,
      method: 'POST',
      headers: json,
      body: JSON.stringify(SIGN_IN),
    },
    {
      id: 'reset-send',
      title: 'POST /api/auth/email/send-reset-password (202 whatever the address)',
      url: `${base}/api/auth/email/send-reset-password`,
      method: 'POST',
      headers: json,
      setupRequest: (request) => ({
        ...request,
        body: JSON.stringify({ email: `send-reset-${nextResetSend++}@${PREPARED_DOMAIN}` }),
      }),
      expectStatus: 202,
    },
    {
      id: 'verification-send-unknown',
      title: 'POST /api/auth/email/send-verification (unknown address)',
      url: `${base}/api/auth/email/send-verification`,
      method: 'POST',
      headers: json,
      // A new address each time: the per-address cooldown never answers for the work (the per-ip
      // limit is raised, as for every case).
      setupRequest: (request) => ({
        ...request,
        body: JSON.stringify({ email: `send-verification-${nextVerificationSend++}@${PREPARED_DOMAIN}` }),
      }),
      expectStatus: 202,
    },
    {
      id: 'reset-exchange',
      title: 'POST /api/auth/email/exchange-reset-password-token (a prepared code each)',
      url: `${base}/api/auth/email/exchange-reset-password-token`,
      method: 'POST',
      headers: json,
      setupRequest: (request) => ({
        ...request,
        body: JSON.stringify({ email: cycle(prepared.resets, nextExchange++).email, code: EMAIL_CODE }),
      }),
    },
    {
      id: 'reset-password',
      title: 'POST /api/auth/email/reset-password (a prepared link token each; scrypt by design)',
      url: `${base}/api/auth/email/reset-password`,
      method: 'POST',
      headers: json,
      setupRequest: (request) => ({
        ...request,
        body: JSON.stringify({ otp: cycle(prepared.resets, nextReset++).token, newPassword: 'bench new password' }),
      }),
    },
    {
      id: 'otp-sign-in',
      title: 'POST /api/auth/sessions, method otp (a prepared code each; a new address becomes an account)',
      url: `${base}/api/auth/sessions?client_type=mobile`,
      method: 'POST',
      headers: json,
      setupRequest: (request) => ({
        ...request,
        body: JSON.stringify({ method: 'otp', email: cycle(prepared.otpSignIns, nextOtp++), otp: EMAIL_CODE }),
      }),
    },
    ...(['float', 'base64'] as const).flatMap((format): Case[] => [
      {
        id: `upstream-${format}`,
        title: `fake upstream called directly (${format}, 1536 dims)`,
        url: `${upstream}/embeddings`,
        method: 'POST',
        headers: json,
        body: embeddingsBody(format),
      },
      {
        id: `embeddings-${format}`,
        title: `POST /api/ai/embeddings via the service (${format}, 1536 dims)`,
        url: `${base}/api/ai/embeddings`,
        method: 'POST',
        headers: { ...json, ...bearer },
        body: embeddingsBody(format),
        target: relative(`upstream-${format}`),
      },
    ]),
    {
      id: 'embeddings-local',
      title: `POST /api/ai/embeddings, local/lexical-v1 (${countTokens(thousandTokens)}-token input)`,
      url: `${base}/api/ai/embeddings`,
      method: 'POST',
      headers: { ...json, ...bearer },
      body: JSON.stringify({ model: 'local/lexical-v1', input: thousandTokens }),
    },
  ];

  // --only A|B: the ceiling (every ratio needs it) and the cases whose title contains A or B.
  const wanted = only?.split('|');
  const selected = plan.filter((c, i) => i === 0 || wanted === undefined || wanted.some((w) => c.title.includes(w)));
  for (const [i, c] of selected.entries()) {
    progress(`[${i + 1}/${selected.length}] ${c.title}`);
    const { id, target, plan: statement, ...load } = c;
    const result = await runLoad({ ...load, connections, durationSeconds });
    // The requests still queued when the load stops (a slow search's, on PGlite's one connection)
    // finish before the next case starts, instead of being timed as part of it: a health check
    // waits its turn behind them (it gives up after 2 s with a 503: then it asks again).
    for (let tries = 0; tries < 30; tries++) {
      const health = await fetch(`${base}/api/health`);
      await health.arrayBuffer();
      if (health.ok) break;
    }
    const ceiling = cases[0]?.requestsPerSecond ?? result.requestsPerSecond;
    const measured: CaseResult = { ...result, id, ratio: result.requestsPerSecond / ceiling };
    if (target) {
      measured.target = target.text;
      if (judged) measured.met = target.check(measured);
    }
    cases.push(measured);
    if (statement && prepared.explain) {
      // Right after its load: the steady state it measured (the next search evicts its pages).
      plans[c.title] = await prepared.explain(userDirectoryQuery({ ...statement, limit: 10 }));
    }
  }
  if (nextSignUp > prepared.signUps.length) {
    progress(`warning: ${nextSignUp} verifications for ${prepared.signUps.length} prepared sign-ups`);
  }
  for (const [used, name] of [
    [Math.max(nextExchange, nextReset), 'password resets'],
    [nextOtp, 'passwordless sign-ins'],
  ] as const) {
    if (used > prepared.resets.length) progress(`warning: ${used} ${name} for ${prepared.resets.length} prepared`);
  }
  memory.stop();

  const resources: ResourceFigure[] = [
    { title: 'start to first 200, new DATA_DIR (PGlite)', value: start.emptyMs, unit: 'ms' },
    { title: 'start to first 200, existing DATA_DIR, empty compile cache', value: start.coldMs, unit: 'ms' },
    { title: 'start to first 200, existing DATA_DIR', value: start.warmMs, unit: 'ms' },
    {
      title: 'start to first 200, existing DATA_DIR, through `npm start` (npm included)',
      value: start.npmStartWarmMs,
      unit: 'ms',
      target: '≤ 1,500 ms',
      met: start.npmStartWarmMs <= 1500,
    },
    {
      title: 'idle resident memory (PGlite)',
      value: start.idleMiB,
      unit: 'MiB',
      target: '≤ 200 MB',
      met: start.idleMiB * 1.048576 <= 200,
    },
    { title: `idle resident memory (${kind}, after sign-in)`, value: serviceIdleMiB, unit: 'MiB' },
    { title: `peak resident memory under the load (${kind})`, value: memory.peakMiB(), unit: 'MiB' },
  ];
  const report: Report = {
    meta: {
      date: new Date().toISOString(),
      database: kind === 'postgres' ? 'PostgreSQL' : 'PGlite',
      databaseVersion: prepared.version,
      users: prepared.users,
      cores: os.cpus().length,
      cpu: os.cpus()[0]?.model ?? 'unknown',
      node: process.version,
      connections,
      durationSeconds,
      quick,
      wallSeconds: Math.round((Date.now() - wallStart) / 1000),
    },
    cases,
    resources,
    plans,
  };
  // A partial run (--only) prints its tables but keeps the full run's result files.
  const files = only === undefined ? writeReport(report) : [];
  console.log(`\n${header(report)}\n\n${markdownTables(report)}\n`);
  if (!judged) console.log('Targets are judged only for PostgreSQL, 10 connections and 1,000,000 users.');
  console.log(
    files.length > 0
      ? `Written: ${files.join(', ')} (${report.meta.wallSeconds} s in all)`
      : `Nothing written (--only) (${report.meta.wallSeconds} s in all)`,
  );
  const failing = cases.filter((c) => c.errors + c.non2xx > 0);
  if (failing.length > 0) {
    // A case that answers errors measures the wrong thing: the run fails (CI runs the quick mode).
    const what = (c: (typeof failing)[number]) =>
      `${c.title} (${[
        ...(c.errors > 0 ? [`${c.errors} errors or timeouts`] : []),
        ...Object.entries(c.unexpectedStatuses ?? {}).map(([status, n]) => `${n} × ${status}`),
      ].join(', ')})`;
    console.error(`unexpected errors or statuses in: ${failing.map(what).join('; ')}`);
    process.exitCode = 1;
    if (notForTheDocs.length === 0) progress('docs/performance.md is left as it is: a case answered errors');
  } else if (notForTheDocs.length === 0) {
    progress(`Latest figures rewritten: ${writeLatestFigures(report, files[0] as string)}`);
  }
} finally {
  await stopAll(started);
  await prepared.close();
}
