/**
 * The realtime benchmark: two instances of the service (run as `npm start` runs it) on one fresh
 * PostgreSQL database (bench_realtime, dropped and made again each run), joined by the socket.io
 * adapter chosen, with N subscribers of one channel split evenly between them and a few publishers
 * (each subscribed too, half on each instance) publishing with a bounded window of unacknowledged
 * publishes.
 *
 *   npm run bench:realtime                          # PostgreSQL adapter, 100 then 1,000 subscribers, 20 s each
 *   npm run bench:realtime -- --quick               # 5 s each, 1 s warm-up
 *   npm run bench:realtime -- --adapter redis       # the Redis adapter (redis://127.0.0.1:6379)
 *   npm run bench:realtime -- --subscribers 100,1000,2000 --publishers 4 --window 8 --processes 2
 *   npm run bench:realtime -- --subscribers 1000 --recheck 0,1   # the re-check's cost: off, then every second
 *   npm run bench:realtime -- --no-ceiling          # without the bare socket.io runs (the ceiling)
 *
 * Per scenario: accepted publishes/s, deliveries/s, loss (every acknowledged message must reach
 * every subscriber), per-publisher order and the same order of message ids at every subscriber,
 * publish-to-receipt latency (CLOCK_MONOTONIC on both sides), memory per connection (RSS of both
 * instances before and after connecting the subscribers), the CPU each process used, and the
 * re-check of live subscriptions (passes and their mean time, from the instances' metrics). With
 * --recheck, every scenario runs once per REALTIME_RECHECK_SECONDS value given, on instances
 * started afresh with it.
 *
 * The ceiling: before each scenario (of the first round), the same subscribers and publishers run
 * against two bare socket.io servers (bench/bare-realtime-server.ts: no tokens, policies, database
 * or history, one order for every subscriber), and the service's publishes/s and deliveries/s are
 * also given as a ratio to theirs: what the machine allows socket.io itself on that run.
 *
 * Everything runs on the one machine: the two instances, PostgreSQL (and Redis), the subscribers'
 * process(es) and this process (the publishers). Two subscriber processes by default (--processes N
 * for another number): with one, the receivers got a third of the 2-core machine against the two
 * instances' two thirds, and once the service delivered faster than that one process could read
 * (a closed loop at 1,000 subscribers, 288,000 deliveries/s sent, about 200,000 read), they fell up
 * to 15 s behind, until engine.io's heartbeat cut one off; with two, the receivers and the instances
 * share the machine evenly and keep up (2026-11-29).
 * DATABASE_URL names the PostgreSQL server (default postgres://postgres@127.0.0.1:5432/postgres);
 * BENCH_NODE_OPTIONS is given to the instances and the bare servers only (`--cpu-prof --cpu-prof-dir=DIR`
 * profiles them).
 * Writes bench/results/realtime-<adapter>[-quick].{md,json}; exits 1 on any loss, reordering or
 * error (a missed throughput or latency target is reported, not fatal).
 */
import os from 'node:os';
import { parseArgs } from 'node:util';
import { NPM_START, type RunningService, residentMiB } from '../scripts/lib/service-process.ts';
import { LatencyHistogram } from './lib/latency.ts';
import { Publisher, type PublisherFigures, SubscriberPool } from './lib/realtime-clients.ts';
import { measureCpu } from './lib/realtime-resources.ts';
import {
  type Adapter,
  type BenchUser,
  commitOrder,
  createChannel,
  type Instance,
  instanceEnv,
  REDIS_URL,
  recreateDatabase,
  signUpUsers,
  sourceState,
  startCeiling,
  startInstances,
  stopServices,
} from './lib/realtime-setup.ts';
import { monotonicMs, type SubscriberSpec } from './lib/realtime-shared.ts';
import {
  type RealtimeReport,
  realtimeHeader,
  type ScenarioResult,
  scenarioTable,
  type TargetResult,
  targetTable,
  writeRealtimeReport,
} from './lib/report.ts';

const usage =
  'usage: npm run bench:realtime -- [--quick] [--adapter postgres|redis] [--duration S] [--warmup S]\n' +
  '       [--subscribers 100,1000] [--rate 0,0] [--publishers 4] [--window 8] [--processes 2] [--accounts 100]\n' +
  '       [--concurrency 20] [--recheck 0,1] [--no-ceiling]   (--rate: publishes/s offered per scenario, all publishers together; 0 = as fast as acks allow;\n' +
  '       --recheck: REALTIME_RECHECK_SECONDS values, each a round of every scenario; the server default when not given)';

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    adapter: { type: 'string', default: 'postgres' },
    duration: { type: 'string' },
    warmup: { type: 'string' },
    subscribers: { type: 'string', default: '100,1000' },
    rate: { type: 'string' },
    publishers: { type: 'string', default: '4' },
    window: { type: 'string', default: '8' },
    processes: { type: 'string', default: '2' },
    accounts: { type: 'string', default: '100' },
    concurrency: { type: 'string', default: '20' },
    recheck: { type: 'string' },
    ceiling: { type: 'boolean' },
  },
  allowNegative: true,
});
const quick = values.quick === true;
/** Whether each scenario is run against bare socket.io first (the ceiling). */
const withCeiling = values.ceiling ?? true;
const adapter = values.adapter as Adapter;
const durationSeconds = Number(values.duration ?? (quick ? 5 : 20));
const warmUpSeconds = Number(values.warmup ?? (quick ? 1 : 3));
const scenarios = String(values.subscribers).split(',').map(Number);
/** Offered publishes/s per scenario (0: a closed loop); one value applies to every scenario. */
const rateList = values.rate === undefined ? [0] : String(values.rate).split(',').map(Number);
const rates = scenarios.map((_, i) => rateList[rateList.length === 1 ? 0 : i] ?? Number.NaN);
const publisherCount = Number(values.publishers);
const window = Number(values.window);
const processCount = Number(values.processes);
const accountCount = Number(values.accounts);
const concurrency = Number(values.concurrency);
/** REALTIME_RECHECK_SECONDS per round; undefined: the server's default. */
const recheckRounds: (number | undefined)[] =
  values.recheck === undefined ? [undefined] : String(values.recheck).split(',').map(Number);
const positive = (x: number) => Number.isSafeInteger(x) && x > 0;
if (
  !(adapter === 'postgres' || adapter === 'redis') ||
  ![durationSeconds, publisherCount, window, processCount, accountCount, concurrency, ...scenarios].every(positive) ||
  !(Number.isSafeInteger(warmUpSeconds) && warmUpSeconds >= 0) ||
  !rates.every((r) => Number.isSafeInteger(r) && r >= 0) ||
  !(rateList.length === 1 || rateList.length === scenarios.length) ||
  !recheckRounds.every((r) => r === undefined || (Number.isSafeInteger(r) && r >= 0)) ||
  publisherCount > 999
) {
  console.error(usage);
  process.exit(1);
}

const DATABASE = 'bench_realtime';
/** Lets the benchmark read the instances' metrics (the re-check's passes). */
const METRICS_TOKEN = 'bench-realtime-metrics-token-0123456789abcdef';
/** Access tokens outlive any run (the service disconnects a socket whose token expires). */
const TOKEN_TTL_SECONDS = 4 * 3600;
const wallStart = Date.now();
const progress = (text: string) => process.stderr.write(`${text}\n`);
const sleep = (msTime: number) => new Promise((r) => setTimeout(r, msTime));
const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
const addCounts = (into: Record<string, number>, from: Record<string, number>) => {
  for (const [k, v] of Object.entries(from)) into[k] = (into[k] ?? 0) + v;
  return into;
};

const started: RunningService[] = [];
/** Scenarios run so far, every round included. */
let scenarioRuns = 0;
let pool: SubscriberPool | undefined;
let publishers: Publisher[] = [];
let cleaning: Promise<void> | undefined;
/** Closes every client, ends the subscriber processes and stops the instances (once). */
function cleanUp(): Promise<void> {
  cleaning ??= (async () => {
    for (const p of publishers) p.close();
    await pool?.stop().catch(() => {});
    await stopServices(started);
  })();
  return cleaning;
}
process.on('SIGINT', () => {
  progress('\ninterrupted: closing the clients and stopping the instances');
  void cleanUp().finally(() => process.exit(130));
});

/** Waits until no presence event has arrived for `quietMs` (the join/leave storm of a connect phase). */
async function settle(p: SubscriberPool, quietMs = 1000, maxMs = 120_000): Promise<void> {
  const until = monotonicMs() + maxMs;
  while (monotonicMs() < until) {
    const s = await p.status();
    if (monotonicMs() - s.lastPresenceAt >= quietMs) return;
    await sleep(250);
  }
  progress(`warning: presence events still arriving after ${maxMs / 1000} s`);
}

interface Context {
  databaseUrl: string;
  instances: [Instance, Instance];
  subscriberUsers: BenchUser[];
  publisherUsers: BenchUser[];
  pool: SubscriberPool;
  /** The bare socket.io servers, when the ceiling is measured. */
  ceiling: [Instance, Instance] | undefined;
}

async function runScenario(
  ctx: Context,
  scenarioIndex: number,
  subscriberCount: number,
  recheckSeconds: number | undefined,
  against: 'service' | 'ceiling' = 'service',
): Promise<ScenarioResult> {
  const { pool } = ctx;
  const isCeiling = against === 'ceiling';
  const instances = isCeiling ? (ctx.ceiling as [Instance, Instance]) : ctx.instances;
  const tag = `[${subscriberCount.toLocaleString('en-US')} subscribers${isCeiling ? ', bare socket.io' : ''}${recheckSeconds === undefined ? '' : `, re-check ${recheckSeconds === 0 ? 'off' : `every ${recheckSeconds} s`}`}]`;
  const problems: string[] = [];
  const pids = instances.map((i) => i.pid);

  await sleep(1000);
  const rssBefore = pids.map(residentMiB) as [number, number];
  const specs: SubscriberSpec[] = Array.from({ length: subscriberCount }, (_, i) => ({
    index: i,
    instance: i % 2,
    url: (instances[i % 2] as Instance).base,
    token: (ctx.subscriberUsers[i % ctx.subscriberUsers.length] as BenchUser).accessToken,
  }));
  progress(
    `${tag} connecting and subscribing ${subscriberCount} subscribers (${pool.processes.length} processes, ${concurrency} at a time)`,
  );
  const connectTicker = setInterval(
    () => progress(`${tag}   ${pool.connectedSoFar()}/${subscriberCount} connected`),
    2000,
  );
  const connected = await pool.connect(specs, concurrency).finally(() => clearInterval(connectTicker));
  if (connected.failures.length > 0) {
    problems.push(`${connected.failures.length} subscribers failed to connect or subscribe`);
    progress(`${tag} ${connected.failures.length} failures, first: ${JSON.stringify(connected.failures[0])}`);
  }
  progress(`${tag} connected in ${connected.seconds.toFixed(1)} s; waiting for the presence events to settle`);
  await settle(pool);
  await sleep(1000);
  const rssAfter = pids.map(residentMiB) as [number, number];
  const liveSubscribers = subscriberCount - connected.failures.length;

  // Publisher ids differ in every scenario of the run (the checks read every message of the channel).
  const base = (scenarioRuns + 1) * 1000;
  scenarioRuns++;
  publishers = Array.from(
    { length: publisherCount },
    (_, j) =>
      new Publisher(
        base + j,
        j % 2,
        (instances[j % 2] as Instance).base,
        (ctx.publisherUsers[j] as BenchUser).accessToken,
      ),
  );
  progress(`${tag} connecting ${publisherCount} publishers (subscribed to the channel too)`);
  await Promise.all(publishers.map((p) => p.connect()));
  await settle(pool);

  const fromMs = monotonicMs() + warmUpSeconds * 1000;
  const toMs = fromMs + durationSeconds * 1000;
  await pool.measure(
    fromMs,
    toMs,
    publishers.map((p) => p.id),
  );
  const cpuGroups = [
    // In a ceiling run, A and B are the bare servers.
    { title: 'instance A', pids: () => [pids[0] as number] },
    { title: 'instance B', pids: () => [pids[1] as number] },
    { title: 'PostgreSQL (all backends)', comm: 'postgres' },
    ...(adapter === 'redis' ? [{ title: 'Redis', comm: 'redis-server' }] : []),
    { title: `subscriber processes (${pool.processes.length})`, pids: () => pool.pids },
    { title: 'main process (publishers)', pids: () => [process.pid] },
  ];
  let cpu: ReturnType<ReturnType<typeof measureCpu>['stop']> | undefined;
  let cpuMeter: ReturnType<typeof measureCpu> | undefined;
  const cpuStart = setTimeout(
    () => {
      cpuMeter = measureCpu(cpuGroups);
    },
    Math.max(0, fromMs - monotonicMs()),
  );
  const cpuStop = setTimeout(
    () => {
      cpu = cpuMeter?.stop();
    },
    Math.max(0, toMs - monotonicMs()),
  );

  progress(
    `${tag} publishing: ${publisherCount} publishers × window ${window}${rates[scenarioIndex] ? `, offered ${rates[scenarioIndex]} publishes/s` : ''}, ${warmUpSeconds} s warm-up + ${durationSeconds} s measured`,
  );
  const recheckBefore = isCeiling ? { count: 0, sum: 0 } : await recheckTotals(instances);
  const runStart = monotonicMs();
  let lastReceived = 0;
  let lastAccepted = 0;
  let lastAt = runStart;
  const every = Math.max(1, Math.round((warmUpSeconds + durationSeconds) / 10)) * 1000;
  const ticker = setInterval(() => {
    void pool.status().then(
      (s) => {
        const now = monotonicMs();
        const accepted = sum(publishers.map((p) => p.figures.accepted));
        const seconds = (now - lastAt) / 1000;
        const errors =
          sum(publishers.map((p) => sum(Object.values(p.figures.errors)) + sum(Object.values(p.figures.refused)))) +
          s.disconnects +
          s.realtimeErrors;
        progress(
          `${tag}   ${((now - runStart) / 1000).toFixed(0).padStart(3)} s: ${Math.round((accepted - lastAccepted) / seconds).toLocaleString('en-US')} publishes/s, ${Math.round((s.received - lastReceived) / seconds).toLocaleString('en-US')} deliveries/s, ${s.connected}/${liveSubscribers} subscribers connected, ${errors} errors`,
        );
        lastReceived = s.received;
        lastAccepted = accepted;
        lastAt = now;
      },
      () => {},
    );
  }, every);
  const perPublisher = (rates[scenarioIndex] ?? 0) / publisherCount;
  await Promise.all(publishers.map((p) => p.run(window, fromMs, toMs, perPublisher))).finally(() =>
    clearInterval(ticker),
  );
  clearTimeout(cpuStart);
  clearTimeout(cpuStop);
  const recheckAfter = isCeiling ? recheckBefore : await recheckTotals(instances);
  const recheckPasses = recheckAfter.count - recheckBefore.count;
  cpu ??= cpuMeter?.stop() ?? measureCpu(cpuGroups).stop();
  const warnings: string[] = [];
  const elsewhere = cpu.groups.at(-1)?.percentOfCore ?? 0;
  if (elsewhere > 20) {
    warnings.push(
      `processes outside the benchmark used ${elsewhere}% of a core during the measured window: the rates and latencies are not representative`,
    );
    progress(`${tag} warning: ${warnings.at(-1)}`);
  }

  // Drain: every accepted message must reach every subscriber still connected.
  const accepted = sum(publishers.map((p) => p.figures.accepted));
  const expected = accepted * liveSubscribers;
  const drainStart = monotonicMs();
  let status = await pool.status();
  let lastProgressAt = drainStart;
  let seen = status.received;
  // A backlog may take long to drain: wait while deliveries keep arriving (10 s without any ends it).
  while (
    status.received < expected &&
    monotonicMs() - lastProgressAt < 10_000 &&
    monotonicMs() - drainStart < 600_000
  ) {
    await sleep(100);
    status = await pool.status();
    if (status.received > seen) {
      seen = status.received;
      lastProgressAt = monotonicMs();
    }
  }
  await sleep(500); // anything extra (duplicates) still in flight
  const drainSeconds = (monotonicMs() - drainStart) / 1000;
  progress(`${tag} drained in ${drainSeconds.toFixed(1)} s; collecting`);

  const acked = Object.fromEntries(publishers.map((p) => [String(p.id), p.acked.toBase64()]));
  const { subscribers, latency } = await pool.collect(acked);
  const expectedChecksum = publishers.reduce((c, p) => (c + p.checksum) >>> 0, 0);

  // Order of message ids: every subscriber that got exactly the acknowledged messages should have seen them in one order.
  const complete = subscribers.filter(
    (s) => s.missing === 0 && s.unexpected === 0 && s.duplicates === 0 && s.malformed === 0,
  );
  const orders = new Map<string, number>();
  for (const s of complete) orders.set(s.order, (orders.get(s.order) ?? 0) + 1);
  const majority = Math.max(0, ...orders.values());
  const messageIdMismatches = complete.filter((s) => s.checksum !== expectedChecksum).length;
  // Bare socket.io keeps no history: its one order is the majority's.
  const committed = isCeiling
    ? { count: accepted, order: [...orders].find(([, n]) => n === majority)?.[0] ?? '' }
    : await commitOrder(
        ctx.databaseUrl,
        publishers.map((p) => p.id),
      );
  const offCommitOrder = complete.filter((s) => s.order !== committed.order).length;

  const figures: PublisherFigures[] = publishers.map((p) => p.figures);
  const ackLatency = new LatencyHistogram();
  for (const p of publishers) ackLatency.merge(p.ackLatency.toJSON());
  const refused = figures.reduce((r, f) => addCounts(r, f.refused), {} as Record<string, number>);
  const publishErrors = figures.reduce((r, f) => addCounts(r, f.errors), {} as Record<string, number>);
  const disconnects: Record<string, number> = {};
  const realtimeErrors: Record<string, number> = {};
  for (const s of subscribers) {
    for (const reason of s.disconnectReasons)
      disconnects[`subscriber: ${reason}`] = (disconnects[`subscriber: ${reason}`] ?? 0) + 1;
    for (const [code, k] of Object.entries(s.realtimeErrors))
      realtimeErrors[`subscriber ${code}`] = (realtimeErrors[`subscriber ${code}`] ?? 0) + k;
  }
  for (const f of figures) {
    for (const reason of f.disconnectReasons)
      disconnects[`publisher: ${reason}`] = (disconnects[`publisher: ${reason}`] ?? 0) + 1;
    for (const [code, k] of Object.entries(f.realtimeErrors))
      realtimeErrors[`publisher ${code}`] = (realtimeErrors[`publisher ${code}`] ?? 0) + k;
  }

  const received = sum(subscribers.map((s) => s.received));
  const lost = sum(subscribers.map((s) => s.missing));
  const unexpected = sum(subscribers.map((s) => s.unexpected));
  const duplicates = sum(subscribers.map((s) => s.duplicates));
  const malformed = sum(subscribers.map((s) => s.malformed));
  const inWindow = sum(subscribers.map((s) => s.inWindow));
  const violations = sum(subscribers.map((s) => s.orderViolations));
  const acceptedInWindow = sum(figures.map((f) => f.acceptedInWindow));

  if (lost > 0)
    problems.push(
      `${lost} acknowledged deliveries lost (${subscribers.filter((s) => s.missing > 0).length} subscribers affected)`,
    );
  if (unexpected + duplicates + malformed > 0)
    problems.push(`${unexpected} unexpected, ${duplicates} duplicate and ${malformed} malformed deliveries`);
  if (violations > 0)
    problems.push(
      `${violations} per-publisher order violations (${subscribers.filter((s) => s.orderViolations > 0).length} subscribers)` +
        (orders.size === 1 && offCommitOrder === 0
          ? ' (every subscriber saw the commit order: publishes of one socket in flight together were committed in another order than sent)'
          : ''),
    );
  if (orders.size > 1)
    problems.push(
      `${orders.size} different message-id orders among ${complete.length} complete subscribers (${complete.length - majority} off the majority)`,
    );
  if (offCommitOrder > 0)
    problems.push(
      `${offCommitOrder} of ${complete.length} complete subscribers saw another order than the commit order`,
    );
  if (committed.count !== accepted)
    problems.push(`${committed.count} messages committed for ${accepted} accepted publishes`);
  if (messageIdMismatches > 0)
    problems.push(`${messageIdMismatches} subscribers saw message ids other than the acks named`);
  if (Object.keys(refused).length > 0) problems.push(`refused publishes: ${JSON.stringify(refused)}`);
  if (Object.keys(publishErrors).length > 0) problems.push(`publish errors: ${JSON.stringify(publishErrors)}`);
  if (Object.keys(disconnects).length > 0) problems.push(`disconnects: ${JSON.stringify(disconnects)}`);
  if (Object.keys(realtimeErrors).length > 0) problems.push(`realtime:error events: ${JSON.stringify(realtimeErrors)}`);
  if (latency.negative > 0) problems.push(`${latency.negative} negative latencies (clock)`);

  const perSecond = acceptedInWindow / durationSeconds;
  const deliveriesPerSecond = inWindow / durationSeconds;
  const p99 = latency.quantile(0.99);
  const closedLoop = (rates[scenarioIndex] ?? 0) === 0;
  const targets: TargetResult[] = [];
  if (!isCeiling) {
    if (scenarioIndex === 0 && closedLoop)
      targets.push({
        title: 'accepted publishes/s',
        target: '≥ 1,000',
        value: Math.round(perSecond).toLocaleString('en-US'),
        met: perSecond >= 1000,
      });
    // A closed loop at 1,000 subscribers: as many as the machine allows; paced, every offered message.
    const deliveriesTarget = closedLoop ? 110_000 : 50_000;
    if (subscriberCount >= 1000)
      targets.push({
        title: 'deliveries/s',
        target: `≥ ${deliveriesTarget.toLocaleString('en-US')}`,
        value: Math.round(deliveriesPerSecond).toLocaleString('en-US'),
        met: deliveriesPerSecond >= deliveriesTarget,
      });
    targets.push({
      title: 'publish-to-receipt p99',
      target: '≤ 100 ms',
      value: `${p99.toFixed(1)} ms`,
      met: p99 <= 100,
    });
  }

  const result: ScenarioResult = {
    subscribers: subscriberCount,
    ...(isCeiling ? { ceiling: true } : {}),
    perInstance: [specs.filter((s) => s.instance === 0).length, specs.filter((s) => s.instance === 1).length],
    publishers: publisherCount,
    window,
    offeredPerSecond: rates[scenarioIndex] ?? 0,
    measuredSeconds: durationSeconds,
    connect: {
      seconds: connected.seconds,
      failureCount: connected.failures.length,
      failures: connected.failures.slice(0, 20),
    },
    publishes: {
      sent: sum(figures.map((f) => f.sent)),
      accepted,
      acceptedInWindow,
      perSecond,
      refused,
      errors: publishErrors,
      acksOutOfOrder: sum(figures.map((f) => f.acksOutOfOrder)),
      ackP50Ms: ackLatency.quantile(0.5),
      ackP99Ms: ackLatency.quantile(0.99),
    },
    deliveries: {
      expected,
      received,
      lost,
      unexpected,
      duplicates,
      malformed,
      inWindow,
      perSecond: deliveriesPerSecond,
      drainSeconds,
    },
    latency: {
      p50Ms: latency.quantile(0.5),
      p99Ms: p99,
      maxMs: latency.maxMs,
      samples: latency.count,
      negative: latency.negative,
    },
    order: {
      perPublisherViolations: violations,
      subscribersWithViolations: subscribers.filter((s) => s.orderViolations > 0).length,
      subscribersCompared: complete.length,
      distinctOrders: orders.size,
      subscribersOffMajorityOrder: complete.length - majority,
      messageIdMismatches,
      subscribersOffCommitOrder: offCommitOrder,
      committedMessages: committed.count,
    },
    disconnects,
    realtimeErrors,
    memory: {
      rssBeforeMiB: rssBefore,
      rssAfterMiB: rssAfter,
      perConnectionKiB: ((sum(rssAfter) - sum(rssBefore)) * 1024) / subscriberCount,
    },
    cpu,
    recheck: {
      seconds: recheckSeconds ?? null,
      passes: recheckPasses,
      meanMs: recheckPasses > 0 ? ((recheckAfter.sum - recheckBefore.sum) * 1000) / recheckPasses : 0,
    },
    targets,
    problems,
    warnings,
  };
  progress(
    `${tag} ${Math.round(perSecond).toLocaleString('en-US')} publishes/s, ${Math.round(deliveriesPerSecond).toLocaleString('en-US')} deliveries/s, p50 ${latency.quantile(0.5).toFixed(1)} ms, p99 ${p99.toFixed(1)} ms, ${lost} lost, ${problems.length === 0 ? 'no problems' : problems.join('; ')}`,
  );

  progress(`${tag} closing the connections`);
  for (const p of publishers) p.close();
  publishers = [];
  await pool.closeConnections();
  await settle(pool);
  return result;
}

const loadAverageBefore = os.loadavg()[0] ?? 0;
progress(
  `load average ${os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(' ')}`,
);
const source = sourceState();

const serverUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
progress(`making a fresh database ${DATABASE}`);
const database = await recreateDatabase(serverUrl, DATABASE);

/** The re-check passes both instances have made so far, and the seconds they took (from GET /metrics). */
async function recheckTotals(instances: readonly Instance[]): Promise<{ count: number; sum: number }> {
  let count = 0;
  let sum = 0;
  for (const instance of instances) {
    const res = await fetch(`${instance.base}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
    const text = await res.text();
    count += Number(/^realtime_recheck_duration_seconds_count (\S+)$/m.exec(text)?.[1] ?? 0);
    sum += Number(/^realtime_recheck_duration_seconds_sum (\S+)$/m.exec(text)?.[1] ?? 0);
  }
  return { count, sum };
}

try {
  const results: ScenarioResult[] = [];
  let instances: [Instance, Instance] | undefined;
  let users: { subscriberUsers: BenchUser[]; publisherUsers: BenchUser[] } | undefined;
  for (const recheckSeconds of recheckRounds) {
    if (instances !== undefined) {
      progress('stopping the instances to start them again with the next re-check period');
      await stopServices(started);
      started.length = 0;
    }
    progress(
      `starting two instances of the service (${adapter} adapter${recheckSeconds === undefined ? '' : `, REALTIME_RECHECK_SECONDS=${recheckSeconds}`})`,
    );
    const extra: Record<string, string> = {
      METRICS_TOKEN,
      // BENCH_NODE_OPTIONS reaches the instances (and the bare servers): `--cpu-prof --cpu-prof-dir=/tmp/prof` profiles them.
      ...(process.env.BENCH_NODE_OPTIONS ? { NODE_OPTIONS: process.env.BENCH_NODE_OPTIONS } : {}),
      ...(recheckSeconds === undefined ? {} : { REALTIME_RECHECK_SECONDS: String(recheckSeconds) }),
    };
    const startedNow = await startInstances(
      started,
      instanceEnv({ databaseUrl: database.url, adapter, tokenTtlSeconds: TOKEN_TTL_SECONDS, extra }),
    );
    instances = startedNow.instances;
    progress(
      `instances: A ${instances[0].base} (pid ${instances[0].pid}), B ${instances[1].base} (pid ${instances[1].pid})`,
    );
    if (users === undefined) {
      const channel = await createChannel(instances[0].base, startedNow.adminToken);
      progress(`channel ${channel.pattern} created (${channel.id})`);
      progress(
        `signing up ${accountCount} subscriber and ${publisherCount} publisher accounts (scrypt: takes a while)`,
      );
      const bases = instances.map((i) => i.base);
      users = {
        subscriberUsers: await signUpUsers(bases, 'subscriber', accountCount, 4),
        publisherUsers: await signUpUsers(bases, 'publisher', publisherCount, 4),
      };
    }
    pool ??= new SubscriberPool(processCount);
    // The ceiling is measured in the first round only (the re-check period does not concern it).
    let ceiling: [Instance, Instance] | undefined;
    if (withCeiling && results.length === 0) {
      progress('starting two bare socket.io servers (the ceiling)');
      ceiling = await startCeiling(started);
    }
    const ctx: Context = { databaseUrl: database.url, instances, ...users, pool, ceiling };
    for (const [i, count] of scenarios.entries()) {
      const bare = ctx.ceiling === undefined ? undefined : await runScenario(ctx, i, count, recheckSeconds, 'ceiling');
      const measured = await runScenario(ctx, i, count, recheckSeconds);
      if (bare !== undefined) {
        measured.vsCeiling = {
          publishes: measured.publishes.perSecond / bare.publishes.perSecond,
          deliveries: measured.deliveries.perSecond / bare.deliveries.perSecond,
        };
        for (const t of measured.targets)
          if (t.title === 'deliveries/s') t.value += ` (${measured.vsCeiling.deliveries.toFixed(2)} of the ceiling)`;
          else if (t.title === 'accepted publishes/s')
            t.value += ` (${measured.vsCeiling.publishes.toFixed(2)} of the ceiling)`;
        results.push(bare);
      }
      results.push(measured);
    }
    if (ceiling !== undefined) {
      // Not needed again: stopped, so that later rounds run beside the service only.
      const bareServers = ceiling.map((c) => c.service);
      await stopServices(bareServers);
      started.splice(0, started.length, ...started.filter((s) => !bareServers.includes(s)));
    }
  }
  if (instances === undefined || pool === undefined) throw new Error('no round ran');

  const layout = [
    `service code: ${source}, run from src/ as \`npm start\` runs it (${[...NPM_START.flags, NPM_START.script].join(' ')})`,
    `instance A: pid ${instances[0].pid}, ${instances[0].base}`,
    `instance B: pid ${instances[1].pid}, ${instances[1].base}`,
    `PostgreSQL ${database.version} on 127.0.0.1:5432, database ${DATABASE} (made afresh for the run)${adapter === 'postgres' ? ', also carrying the socket.io adapter' : ''}`,
    ...(adapter === 'redis' ? [`Redis on ${REDIS_URL.slice('redis://'.length)}: the socket.io adapter`] : []),
    `${processCount} subscriber process${processCount === 1 ? '' : 'es'} (bench/lib/realtime-worker.ts), pid${processCount === 1 ? '' : 's'} ${pool.pids.join(', ')}: the subscribers in contiguous blocks, each block alternating between A and B`,
    `main process (bench/realtime.ts), pid ${process.pid}: ${publisherCount} publishers (half on A, half on B), the orchestration`,
    `all on one machine with ${os.cpus().length} cores, over loopback; subscribers share ${accountCount} accounts round-robin, each publisher has its own`,
  ];
  const report: RealtimeReport = {
    meta: {
      date: new Date().toISOString(),
      database: 'PostgreSQL',
      databaseVersion: database.version,
      users: accountCount + publisherCount,
      cores: os.cpus().length,
      cpu: os.cpus()[0]?.model ?? 'unknown',
      node: process.version,
      connections: Math.max(...scenarios) + publisherCount,
      durationSeconds,
      quick,
      wallSeconds: Math.round((Date.now() - wallStart) / 1000),
      adapter,
      loadAverageBefore,
      warmUpSeconds,
      publishers: publisherCount,
      window,
      subscriberProcesses: processCount,
      subscriberAccounts: accountCount,
      command: ['npm run bench:realtime --', ...process.argv.slice(2)].join(' ').replace(/ --$/, ''),
      layout,
    },
    scenarios: results,
    passed: results.every((r) => r.problems.length === 0),
  };
  const files = writeRealtimeReport(report);
  console.log(
    `\n${realtimeHeader(report)}\n\n${layout.map((l) => `- ${l}`).join('\n')}\n\n${scenarioTable(report)}\n\n${targetTable(report)}\n`,
  );
  for (const r of results) for (const w of r.warnings) console.error(`${r.subscribers} subscribers: warning: ${w}`);
  for (const r of results) for (const p of r.problems) console.error(`${r.subscribers} subscribers: ${p}`);
  if (!report.passed) {
    for (const [i, instance] of instances.entries()) {
      const output = instance.service.output().slice(-3000);
      console.error(`instance ${'AB'[i]}'s last output: ${output.trim() === '' ? '(none)' : `\n${output}`}`);
    }
  }
  console.log(
    `${report.passed ? 'passed' : 'FAILED'}. Written: ${files.join(', ')} (${report.meta.wallSeconds} s in all)`,
  );
  if (!report.passed) process.exitCode = 1;
} catch (err) {
  for (const [i, s] of started.entries()) {
    const out = s.output().slice(-3000);
    if (out.trim() !== '') console.error(`process ${i} (pid ${s.child.pid}) output:\n${out}`);
  }
  throw err;
} finally {
  await cleanUp();
}
