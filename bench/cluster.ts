// npm run bench:cluster [-- --quick] [--adapter redis|postgres]: three instances of the service behind HAProxy
// (deploy/haproxy.cfg), over a PostgreSQL primary with a streaming replica (DATABASE_READ_URL) and a
// private Redis, under a mixed load, through four faults: an instance killed with SIGKILL and
// restarted; the replica stopped and started; the primary failed over to the replica (crashed,
// replica promoted, HAProxy's PostgreSQL endpoint moved; synchronous replication on for it); Redis
// stopped for 10 s. It prints rate, p99 and errors per phase and operation, how long each recovery
// took, and the mixed load's capacity with one and with three instances; then checks that every
// acknowledged sign-up, verification, refresh-token rotation and realtime message is in the database
// once, that every subscriber came back and got what was acknowledged while it listened, and that
// sign-outs reached every instance within 2 s. Exits 1 on any failed check or any 5xx other than
// the retry answers (503; 502 from the balancer for a request in flight on the killed instance).
// See docs/operations.md ("Several instances", "Sizing").
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import { parseArgs } from 'node:util';
import { io } from 'socket.io-client';
import { freePort } from '../scripts/lib/service-process.ts';
import { startFakeUpstream } from '../test/helpers/fake-embeddings-upstream.ts';
import { privatePostgresUnavailable } from '../test/helpers/private-postgres.ts';
import { redisServerInstalled } from '../test/helpers/private-redis.ts';
import { startSmtpCapture } from '../test/helpers/smtp.ts';
import {
  type ClusterInstance,
  DATABASE,
  killInstance,
  query,
  setSynchronous,
  startBalancer,
  startInstance,
  startRedis,
  startReplicatedPostgres,
  stopInstance,
  Teardowns,
  waitForSyncStandby,
} from './lib/cluster-infra.ts';
import {
  ClusterLedger,
  ClusterTraffic,
  call,
  missedMessages,
  PhaseRecorder,
  Publishers,
  type Session,
  Subscriber,
  subscribeAll,
} from './lib/cluster-traffic.ts';
import { adminAccessToken, benchAdminEnv, benchServiceEnv, raisedLimits } from './lib/setup.ts';

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    adapter: { type: 'string', default: 'redis' },
    help: { type: 'boolean', default: false },
  },
});
const adapter = values.adapter;
if (values.help || (adapter !== 'redis' && adapter !== 'postgres')) {
  process.stdout.write(
    'usage: npm run bench:cluster [-- --quick] [--adapter redis|postgres]\n' +
      '  --adapter: how realtime messages reach the other instances (REALTIME_ADAPTER; default redis)\n',
  );
  process.exit(values.help ? 0 : 1);
}
const quick = values.quick === true;
/** Seconds of each phase without a fault, and of each fault (the Redis outage is 10 s either way). */
const STEADY_S = quick ? 8 : 30;
const FAULT_S = quick ? 10 : 30;
const CAPACITY_S = quick ? 5 : 20;
const SUBSCRIBERS = 300;
const CHANNELS = 10;
const PUBLISH_RATE = 40;
const ACCOUNTS = 10;
/** A message acknowledged less than this before its subscriber's socket dropped may have been on the wire. */
const DELIVERY_GRACE_MS = 1_000;
const REVOCATION_LIMIT_MS = 2_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const wallStart = performance.now();
const progress = (text: string) =>
  process.stderr.write(`[${((performance.now() - wallStart) / 1000).toFixed(0).padStart(3)} s] ${text}\n`);

const missing = [
  privatePostgresUnavailable(),
  (await redisServerInstalled()) ? undefined : 'redis-server is not installed (apt-get install -y redis-server)',
  await new Promise<string | undefined>((resolve) => {
    import('node:child_process').then(({ spawn }) => {
      const child = spawn('haproxy', ['-v'], { stdio: 'ignore' });
      child.on('error', () => resolve('haproxy is not installed (apt-get install -y haproxy)'));
      child.on('exit', () => resolve(undefined));
    });
  }),
].filter((x) => x !== undefined);
if (missing.length > 0) {
  process.stderr.write(`bench:cluster cannot run here: ${missing.join('; ')}\n`);
  process.exit(1);
}

const teardowns = new Teardowns();
let failed = false;
const fail = (what: string) => {
  failed = true;
  process.stdout.write(`FAILED: ${what}\n`);
};
process.on('SIGINT', () => {
  void teardowns.run().then(() => process.exit(130));
});

/** Polls `condition` every 50 ms; resolves with the milliseconds it took, or undefined past `timeoutMs`. */
async function within(condition: () => Promise<boolean> | boolean, timeoutMs: number): Promise<number | undefined> {
  const began = performance.now();
  while (performance.now() - began < timeoutMs) {
    try {
      if (await condition()) return performance.now() - began;
    } catch {
      // not yet
    }
    await sleep(50);
  }
  return undefined;
}

const recoveries: { fault: string; what: string; ms: number | undefined }[] = [];
const recovery = (fault: string, what: string, ms: number | undefined) => {
  recoveries.push({ fault, what, ms });
  progress(`  ${what}: ${ms === undefined ? 'NOT within the wait' : `${Math.round(ms)} ms`}`);
};

try {
  // ---- the parts ---------------------------------------------------------------------------
  progress('PostgreSQL primary and a streaming replica (pg_basebackup)');
  const { primary, replica } = await startReplicatedPostgres(teardowns);
  const redis = await startRedis(teardowns);
  const smtp = await startSmtpCapture();
  teardowns.teardown(() => smtp.close());
  const upstream = await startFakeUpstream();
  teardowns.teardown(() => upstream.close());
  const instances: ClusterInstance[] = [];
  for (const name of ['instance1', 'instance2', 'instance3']) {
    const port = await freePort();
    instances.push({ name, port, url: `http://127.0.0.1:${port}`, service: undefined });
  }
  const balancer = await startBalancer(teardowns, {
    instancePorts: instances.map((i) => i.port),
    primaryPort: primary.port,
    replicaPort: replica.port,
  });
  const env: Record<string, string> = {
    ...benchServiceEnv,
    ...raisedLimits,
    ...benchAdminEnv,
    SMTP_URL: smtp.url,
    PUBLIC_URL: balancer.url,
    COOKIE_SECURE: 'true',
    DATABASE_URL: balancer.databaseUrl,
    DATABASE_READ_URL: replica.urlOf(DATABASE),
    REDIS_URL: redis.url,
    REDIS_KEY_PREFIX: 'cluster:',
    REALTIME_ADAPTER: adapter,
    TRUST_PROXY: 'true',
    EMBEDDINGS_BASE_URL: upstream.baseUrl,
    EMBEDDINGS_API_KEY: 'cluster-upstream-key',
    ACCESS_TOKEN_TTL_SECONDS: '3600',
    REALTIME_MAX_SOCKETS_PER_USER: '1000',
  };
  teardowns.teardown(() => Promise.all(instances.map((i) => stopInstance(i))));
  progress('three instances behind HAProxy (the first migrates the database)');
  await startInstance(instances[0] as ClusterInstance, env);
  await Promise.all(instances.slice(1).map((i) => startInstance(i, env)));
  const allUp = await within(
    async () => (await Promise.all(instances.map((i) => balancer.instanceState(i.name)))).every((s) => s === 'UP'),
    20_000,
  );
  if (allUp === undefined) throw new Error(`HAProxy does not see the three instances up:\n${balancer.output()}`);

  const recorder = new PhaseRecorder();
  const ledger = new ClusterLedger();
  const base = balancer.url;
  const adminToken = await adminAccessToken(base);
  const channelAnswer = await call(recorder, 'createRealtimeChannel', `${base}/api/realtime/channels`, {
    token: adminToken,
    body: { pattern: 'cluster:%', description: 'cluster benchmark' },
  });
  if (channelAnswer.status !== 201)
    throw new Error(`channel: ${channelAnswer.status} ${JSON.stringify(channelAnswer.body)}`);
  const traffic = new ClusterTraffic({
    base,
    instanceUrls: () => instances.filter((i) => i.service !== undefined).map((i) => i.url),
    smtp,
    recorder,
    ledger,
    adminToken,
    runId: randomBytes(4).toString('hex'),
  });
  progress(`${ACCOUNTS} accounts (sign-up, the emailed code) for the sockets`);
  const accounts: Session[] = [];
  for (let i = 0; i < ACCOUNTS; i++) {
    const session = await traffic.newAccount('setup:', false);
    if (session === undefined) throw new Error(`a setup account could not be made: ${traffic.lastFailure}`);
    accounts.push(session);
  }
  const channels = Array.from({ length: CHANNELS }, (_, i) => `cluster:${i}`);
  progress(`${SUBSCRIBERS} subscribers on ${CHANNELS} channels, publishers at ${PUBLISH_RATE}/s`);
  const subscribers = Array.from(
    { length: SUBSCRIBERS },
    (_, i) =>
      new Subscriber(
        base,
        (accounts[i % ACCOUNTS] as { accessToken: string }).accessToken,
        channels[i % CHANNELS] as string,
      ),
  );
  const allSubscribed = () => subscribers.every((s) => s.subscribed);
  if ((await within(allSubscribed, 30_000)) === undefined) throw new Error('the subscribers did not all subscribe');
  const publishers = new Publishers(
    base,
    accounts.slice(0, 5).map((a) => a.accessToken),
    channels,
    { recorder, ledger, next: () => traffic.nextPublish(), ratePerSecond: PUBLISH_RATE },
  );
  await sleep(1_000);

  /** A write through the balancer (an administrator's sign-in opens a session) answered 200. */
  const writeWorks = async () =>
    (
      await fetch(`${base}/api/auth/sessions?client_type=mobile`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ email: benchAdminEnv.ADMIN_EMAIL, password: benchAdminEnv.ADMIN_PASSWORD }),
        signal: AbortSignal.timeout(5_000),
      })
    ).status === 200;
  const probeSocket = io(base, {
    transports: ['websocket'],
    auth: { token: adminToken },
    forceNew: true,
    reconnectionDelay: 200,
    reconnectionDelayMax: 1_000,
  });
  teardowns.teardown(() => probeSocket.close());
  let probeReady = false;
  probeSocket.on('connect', () => {
    probeReady = false;
    void subscribeAll(probeSocket, ['cluster:probe']).then((ok) => {
      probeReady = ok;
    });
  });
  probeSocket.on('disconnect', () => {
    probeReady = false;
  });
  /** A realtime publish acknowledged (the fan-out can reach every instance's subscribers). */
  const publishWorks = async () => {
    if (!probeReady) return false;
    const ack = (await probeSocket
      .timeout(3_000)
      .emitWithAck('realtime:publish', { channel: 'cluster:probe', event: 'probe', payload: {} })) as { ok: boolean };
    return ack.ok;
  };
  const replicaState = async () => {
    const res = await fetch(`${base}/api/health`, { signal: AbortSignal.timeout(3_000) });
    return ((await res.json()) as { replica?: { state: string } }).replica?.state;
  };

  // ---- the run -----------------------------------------------------------------------------
  traffic.start();
  publishers.start();
  recorder.enter('steady');
  progress(`steady: ${STEADY_S} s`);
  await sleep(STEADY_S * 1000);

  recorder.enter('instance down');
  const victim = instances[1] as ClusterInstance;
  progress(`instance down: SIGKILL ${victim.name}, restarted after ${FAULT_S} s`);
  await killInstance(victim);
  // Measured together from the kill: HAProxy's check, and the killed instance's subscribers, who
  // notice the closed connection within moments and come back through HAProxy.
  const [outOfRotation, cameBack] = await Promise.all([
    within(async () => (await balancer.instanceState(victim.name)).startsWith('DOWN'), 15_000),
    (async () => {
      const dropped = await within(() => !allSubscribed(), 5_000);
      let lost = 0;
      const back = await within(() => {
        lost = Math.max(lost, subscribers.filter((s) => !s.subscribed).length);
        return lost > 0 && allSubscribed();
      }, 15_000);
      return { lost, ms: dropped === undefined || back === undefined ? undefined : dropped + back };
    })(),
  ]);
  recovery('instance killed', 'out of HAProxy’s rotation', outOfRotation);
  recovery('instance killed', `its subscribers (${cameBack.lost} dropped) resubscribed elsewhere`, cameBack.ms);
  await sleep(FAULT_S * 1000);
  const restartMs = await startInstance(victim, env);
  recovery('instance killed', 'restarted instance healthy (start to first 200)', restartMs);
  recovery(
    'instance killed',
    'back in HAProxy’s rotation',
    await within(async () => (await balancer.instanceState(victim.name)) === 'UP', 15_000),
  );

  recorder.enter('replica down');
  progress(`replica down: stopped for ${FAULT_S} s`);
  await replica.stop('fast');
  recovery(
    'replica stopped',
    'reads moved to the primary (health: down)',
    await within(async () => (await replicaState()) === 'down', 10_000),
  );
  await sleep(FAULT_S * 1000);
  await replica.start();
  recovery(
    'replica stopped',
    'reads back on the replica',
    await within(async () => (await replicaState()) === 'replica', 20_000),
  );

  recorder.enter('steady before failover');
  progress('synchronous replication on for the failover');
  await setSynchronous(primary, true);
  await waitForSyncStandby(primary);
  await sleep(2_000);

  recorder.enter('failover');
  progress('failover: the primary crashes (immediate stop), the replica is promoted, the endpoint moves');
  const crashAt = performance.now();
  await primary.stop('immediate');
  await replica.promote();
  await balancer.switchDatabase('replica');
  recovery('primary failover', 'promote + endpoint switch', performance.now() - crashAt);
  recovery(
    'primary failover',
    'writes resumed (after the crash)',
    await within(writeWorks, 30_000).then((ms) => (ms === undefined ? undefined : performance.now() - crashAt)),
  );
  recovery(
    'primary failover',
    'realtime publishes acknowledged again (after the crash)',
    await within(publishWorks, 30_000).then((ms) => (ms === undefined ? undefined : performance.now() - crashAt)),
  );
  await sleep(FAULT_S * 1000);

  recorder.enter('Redis down');
  progress('Redis down: stopped for 10 s');
  await redis.stop();
  await sleep(10_000);
  await redis.start();
  recovery(
    'Redis stopped 10 s',
    'realtime publishes acknowledged again (after the restart)',
    await within(publishWorks, 30_000),
  );
  recovery('Redis stopped 10 s', 'every subscriber subscribed afterwards', await within(allSubscribed, 30_000));

  recorder.enter('recovered');
  progress(`recovered: ${STEADY_S} s`);
  await sleep(STEADY_S * 1000);
  await publishers.stop();
  await traffic.stop();
  recorder.enter('checks');
  await sleep(2_000); // deliveries in flight
  progress('checks');

  // ---- the checks --------------------------------------------------------------------------
  const db = replica.urlOf(DATABASE); // the primary now
  const emails = [...ledger.signUps];
  const found = await query<{ email: string; verified: boolean }>(
    db,
    'select email, email_verified as verified from users where email = any($1)',
    [emails],
  );
  const foundEmails = new Set(found.map((r) => r.email));
  const lostSignUps = emails.filter((e) => !foundEmails.has(e));
  const verifiedEmails = new Set(found.filter((r) => r.verified).map((r) => r.email));
  const lostVerifications = [...ledger.verified].filter((e) => !verifiedEmails.has(e));
  if (lostSignUps.length > 0) fail(`${lostSignUps.length} acknowledged sign-ups are not in the database`);
  if (lostVerifications.length > 0)
    fail(`${lostVerifications.length} acknowledged verifications are not in the database`);
  const ids = [...ledger.messages.keys()];
  const stored = await query<{ id: string }>(
    db,
    'select id::text as id from realtime.messages where id = any($1::uuid[])',
    [ids],
  );
  const storedIds = new Set(stored.map((r) => r.id));
  const lostMessages = ids.filter((id) => !storedIds.has(id));
  if (lostMessages.length > 0) fail(`${lostMessages.length} acknowledged realtime messages are not in the database`);
  const doubled = await query<{ n: string; copies: number }>(
    db,
    "select payload->>'n' as n, count(*)::int as copies from realtime.messages where channel_name like 'cluster:%' and event = 'tick' group by 1 having count(*) > 1",
  );
  if (doubled.length > 0) fail(`${doubled.length} realtime messages are stored twice`);
  // Each chain's last acknowledged refresh token must still work (a lost rotation would make it unknown or reused).
  const chains = [...ledger.chains.values()].filter((c) => !c.uncertain && c.rotations > 0);
  let brokenChains = 0;
  const toCheck = [...chains];
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      for (let chain = toCheck.pop(); chain !== undefined; chain = toCheck.pop()) {
        const res = await call(recorder, 'refreshSession', `${base}/api/auth/refresh?client_type=mobile`, {
          body: { refreshToken: chain.refreshToken },
        });
        if (res.status === 200) chain.refreshToken = res.body.refreshToken as string;
        else brokenChains++;
      }
    }),
  );
  if (brokenChains > 0)
    fail(`${brokenChains} of ${chains.length} refresh chains lost their last acknowledged rotation`);
  const resubscribed = await within(allSubscribed, 15_000);
  const absent = subscribers.filter((s) => !s.subscribed).length;
  if (resubscribed === undefined) {
    const reasons = new Map<string, number>();
    for (const s of subscribers.filter((x) => !x.subscribed)) {
      const why = `${s.socket.connected ? 'connected' : 'not connected'}, last refusal: ${s.lastRefusal || 'none'}`;
      reasons.set(why, (reasons.get(why) ?? 0) + 1);
    }
    fail(`${absent} subscribers did not come back: ${[...reasons].map(([k, v]) => `${v}× ${k}`).join('; ')}`);
  }
  const missed = subscribers.map((s) => missedMessages(s, ledger, DELIVERY_GRACE_MS).length);
  const missedTotal = missed.reduce((a, b) => a + b, 0);
  const duplicateDeliveries = subscribers.reduce((a, s) => a + s.duplicates, 0);
  if (missedTotal > 0) fail(`${missedTotal} deliveries missed by ${missed.filter((m) => m > 0).length} subscribers`);
  if (duplicateDeliveries > 0) fail(`${duplicateDeliveries} messages delivered twice to one subscriber`);
  if (ledger.slowRevocations.length > 0)
    fail(`revocations slower than ${REVOCATION_LIMIT_MS} ms: ${ledger.slowRevocations.join(', ')}`);
  if (recorder.serverErrors.length > 0)
    fail(`${recorder.serverErrors.length} server errors:\n  ${recorder.serverErrors.slice(0, 10).join('\n  ')}`);
  for (const r of recoveries) if (r.ms === undefined) fail(`${r.fault}: ${r.what} did not happen within its wait`);
  for (const s of subscribers) s.socket.close();
  publishers.close();

  // ---- capacity ----------------------------------------------------------------------------
  progress(`capacity: the mixed load, closed loop, ${CAPACITY_S} s with three instances, then with one`);
  // Refresh tokens that are current: each chain's last rotation (the checks made one more); each
  // refresh below puts its successor back.
  const refreshTokens = [...ledger.chains.values()].filter((c) => !c.uncertain).map((c) => c.refreshToken);
  const capacity = async (label: string) => {
    const capRecorder = new PhaseRecorder();
    capRecorder.enter(label);
    let stop = false;
    let done = 0;
    const mix = [
      () => call(capRecorder, 'listUsers', `${base}/api/auth/users?limit=10`, { token: adminToken }),
      () => call(capRecorder, 'getHealth', `${base}/api/health`),
      () =>
        call(capRecorder, 'createEmbeddings', `${base}/api/ai/embeddings`, {
          token: adminToken,
          body: { model: 'text-embedding-3-small', input: 'capacity', dimensions: 256 },
        }),
      async () => {
        const refreshToken = refreshTokens.pop();
        if (refreshToken === undefined) {
          return call(capRecorder, 'listUsers', `${base}/api/auth/users?limit=10`, { token: adminToken });
        }
        const res = await call(capRecorder, 'refreshSession', `${base}/api/auth/refresh?client_type=mobile`, {
          body: { refreshToken },
        });
        if (res.status === 200) refreshTokens.unshift(res.body.refreshToken as string);
        return res;
      },
    ];
    // No sign-ins: each holds a core for a password hash (scrypt), so they alone would set the figure;
    // npm run bench measures them per instance.
    const weights = [4, 2, 3, 3];
    const pick = () => {
      let r = Math.random() * weights.reduce((a, b) => a + b, 0);
      for (let i = 0; i < weights.length; i++) {
        r -= weights[i] as number;
        if (r < 0) return mix[i] as () => Promise<unknown>;
      }
      return mix[0] as () => Promise<unknown>;
    };
    const began = performance.now();
    const timer = setTimeout(() => {
      stop = true;
    }, CAPACITY_S * 1000);
    await Promise.all(
      Array.from({ length: 32 }, async () => {
        while (!stop) {
          await pick()();
          done++;
        }
      }),
    );
    clearTimeout(timer);
    const rate = done / ((performance.now() - began) / 1000);
    const rows = capRecorder.rows();
    const errors = rows.reduce((a, r) => a + (r.errors === '0' ? 0 : 1), 0);
    const detail = rows
      .map(
        (r) =>
          `${r.operation} ${r.count} (p99 ${r.p99.toFixed(0)} ms${r.errors === '0' ? '' : `, errors ${r.errors}`})`,
      )
      .join(', ');
    return { rate, errors, detail };
  };
  // Sign-in needs the account's refresh limits out of the way: raisedLimits did that.
  const three = await capacity('three instances');
  for (const i of instances.slice(1)) await balancer.command(`set server instances/${i.name} state maint`);
  const one = await capacity('one instance');
  for (const i of instances.slice(1)) await balancer.command(`set server instances/${i.name} state ready`);

  // ---- the report --------------------------------------------------------------------------
  const out: string[] = [];
  const cpu = os.cpus()[0]?.model ?? 'unknown';
  out.push(
    `## bench:cluster${quick ? ' --quick' : ''}: three instances behind HAProxy, PostgreSQL primary + streaming replica, Redis`,
    '',
    `${os.cpus().length} cores (${cpu}), Node ${process.version}, realtime adapter ${adapter}; steady phases ${STEADY_S} s, faults ${FAULT_S} s (Redis 10 s); ${SUBSCRIBERS} subscribers on ${CHANNELS} channels, ${PUBLISH_RATE} publishes/s.`,
    '',
    '| phase | operation | requests | rate/s | p99 ms | errors |',
    '|---|---|---:|---:|---:|---|',
    ...recorder
      .rows()
      .map(
        (r) =>
          `| ${r.phase} | ${r.operation} | ${r.count} | ${r.rate.toFixed(1)} | ${r.p99.toFixed(0)} | ${r.errors} |`,
      ),
    '',
    '| fault | recovery | ms |',
    '|---|---|---:|',
    ...recoveries.map(
      (r) => `| ${r.fault} | ${r.what} | ${r.ms === undefined ? 'not within the wait' : Math.round(r.ms)} |`,
    ),
    '',
    `Acknowledged and found: ${ledger.signUps.size} sign-ups (${lostSignUps.length} lost), ${ledger.verified.size} verifications (${lostVerifications.length} lost), ${chains.length} refresh chains with ${chains.reduce((a, c) => a + c.rotations, 0)} rotations (${brokenChains} broken; ${[...ledger.chains.values()].filter((c) => c.uncertain).length} left out: a try whose answer never came), ${ledger.messages.size} realtime messages (${lostMessages.length} lost, ${doubled.length} doubled).`,
    `Subscribers: ${SUBSCRIBERS - absent} of ${SUBSCRIBERS} subscribed at the end, ${subscribers.reduce((a, s) => a + s.reconnections, 0)} reconnections, ${missedTotal} deliveries missed, ${duplicateDeliveries} doubled.`,
    `Revocations: ${ledger.revocations.length} sign-outs, slowest reached every instance in ${Math.round(Math.max(0, ...ledger.revocations.map((r) => r.ms)))} ms (limit ${REVOCATION_LIMIT_MS}).`,
    '',
    `Capacity (directory pages, health checks, embeddings and refreshes, closed loop, 32 connections, ${CAPACITY_S} s): three instances ${three.rate.toFixed(0)} req/s (${(three.rate / 3).toFixed(0)} per instance), one instance ${one.rate.toFixed(0)} req/s; ${three.errors + one.errors} operations with errors. Three: ${three.detail}. One: ${one.detail}. Everything shares this machine's ${os.cpus().length} cores: the three instances, both PostgreSQL servers, Redis, HAProxy and the load generator.`,
    '',
    `Total ${((performance.now() - wallStart) / 1000).toFixed(0)} s.`,
  );
  process.stdout.write(`${out.join('\n')}\n`);
} catch (err) {
  fail(`the run stopped: ${(err as Error).stack ?? String(err)}`);
} finally {
  await teardowns.run();
}
process.stdout.write(failed ? 'bench:cluster: FAILED\n' : 'bench:cluster: every check passed\n');
process.exit(failed ? 1 : 0);
