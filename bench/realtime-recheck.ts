/**
 * The re-check of live subscriptions at scale: one instance of the service (as `npm start` runs
 * it) on a fresh PostgreSQL database (bench_recheck), 100 users with one socket each, every socket
 * subscribed to 100 channels: 10,000 subscriptions and as many distinct (user, channel) questions
 * for the policies. A publisher publishes every 20 ms on a channel all 100 sockets hold. Each round starts
 * the instance afresh with one REALTIME_RECHECK_SECONDS value (default rounds: off, every second)
 * and reports publish-to-receipt latency, the re-check's passes and their time, and the instance's
 * event-loop delay (prom-client's, read from GET /metrics): what a pass costs delivery.
 *
 *   npm run bench:recheck                      # 15 s per round
 *   npm run bench:recheck -- --seconds 5 --rounds 0,1,30
 *
 * DATABASE_URL names the PostgreSQL server (default postgres://postgres@127.0.0.1:5432/postgres).
 * Writes bench/results/realtime-recheck.{md,json}.
 */
import { parseArgs } from 'node:util';
import { io, type Socket } from 'socket.io-client';
import type { RunningService } from '../scripts/lib/service-process.ts';
import { LatencyHistogram } from './lib/latency.ts';
import { recreateDatabase, signUpUsers, stopServices } from './lib/realtime-setup.ts';
import { writeResults } from './lib/report.ts';
import { adminAccessToken, startServiceInstance } from './lib/setup.ts';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '15' },
    rounds: { type: 'string', default: '0,1' },
  },
});
const seconds = Number(values.seconds);
const rounds = String(values.rounds).split(',').map(Number);
if (!(Number.isSafeInteger(seconds) && seconds > 0) || !rounds.every((r) => Number.isSafeInteger(r) && r >= 0)) {
  console.error('usage: npm run bench:recheck -- [--seconds 15] [--rounds 0,1]');
  process.exit(1);
}

const USERS = 100;
const CHANNELS_PER_SOCKET = 100;
const PUBLISH_EVERY_MS = 20;
const COMMON = 'recheck:common';
const METRICS_TOKEN = 'bench-recheck-metrics-token-0123456789abcdef0123';
const progress = (text: string) => process.stderr.write(`${text}\n`);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Round {
  recheckSeconds: number;
  subscriptions: number;
  published: number;
  deliveries: number;
  latency: { p50Ms: number; p99Ms: number; maxMs: number };
  passes: number;
  passMeanMs: number;
  eventLoopDelay: { p99Ms: number; maxMs: number };
}

/** The instance's metrics: re-check totals and the event-loop delay since the last scrape (prom-client resets it then). */
async function scrape(base: string) {
  const res = await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
  const text = await res.text();
  const value = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? Number.NaN);
  return {
    passes: value('realtime_recheck_duration_seconds_count'),
    passSeconds: value('realtime_recheck_duration_seconds_sum'),
    lagP99Ms: value('nodejs_eventloop_lag_p99_seconds') * 1000,
    lagMaxMs: value('nodejs_eventloop_lag_max_seconds') * 1000,
  };
}

function connect(base: string, token: string): Promise<Socket> {
  const socket = io(base, { transports: ['websocket'], auth: { token }, reconnection: false, forceNew: true });
  return new Promise((resolve, reject) => {
    socket.once('connect', () => resolve(socket));
    socket.once('connect_error', reject);
  });
}

async function subscribeAll(socket: Socket, channels: string[]): Promise<void> {
  for (const channel of channels) {
    const ack = (await socket.timeout(10_000).emitWithAck('realtime:subscribe', { channel })) as { ok: boolean };
    if (!ack.ok) throw new Error(`subscribe to ${channel} refused: ${JSON.stringify(ack)}`);
  }
}

const started: RunningService[] = [];
try {
  const serverUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
  const database = await recreateDatabase(serverUrl, 'bench_recheck');
  const results: Round[] = [];
  let tokens: string[] | undefined;
  for (const recheckSeconds of rounds) {
    await stopServices(started);
    started.length = 0;
    progress(`round: REALTIME_RECHECK_SECONDS=${recheckSeconds}; starting the instance`);
    const instance = await startServiceInstance(started, {
      DATABASE_URL: database.url,
      REQUIRE_EMAIL_VERIFICATION: 'false',
      ACCESS_TOKEN_TTL_SECONDS: '14400',
      REALTIME_PUBLISH_RATE: '1000000',
      REALTIME_RECHECK_SECONDS: String(recheckSeconds),
      METRICS_TOKEN,
    });
    if (tokens === undefined) {
      const adminToken = await adminAccessToken(instance.base);
      const res = await fetch(`${instance.base}/api/realtime/channels`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${adminToken}` },
        body: JSON.stringify({ pattern: 'recheck:%' }),
      });
      if (res.status !== 201) throw new Error(`channel: ${res.status} ${await res.text()}`);
      progress(`signing up ${USERS} users`);
      tokens = (await signUpUsers([instance.base], 'recheck', USERS, 4)).map((u) => u.accessToken);
    }
    const channels = [COMMON, ...Array.from({ length: CHANNELS_PER_SOCKET - 1 }, (_, i) => `recheck:c${i}`)];
    progress(`connecting ${USERS} sockets, ${CHANNELS_PER_SOCKET} channels each`);
    const sockets = await Promise.all(tokens.map((token) => connect(instance.base, token)));
    const t0 = performance.now();
    await Promise.all(sockets.map((s) => subscribeAll(s, channels)));
    progress(`${sockets.length * channels.length} subscriptions in ${((performance.now() - t0) / 1000).toFixed(1)} s`);

    const latency = new LatencyHistogram();
    let deliveries = 0;
    for (const socket of sockets) {
      socket.on('tick', (m: { at: number }) => {
        deliveries++;
        latency.record(performance.now() - m.at);
      });
    }
    const publisher = sockets[0] as Socket;
    await sleep(Math.max(1000, recheckSeconds * 1000));
    const before = await scrape(instance.base);
    const until = performance.now() + seconds * 1000;
    progress(`measuring for ${seconds} s`);
    let published = 0;
    let dueAt = performance.now();
    while (performance.now() < until) {
      publisher.emit('realtime:publish', { channel: COMMON, event: 'tick', payload: { at: performance.now() } });
      published++;
      dueAt += PUBLISH_EVERY_MS;
      await sleep(Math.max(0, dueAt - performance.now()));
    }
    await sleep(500);
    const after = await scrape(instance.base);
    const passes = after.passes - before.passes;
    const round: Round = {
      recheckSeconds,
      subscriptions: sockets.length * channels.length,
      published,
      deliveries,
      latency: { p50Ms: latency.quantile(0.5), p99Ms: latency.quantile(0.99), maxMs: latency.maxMs },
      passes,
      passMeanMs: passes > 0 ? ((after.passSeconds - before.passSeconds) * 1000) / passes : 0,
      eventLoopDelay: { p99Ms: after.lagP99Ms, maxMs: after.lagMaxMs },
    };
    progress(JSON.stringify(round));
    results.push(round);
    for (const s of sockets) s.close();
  }
  const f = (x: number) => (x < 10 ? x.toFixed(2) : x.toFixed(1));
  const md = [
    '# Re-check of live subscriptions: cost at 10,000 subscriptions',
    '',
    `One instance on PostgreSQL ${database.version}; ${USERS} sockets of ${USERS} users, ${CHANNELS_PER_SOCKET} channels each; a publish every ${PUBLISH_EVERY_MS} ms on a channel all of them hold; ${seconds} s measured per round; ${new Date().toISOString()}.`,
    '',
    `Reproduce with \`npm run bench:recheck -- --seconds ${seconds} --rounds ${rounds.join(',')}\`.`,
    '',
    '| REALTIME_RECHECK_SECONDS | subscriptions | passes | mean pass (ms) | deliveries / expected | latency p50 / p99 / max (ms) | event-loop delay p99 / max (ms) |',
    '|---|---:|---:|---:|---:|---:|---:|',
    ...results.map(
      (r) =>
        `| ${r.recheckSeconds === 0 ? 'off' : r.recheckSeconds} | ${r.subscriptions} | ${r.passes} | ${r.passes > 0 ? f(r.passMeanMs) : '-'} | ${r.deliveries} / ${r.published * USERS} | ${f(r.latency.p50Ms)} / ${f(r.latency.p99Ms)} / ${f(r.latency.maxMs)} | ${f(r.eventLoopDelay.p99Ms)} / ${f(r.eventLoopDelay.maxMs)} |`,
    ),
    '',
  ].join('\n');
  const files = writeResults('realtime-recheck', md, { date: new Date().toISOString(), seconds, results });
  console.log(`\n${md}\nWritten: ${files.join(', ')}`);
} finally {
  await stopServices(started);
}
