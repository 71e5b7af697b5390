/**
 * Password-hash flood: how much slower does another user's sign-in get while one /48 floods
 * sign-ups? The service runs behind TRUST_PROXY=true (the bench sends X-Forwarded-For). First the
 * unloaded figure: sequential sign-ins of one verified account (the ADMIN_EMAIL account) from
 * 2001:db8:ffff::1, one at a time after a warm-up. Then the same sign-ins while a flood of sign-ups
 * from 2001:db8:77::/48, spread over its /56s in turn, is offered at --rate sign-ups a second
 * (with at most --in-flight unanswered at once: an attacker's connection pool). Each sign-up is a
 * new address; a refused one (503, 429) is not retried, the flood just goes on at its rate.
 * Reported: median and 90th percentile (nearest rank, bench/lib/latency.ts) of the sign-in before
 * and under the flood, and their ratio (the unloaded run is the ceiling, taken in the same run),
 * and what the flood got.
 *
 * The per-IP sign-up limit is raised to 1,000,000 so that the flood is not stopped by it (with the
 * default 10 per /56 per 5 min, a /48's 256 /56s still get 2,560 sign-ups per 5 min, about 8.5 a
 * second, which alone keeps one core hashing); the sign-in limit is raised for the victim's samples.
 *
 *   npm run bench:hash-flood                           # PostgreSQL (DATABASE_URL, default loopback)
 *   npm run bench:hash-flood -- --database pglite
 *   npm run bench:hash-flood -- --root /tmp/old-tree   # measure another checkout (its src/server.ts)
 *   npm run bench:hash-flood -- --samples 40 --rate 200 --in-flight 128 --networks 256
 *
 * Runs the service from TypeScript sources (node src/server.ts, as `npm start`) in development
 * mode without SMTP_URL (mail to the log, LOG_LEVEL=error keeps it quiet) on a new, empty
 * database that is removed afterwards. Prints a Markdown report; with --out, writes it there too.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Client, Pool } from 'undici';
import { freePort, projectRoot, SERVICE_NODE_FLAGS, waitFor200 } from '../scripts/lib/service-process.ts';
import { LatencyHistogram } from './lib/latency.ts';
import { newScratchDatabase, type ScratchDatabase } from './lib/scratch-database.ts';

const usage =
  'usage: npm run bench:hash-flood -- [--database postgres|pglite] [--root DIR] [--samples N] [--warmup N] [--rate N] [--in-flight N] [--networks N] [--out FILE]';
const { values } = parseArgs({
  options: {
    database: { type: 'string', default: 'postgres' },
    root: { type: 'string', default: projectRoot },
    samples: { type: 'string', default: '30' },
    warmup: { type: 'string', default: '5' },
    rate: { type: 'string', default: '200' },
    'in-flight': { type: 'string', default: '128' },
    networks: { type: 'string', default: '256' },
    out: { type: 'string' },
  },
});
const whole = (value: string, min: number, max: number): number => {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < min || n > max) {
    console.error(usage);
    process.exit(1);
  }
  return n;
};
const kind = values.database === 'pglite' ? 'pglite' : 'postgres';
const root = path.resolve(values.root);
const samples = whole(values.samples, 5, 10_000);
const warmup = whole(values.warmup, 0, 1000);
const rate = whole(values.rate, 1, 100_000);
const inFlightMax = whole(values['in-flight'], 1, 10_000);
const networks = whole(values.networks, 1, 256);
const progress = (text: string) => process.stderr.write(`${text}\n`);

const VICTIM = { email: 'victim@example.com', password: 'victim-password-for-the-bench' };
const VICTIM_IP = '2001:db8:ffff::1';
/** The /56s of 2001:db8:77::/48: 2001:db8:77:XX00::/56. */
const floodAddress = (i: number) => `2001:db8:77:${(i % networks).toString(16).padStart(2, '0')}00::${(i % 65535) + 1}`;
const tag = randomBytes(4).toString('hex');

const ms = (x: number) => `${x.toFixed(1)} ms`;

let child: ChildProcess | undefined;
let database: ScratchDatabase | undefined;
let http: Pool | undefined;
let victimHttp: Client | undefined;
let output = '';
try {
  database = await newScratchDatabase(kind, 'hash_flood');
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  progress(`starting ${root}/src/server.ts on a new ${kind} database`);
  child = spawn(process.execPath, [...SERVICE_NODE_FLAGS, 'src/server.ts'], {
    cwd: root,
    env: {
      PATH: process.env.PATH ?? '',
      NODE_ENV: 'development',
      LOG_LEVEL: 'error',
      PORT: String(port),
      TRUST_PROXY: 'true',
      ADMIN_EMAIL: VICTIM.email,
      ADMIN_PASSWORD: VICTIM.password,
      RATE_LIMIT_SIGN_UP: '1000000',
      RATE_LIMIT_SIGN_IN: '1000000',
      ...database.env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout?.on('data', (d) => {
    output += String(d);
  });
  child.stderr?.on('data', (d) => {
    output += String(d);
  });
  await waitFor200(`${base}/api/health`, 120_000);
  // The flood's connections, and one of the victim's own (so that the flood cannot take it).
  http = new Pool(base, { connections: inFlightMax, pipelining: 1, headersTimeout: 300_000, bodyTimeout: 300_000 });
  victimHttp = new Client(base, { pipelining: 1, headersTimeout: 300_000, bodyTimeout: 300_000 });
  const pool = http;
  const victimClient = victimHttp;

  const post = async (pathAndQuery: string, ip: string, payload: object, via: Pool | Client = pool) => {
    const res = await via.request({
      method: 'POST',
      path: pathAndQuery,
      headers: { 'content-type': 'application/json', 'x-forwarded-for': ip },
      body: JSON.stringify(payload),
    });
    await res.body.dump();
    return res.statusCode;
  };
  /** One sign-in of the victim, timed from sending to the end of the answer. */
  const signIn = async (): Promise<number> => {
    const t0 = performance.now();
    const status = await post('/api/auth/sessions?client_type=mobile', VICTIM_IP, VICTIM, victimClient);
    const took = performance.now() - t0;
    if (status !== 200) throw new Error(`the victim's sign-in answered ${status}`);
    return took;
  };
  const measure = async (n: number): Promise<number[]> => {
    const out: number[] = [];
    for (let i = 0; i < n; i++) out.push(await signIn());
    return out;
  };

  progress(`unloaded: ${warmup} warm-up and ${samples} timed sign-ins`);
  await measure(warmup);
  const unloaded = await measure(samples);

  // The flood: `rate` new sign-ups a second, at most inFlightMax unanswered.
  const flood = { sent: 0, skipped: 0, byStatus: new Map<number | string, number>(), running: true };
  let inFlight = 0;
  const tally = (key: number | string) => flood.byStatus.set(key, (flood.byStatus.get(key) ?? 0) + 1);
  const floodStart = performance.now();
  const floodLoop = (async () => {
    while (flood.running) {
      const due = Math.floor(((performance.now() - floodStart) / 1000) * rate);
      while (flood.sent + flood.skipped < due) {
        if (inFlight >= inFlightMax) {
          flood.skipped++;
          continue;
        }
        const i = flood.sent++;
        inFlight++;
        post('/api/auth/users', floodAddress(i), {
          email: `flood-${tag}-${i}@example.com`,
          password: `flood-password-${i}`,
        })
          .then(tally, () => tally('error'))
          .finally(() => {
            inFlight--;
          });
      }
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  })();
  progress(`flood: ${rate} sign-ups/s from ${networks} /56s of one /48, at most ${inFlightMax} in flight`);
  await new Promise((resolve) => setTimeout(resolve, 3000));
  const loaded = await measure(samples);
  flood.running = false;
  await floodLoop;
  const floodSeconds = (performance.now() - floodStart) / 1000;
  while (inFlight > 0) await new Promise((resolve) => setTimeout(resolve, 20));

  const before = LatencyHistogram.of(unloaded);
  const under = LatencyHistogram.of(loaded);
  const unloadedMedian = before.quantile(0.5);
  const loadedMedian = under.quantile(0.5);
  const statuses = [...flood.byStatus.entries()].sort().map(([k, v]) => `${k}: ${v}`);
  const report = [
    `# Password-hash flood (${kind})`,
    '',
    `- service: ${root} (Node ${process.version}, ${os.availableParallelism()} cores, load average ${os
      .loadavg()
      .map((x) => x.toFixed(2))
      .join(' / ')} at the end)`,
    `- victim: sign-in of one verified account from ${VICTIM_IP}, one at a time, ${samples} samples each`,
    `- flood: ${rate} sign-ups/s offered from ${networks} /56s of 2001:db8:77::/48, at most ${inFlightMax} in flight, for ${floodSeconds.toFixed(1)} s; ${flood.sent} sent, ${flood.skipped} not sent (in-flight cap); answers ${statuses.join(', ')}`,
    '',
    '| sign-in | median | p90 | max |',
    '|---|---|---|---|',
    `| unloaded (ceiling) | ${ms(unloadedMedian)} | ${ms(before.quantile(0.9))} | ${ms(before.maxMs)} |`,
    `| under the flood | ${ms(loadedMedian)} | ${ms(under.quantile(0.9))} | ${ms(under.maxMs)} |`,
    '',
    `**Ratio (median under flood / unloaded median): ${(loadedMedian / unloadedMedian).toFixed(2)}x**; p90 ratio ${(under.quantile(0.9) / before.quantile(0.9)).toFixed(2)}x`,
    '',
  ].join('\n');
  process.stdout.write(report);
  if (values.out !== undefined) writeFileSync(values.out, report);
} catch (err) {
  progress(`failed: ${(err as Error).message}\n--- service output ---\n${output.slice(-4000)}`);
  process.exitCode = 1;
} finally {
  await http?.destroy();
  await victimHttp?.destroy();
  if (child !== undefined && child.exitCode === null) {
    const exited = new Promise((resolve) => child?.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  }
  await database?.drop();
}
