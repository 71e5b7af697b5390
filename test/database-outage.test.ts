// Database faults on real PostgreSQL: while concurrent HTTP clients keep signing up, signing in,
// refreshing, listing users and reading realtime permissions, the database is stopped and started
// again (fast and immediate stops, one with the connection pool saturated and requests queued for
// it), and idle pooled connections are killed under a running server. The service must answer 503
// SERVICE_UNAVAILABLE quickly while the database is away, recover within 5 s of its return without
// a restart, and have lost no write it acknowledged. Last, the server is frozen (SIGSTOP) rather
// than stopped: the health check must still answer within its deadline.
//
// The suite's shared PostgreSQL must not be stopped: this test makes a cluster of its own
// (test/helpers/private-postgres.ts) with the machine's PostgreSQL binaries.
import { Writable } from 'node:stream';
import pg from 'pg';
import t, { type Test } from 'tap';
import { Agent, request } from 'undici';
import { buildApp } from '../src/app.ts';
import { sha256Hex } from '../src/auth/crypto.ts';
import { loadConfig } from '../src/config.ts';
import { openDatabase } from '../src/db/database.ts';
import { migrateToLatest } from '../src/db/migrate.ts';
import { LISTENER_APPLICATION_NAME } from '../src/db/notification-listener.ts';
import { HEALTH_DEADLINE_MS } from '../src/handlers/health.ts';
import { decodeClaims, newEmail, PASSWORD, pause } from './helpers/auth.ts';
import { checkResponsesAgainstContract } from './helpers/contract-check.ts';
import { usingPostgres } from './helpers/database.ts';
import { createPrivatePostgres, type PrivatePostgres, privatePostgresUnavailable } from './helpers/private-postgres.ts';
import { startSmtpCapture } from './helpers/smtp.ts';

/**
 * The longest any request may take, outage or not. A stopped server ends its sessions and refuses
 * new connections at once; the only wait the service adds is the pool's connectionTimeoutMillis
 * (2 s, src/db/database.ts), for a connection queued behind busy ones or being opened. The rest is
 * CPU: sign-up and sign-in hash with scrypt (about 100 ms alone, in libuv's 4 threads) on 2 cores
 * shared with PostgreSQL, this load generator and the other test files, which was measured to
 * stretch a sign-in to 3.4 s at a load average of 12, outage or not. 2 s + 3 s: 5 s. Hanging on
 * the database (the old 5 s pool timeout, or no answer at all) goes past it.
 */
const LATENCY_BOUND_MS = 5_000;
/** Within this long of the database accepting connections again, every operation must work. */
const RECOVERY_BOUND_MS = 5_000;
const OUTAGE_MS = 2_000;
const STEADY_MS = 1_000;
const ADMIN_EMAIL = 'outage-admin@example.com';
const ADMIN_PASSWORD = 'outage admin password';

type Op = 'signUp' | 'signIn' | 'refresh' | 'health' | 'listUsers' | 'realtime' | 'current';
const OPS: readonly Op[] = ['signUp', 'signIn', 'refresh', 'health', 'listUsers', 'realtime', 'current'];
const SUCCESS: Record<Op, number> = {
  signUp: 201,
  signIn: 200,
  refresh: 200,
  health: 200,
  listUsers: 200,
  realtime: 200,
  current: 200,
};
/** Concurrent clients per operation: sign-up and sign-in are bound by scrypt (CPU), so one each; 15 against a pool of 10. */
const WORKERS: Record<Op, number> = {
  signUp: 1,
  signIn: 1,
  refresh: 4,
  health: 2,
  listUsers: 3,
  realtime: 2,
  current: 2,
};

interface Outcome {
  op: Op;
  phase: string;
  sentAt: number;
  answeredAt: number;
  status: number;
  error: string | undefined;
  retryAfter: string | undefined;
  /** Why the request failed on the client side (the app refused the connection, the client timed out). */
  clientError: string | undefined;
  body: Record<string, unknown> | undefined;
}

/** A session the service acknowledged: its id (the access token's sid) and the refresh token handed out. */
interface AckSession {
  origin: 'signUp' | 'signIn' | 'refresh';
  sid: string;
  refreshToken: string;
}

/** One fault: from its start (lock or stop) until a round of every operation succeeded again. */
interface Outage {
  label: string;
  faultAt: number;
  faultAtWall: number;
  /** When pg_ctl stop was run (after the pool was saturated, when it was). */
  stoppingAt: number;
  stopMs: number;
  startMs: number;
  /** When the database accepted connections again (pg_ctl start -w returned). */
  startedAt: number;
  recoveredAt: number;
  recoveredAtWall: number;
  recoveryRounds: number;
  blockedConnections: number | undefined;
  inFlightAtStop: number | undefined;
  /** The pool's counts and the database's backends when the pool was found saturated (or the wait ended). */
  saturation?: unknown;
}

const unavailable = usingPostgres ? privatePostgresUnavailable() : undefined;
const skip = !usingPostgres
  ? 'PostgreSQL only: stops and starts a private PostgreSQL cluster; runs in the PostgreSQL suite (npm run test:pg)'
  : unavailable !== undefined
    ? `needs the PostgreSQL server binaries to run a private cluster: ${unavailable}`
    : false;

t.test(
  'database outages: 503 while PostgreSQL is away, recovery without a restart, no acknowledged write lost',
  { skip },
  outageTest,
);

async function outageTest(t: Test): Promise<void> {
  const cluster = await createPrivatePostgres(t);
  t.comment(
    `private cluster on port ${cluster.port}: initdb ${Math.round(cluster.timings.initdbMs)} ms, ` +
      `first start ${Math.round(cluster.timings.firstStartMs)} ms`,
  );
  const { base, logLines, poolStats } = await startService(t, cluster);
  const dispatcher = new Agent({ connections: 64, headersTimeout: 15_000, bodyTimeout: 15_000 });
  t.teardown(() => dispatcher.close());

  // ---- traffic ------------------------------------------------------------------------------------
  const outcomes: Outcome[] = [];
  const ackSignUps: { email: string; userId: string }[] = [];
  /** Sign-ups answered 503: their account may exist all the same (see the report). */
  const refusedSignUps: string[] = [];
  const ackSessions: AckSession[] = [];
  const freshSessions: AckSession[] = [];
  let phase = 'setup';
  let inFlight = 0;

  async function call(
    op: Op,
    method: 'GET' | 'POST',
    path: string,
    options: { body?: unknown; token?: string } = {},
  ): Promise<Outcome> {
    const headers: Record<string, string> = {};
    if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
    if (options.body !== undefined) headers['content-type'] = 'application/json';
    const outcome: Outcome = {
      op,
      phase,
      sentAt: performance.now(),
      answeredAt: 0,
      status: 0,
      error: undefined,
      retryAfter: undefined,
      clientError: undefined,
      body: undefined,
    };
    inFlight++;
    try {
      const res = await request(`${base}${path}`, {
        method,
        headers,
        dispatcher,
        ...(options.body !== undefined ? { body: JSON.stringify(options.body) } : {}),
      });
      const text = await res.body.text();
      outcome.status = res.statusCode;
      const retryAfter = res.headers['retry-after'];
      outcome.retryAfter = Array.isArray(retryAfter) ? retryAfter[0] : retryAfter;
      if (text !== '') outcome.body = JSON.parse(text) as Record<string, unknown>;
      if (res.statusCode >= 400) outcome.error = String(outcome.body?.error);
    } catch (err) {
      outcome.clientError = (err as Error).message;
    } finally {
      inFlight--;
      outcome.answeredAt = performance.now();
      outcomes.push(outcome);
    }
    return outcome;
  }

  /** Records a session the service answered with, and returns it. */
  function acknowledge(origin: AckSession['origin'], body: Record<string, unknown> | undefined): AckSession {
    const session: AckSession = {
      origin,
      sid: String(decodeClaims(String(body?.accessToken)).sid),
      refreshToken: String(body?.refreshToken),
    };
    ackSessions.push(session);
    return session;
  }

  const signUp = async () => {
    const email = newEmail('outage');
    const res = await call('signUp', 'POST', '/api/auth/users?client_type=mobile', {
      body: { email, password: PASSWORD, name: 'Outage' },
    });
    if (res.status === 201) {
      ackSignUps.push({ email, userId: String((res.body?.user as { id?: string } | undefined)?.id) });
      freshSessions.push(acknowledge('signUp', res.body));
    } else if (res.status === 503) {
      refusedSignUps.push(email);
    }
    return res;
  };
  const signIn = async () => {
    const account = ackSignUps[Math.floor(Math.random() * ackSignUps.length)];
    const res = await call('signIn', 'POST', '/api/auth/sessions?client_type=mobile', {
      body: { email: account?.email, password: PASSWORD },
    });
    if (res.status === 200) freshSessions.push(acknowledge('signIn', res.body));
    return res;
  };

  // An administrator (for the directory), a user (for the Bearer reads) and a few accounts to sign in to.
  const adminSignIn = await call('signIn', 'POST', '/api/auth/sessions?client_type=mobile', {
    body: { email: ADMIN_EMAIL, password: ADMIN_PASSWORD },
  });
  t.equal(adminSignIn.status, 200, 'the administrator signs in');
  const adminToken = String(adminSignIn.body?.accessToken);
  for (let i = 0; i < 4; i++) t.equal((await signUp()).status, 201, 'a setup sign-up');
  const userToken = String((await signIn()).body?.accessToken);

  /**
   * One chain of refreshes: rotates its token on 200, keeps it on 503 and tries again. A 401
   * REFRESH_TOKEN_REUSED right after a 503 means the rotation had committed and only its answer was
   * lost with the connection: allowed then (the service cannot know), counted and reported.
   */
  const ambiguousRefreshes: Outcome[] = [];
  function refresher() {
    let session: AckSession | undefined;
    let uncertain = false;
    return async () => {
      session ??= freshSessions.shift();
      if (session === undefined) return undefined;
      const res = await call('refresh', 'POST', '/api/auth/refresh?client_type=mobile', {
        body: { refreshToken: session.refreshToken },
      });
      if (res.status === 200) {
        session = acknowledge('refresh', res.body);
        uncertain = false;
      } else if (res.status === 503) {
        uncertain = true;
      } else if (uncertain && res.status === 401 && res.error === 'REFRESH_TOKEN_REUSED') {
        ambiguousRefreshes.push(res);
        session = undefined;
        uncertain = false;
      }
      return res;
    };
  }

  const requestFor = (op: Op): (() => Promise<Outcome | undefined>) => {
    switch (op) {
      case 'signUp':
        return signUp;
      case 'signIn':
        return signIn;
      case 'refresh':
        return refresher();
      case 'health':
        return () => call('health', 'GET', '/api/health');
      case 'listUsers':
        return () => call('listUsers', 'GET', '/api/auth/users?limit=20&search=outage', { token: adminToken });
      case 'realtime':
        return () => call('realtime', 'GET', '/api/realtime/permissions', { token: userToken });
      case 'current':
        return () => call('current', 'GET', '/api/auth/sessions/current', { token: userToken });
    }
  };

  let running = true;
  let paused = false;
  // Registered after the app's teardown, so run before it: the clients stop first, even on failure.
  t.teardown(() => {
    running = false;
  });
  const workerLoops: Promise<void>[] = [];
  for (const op of OPS) {
    for (let i = 0; i < WORKERS[op]; i++) {
      const next = requestFor(op);
      const gapMs = op === 'signUp' || op === 'signIn' ? 40 : 15;
      workerLoops.push(
        (async () => {
          while (running) {
            if (paused) {
              await pause(10);
              continue;
            }
            await next();
            await pause(gapMs + Math.random() * 10);
          }
        })(),
      );
    }
  }

  /** Every operation once, concurrently: true when all succeeded. */
  const probes = Object.fromEntries(OPS.map((op) => [op, requestFor(op)])) as Record<Op, ReturnType<typeof requestFor>>;
  async function roundOfEveryOperation(): Promise<{ ok: boolean; statuses: Record<string, number> }> {
    const results = await Promise.all(OPS.map(async (op) => [op, await probes[op]()] as const));
    return {
      ok: results.every(([op, r]) => r?.status === SUCCESS[op]),
      statuses: Object.fromEntries(results.map(([op, r]) => [op, r?.status ?? -1])),
    };
  }

  /** Runs `fn` on a connection of its own to the app's database. */
  const asAdmin = async <T>(fn: (client: pg.Client) => Promise<T>): Promise<T> => {
    const client = new pg.Client({ connectionString: cluster.urlOf('app') });
    client.on('error', () => {});
    await client.connect();
    try {
      return await fn(client);
    } finally {
      await client.end().catch(() => {});
    }
  };

  // ---- baseline -------------------------------------------------------------------------------------
  phase = 'baseline';
  await pause(STEADY_MS);

  // ---- idle pooled connections killed (57P01) while the database stays up ---------------------------
  phase = 'idle connections killed';
  paused = true;
  while (inFlight > 0) await pause(5);
  const terminated = await asAdmin(async (client) => {
    const killed = await client.query(
      `select count(*) filter (where pg_terminate_backend(pid))::int as n from pg_stat_activity
       where datname = 'app' and pid <> pg_backend_pid() and backend_type = 'client backend'`,
    );
    return killed.rows[0].n as number;
  });
  await pause(250);
  const afterKill = await roundOfEveryOperation();
  t.ok(terminated >= 2, `idle connections were terminated (${terminated}, the policy listener's among them)`);
  t.ok(afterKill.ok, 'after idle pooled connections were killed, the next round of every operation succeeds', {
    statuses: afterKill.statuses,
  });
  paused = false;
  phase = 'steady 0';
  await pause(STEADY_MS);

  // ---- outages --------------------------------------------------------------------------------------
  const plans: { mode: 'fast' | 'immediate'; saturatePool: boolean }[] = [
    { mode: 'fast', saturatePool: false },
    { mode: 'immediate', saturatePool: false },
    { mode: 'immediate', saturatePool: true },
    { mode: 'fast', saturatePool: false },
  ];
  const outages: Outage[] = [];
  /** The windows in which the test held requests on a lock of its own (saturated outages, until the stop). */
  const heldByTheTest: Array<{ from: number; until: number }> = [];
  for (const [index, plan] of plans.entries()) {
    const label = `outage ${index + 1} (${plan.mode}${plan.saturatePool ? ', pool saturated' : ''})`;
    const faultAt = performance.now();
    const faultAtWall = Date.now();
    phase = label;
    let locker: pg.Client | undefined;
    let blockedConnections: number | undefined;
    let inFlightAtStop: number | undefined;
    let saturating: Promise<Outcome | undefined>[] = [];
    let saturation: unknown;
    if (plan.saturatePool) {
      // Every pooled connection blocks on a lock and more requests queue for the pool; then the
      // server goes away under all of them.
      locker = new pg.Client({ connectionString: cluster.urlOf('app') });
      locker.on('error', () => {});
      await locker.connect();
      await locker.query('begin');
      await locker.query('lock table users in access exclusive mode');
      // The workers alone may not fill the pool: a refresher without a session sends nothing, and
      // reads answered from a cache never wait. Ten more directory reads make sure they do.
      saturating = Array.from({ length: 10 }, () => probes.listUsers());
      blockedConnections = 0;
      // Up to 10 s: right after the outage before, the pool may still be opening some of its
      // connections again (a loaded machine was seen with 8 blocked and 2 still opening after 3 s).
      for (const deadline = performance.now() + 10_000; performance.now() < deadline; await pause(20)) {
        const r = await locker.query(
          `select count(*)::int as n from pg_stat_activity where datname = 'app' and wait_event_type = 'Lock'`,
        );
        blockedConnections = r.rows[0].n as number;
        if (blockedConnections >= 10) break;
      }
      // What the pool and the server saw then, shown if the check below fails.
      const backends = await locker.query(
        `select state, wait_event_type, wait_event, left(query, 60) as query from pg_stat_activity
          where datname = 'app' and pid <> pg_backend_pid()`,
      );
      saturation = { pool: poolStats(), backends: backends.rows };
      inFlightAtStop = inFlight;
    }
    const stoppingAt = performance.now();
    // Until the stop, requests wait on the test's own lock (as long as the pool takes to fill, up
    // to 10 s above): their time to an answer counts from the stop, when the outage begins.
    if (plan.saturatePool) heldByTheTest.push({ from: faultAt, until: stoppingAt });
    const stopMs = await cluster.stop(plan.mode);
    await locker?.end().catch(() => {});
    await pause(Math.max(0, OUTAGE_MS - (performance.now() - stoppingAt)));
    const startMs = await cluster.start();
    const startedAt = performance.now();
    phase = `recovery ${index + 1}`;
    let recoveryRounds = 0;
    for (;;) {
      recoveryRounds++;
      if ((await roundOfEveryOperation()).ok || performance.now() - startedAt > 15_000) break;
      await pause(50);
    }
    await Promise.all(saturating);
    outages.push({
      label,
      faultAt,
      faultAtWall,
      stoppingAt,
      stopMs,
      startMs,
      startedAt,
      recoveredAt: performance.now(),
      recoveredAtWall: Date.now(),
      recoveryRounds,
      blockedConnections,
      inFlightAtStop,
      saturation,
    });
    phase = `steady ${index + 1}`;
    await pause(STEADY_MS);
  }

  // ---- a frozen server: connections stay open and nothing answers -----------------------------------
  // Not a stop: the pool's idle connections look alive. Health must still say so within its
  // deadline (the other operations would wait for the server: see the report). Traffic pauses.
  phase = 'frozen';
  paused = true;
  while (inFlight > 0) await pause(5);
  const frozenAt = performance.now();
  cluster.freeze();
  // Resumed after a while whatever happens, so that a health check without a deadline shows up as
  // a slow 200 rather than as a test waiting for ever.
  let thawedAt = 0;
  const thaw = () => {
    cluster.thaw();
    thawedAt ||= performance.now();
  };
  const thawTimer = setTimeout(thaw, HEALTH_DEADLINE_MS + 1_500);
  let frozenHealth: Outcome[];
  try {
    frozenHealth = await Promise.all([1, 2, 3].map(() => call('health', 'GET', '/api/health')));
  } finally {
    clearTimeout(thawTimer);
    thaw();
  }
  let healthBack: Outcome | undefined;
  for (let i = 0; i < 100; i++) {
    healthBack = await call('health', 'GET', '/api/health');
    if (healthBack.status === 200) break;
    await pause(20);
  }
  const afterThaw = await roundOfEveryOperation();
  const frozenWindow = { faultAt: frozenAt, recoveredAt: performance.now() };
  const frozenLatencies = frozenHealth.map((o) => Math.round(o.answeredAt - o.sentAt));
  t.same(
    frozenHealth.map((o) => `${o.status} ${o.error ?? ''}`),
    ['503 SERVICE_UNAVAILABLE', '503 SERVICE_UNAVAILABLE', '503 SERVICE_UNAVAILABLE'],
    'frozen server: GET /api/health answers 503',
  );
  t.ok(
    Math.max(...frozenLatencies) <= HEALTH_DEADLINE_MS + 1_000,
    `frozen server: within its ${HEALTH_DEADLINE_MS} ms deadline (${frozenLatencies.join(', ')} ms)`,
  );
  t.equal(healthBack?.status, 200, 'frozen server: health is 200 again once it resumes');
  t.ok(afterThaw.ok, 'frozen server: every operation works once it resumes', { statuses: afterThaw.statuses });
  t.comment(
    `frozen server: health 503 in ${frozenLatencies.join(', ')} ms; 200 again ${Math.round(
      (healthBack?.answeredAt ?? 0) - thawedAt,
    )} ms after it resumed`,
  );

  running = false;
  await Promise.all(workerLoops);
  phase = 'end';

  // ---- 1. every answer is a success, or 503 SERVICE_UNAVAILABLE with Retry-After during an outage ----
  const overlapsOutage = (o: Outcome) =>
    [...outages, frozenWindow].some((w) => o.sentAt <= w.recoveredAt && o.answeredAt >= w.faultAt);
  const unexpected: string[] = [];
  for (const o of outcomes) {
    const what = `${o.phase}: ${o.op} -> ${o.clientError ?? `${o.status} ${o.error ?? ''}`}`;
    if (o.clientError !== undefined) unexpected.push(what);
    else if (o.status === SUCCESS[o.op]) continue;
    else if (o.status === 503) {
      if (o.error !== 'SERVICE_UNAVAILABLE' || o.retryAfter === undefined) unexpected.push(`${what} (no Retry-After)`);
      else if (!overlapsOutage(o)) unexpected.push(`${what} (outside any outage)`);
    } else if (!ambiguousRefreshes.includes(o)) unexpected.push(what);
  }
  t.same(
    unexpected.slice(0, 20),
    [],
    `every answer is a success, or 503 SERVICE_UNAVAILABLE with Retry-After during an outage (${unexpected.length} others)`,
  );
  t.equal(outcomes.filter((o) => o.status >= 500 && o.status !== 503).length, 0, 'no 500 or other 5xx at all');

  // ---- 2. bounded latency ---------------------------------------------------------------------------
  for (const name of new Set(outcomes.map((o) => o.phase))) {
    const list = outcomes.filter((o) => o.phase === name);
    const latencies = list.map((o) => o.answeredAt - o.sentAt).sort((a, b) => a - b);
    const ok = list.filter((o) => o.status === SUCCESS[o.op]).length;
    const refused = list.filter((o) => o.status === 503);
    const unavailable = refused.length;
    const slowest503 = Math.max(0, ...refused.map((o) => o.answeredAt - o.sentAt));
    t.comment(
      `${name}: ${list.length} requests, ${ok} ok, ${unavailable} x 503, ${list.length - ok - unavailable} other; ` +
        `max ${Math.round(latencies.at(-1) ?? 0)} ms, p99 ${Math.round(latencies[Math.floor(latencies.length * 0.99)] ?? 0)} ms` +
        (unavailable > 0 ? `, slowest 503 ${Math.round(slowest503)} ms` : ''),
    );
  }
  const latency = (o: Outcome) => {
    const held = heldByTheTest.find((w) => o.sentAt >= w.from && o.sentAt < w.until);
    return o.answeredAt - (held === undefined ? o.sentAt : held.until);
  };
  const slowest = outcomes.reduce((a, b) => (latency(b) > latency(a) ? b : a));
  t.ok(
    latency(slowest) <= LATENCY_BOUND_MS,
    `no request took longer than ${LATENCY_BOUND_MS} ms (slowest: ${slowest.op} in ${slowest.phase}, ` +
      `${Math.round(latency(slowest))} ms)`,
  );

  // ---- 3. health says so ----------------------------------------------------------------------------
  for (const w of outages) {
    const health503 = outcomes.filter(
      (o) => o.op === 'health' && o.status === 503 && o.sentAt >= w.faultAt && o.sentAt <= w.startedAt,
    ).length;
    t.ok(health503 > 0, `${w.label}: GET /api/health answered 503 during the outage (${health503} times)`);
  }
  t.equal((await call('health', 'GET', '/api/health')).status, 200, 'GET /api/health answers 200 afterwards');

  // ---- 4. recovery within 5 s, no restart -------------------------------------------------------------
  for (const w of outages) {
    const recoveryMs = w.recoveredAt - w.startedAt;
    const saturated =
      w.blockedConnections === undefined
        ? ''
        : `; ${w.blockedConnections} pooled connections blocked and ${w.inFlightAtStop} requests in flight at the stop`;
    t.comment(
      `${w.label}: stop ${Math.round(w.stopMs)} ms, then down ${Math.round(w.startedAt - w.startMs - w.stoppingAt - w.stopMs)} ms, ` +
        `start ${Math.round(w.startMs)} ms; every operation worked ${Math.round(recoveryMs)} ms after the database ` +
        `accepted connections (${w.recoveryRounds} round${w.recoveryRounds === 1 ? '' : 's'})${saturated}`,
    );
    t.ok(recoveryMs <= RECOVERY_BOUND_MS, `${w.label}: every operation works again within 5 s`);
    if (w.blockedConnections !== undefined) {
      // Ten, or nine while the tenth is being replaced (a connection that failed is discarded and
      // reopened: seen in pg_stat_activity as nine lock waiters and no tenth backend yet).
      t.ok(
        w.blockedConnections >= 9,
        `${w.label}: the pooled connections were blocked on the lock (${w.blockedConnections} of 10)`,
        { saturation: w.saturation },
      );
      t.ok(
        (w.inFlightAtStop ?? 0) > 10,
        `${w.label}: more requests in flight than the pool has connections (${w.inFlightAtStop})`,
      );
    }
  }

  // What the service logged: the causes of its 503s, and the policy listener's reconnections.
  const logs = logLines.map((l) => JSON.parse(l) as { level: number; time: number; msg: string; cause?: string });
  const unavailable = 'request failed: dependency unavailable';
  t.same(
    logs.filter((l) => l.msg === 'request failed').map((l) => l.msg),
    [],
    'no request failed with a server error (500)',
  );
  const causes = new Map<string, number>();
  for (const line of logs.filter((l) => l.msg === unavailable)) {
    const key = String(line.cause ?? '?').slice(0, 60);
    causes.set(key, (causes.get(key) ?? 0) + 1);
  }
  t.comment(`causes of the 503s (server log): ${JSON.stringify(Object.fromEntries(causes))}`);
  // One LISTEN connection (realtime policies and session revocations): it warns once per outage.
  const listeners = ['notification listener lost'];
  const listenerLost = logs.filter((l) => listeners.some((prefix) => l.msg.startsWith(prefix)));
  for (const w of outages) {
    for (const prefix of listeners) {
      const n = listenerLost.filter(
        (l) => l.msg.startsWith(prefix) && l.time >= w.faultAtWall && l.time <= w.recoveredAtWall + 1_000,
      ).length;
      t.ok(n <= 1, `${w.label}: "${prefix}" warned once, not at every retry (${n} warnings)`);
    }
  }
  const others = logs.filter(
    (l) => l.level >= 40 && l.msg !== unavailable && l.msg !== 'request failed' && !listenerLost.includes(l),
  );
  t.same(
    others.map((l) => l.msg),
    [],
    'nothing else was logged at warn or above',
  );

  // ---- 5. no acknowledged write lost --------------------------------------------------------------------
  await asAdmin(async (client) => {
    const users = await client.query('select count(*)::int as n from users where email = any($1::text[])', [
      ackSignUps.map((s) => s.email),
    ]);
    const sids = [...new Set(ackSessions.map((s) => s.sid))];
    const sessions = await client.query('select count(*)::int as n from sessions where id = any($1::uuid[])', [sids]);
    // Each refresh token handed out is the session's current one, or one rotated away from it since.
    const tokens = await client.query(
      `select count(*)::int as n from unnest($1::text[], $2::uuid[]) as a(hash, sid)
       where exists (select 1 from sessions s where s.id = a.sid and s.refresh_token_hash = a.hash)
          or exists (select 1 from rotated_refresh_tokens r where r.session_id = a.sid and r.token_hash = a.hash)`,
      [ackSessions.map((s) => sha256Hex(s.refreshToken)), ackSessions.map((s) => s.sid)],
    );
    // Sign-up commits the account, then opens the session in a statement of its own: an outage in
    // between answers 503 for an account that exists (a retry gets 409; signing in works).
    const orphans = await client.query('select count(*)::int as n from users where email = any($1::text[])', [
      refusedSignUps,
    ]);
    const by = (origin: AckSession['origin']) => ackSessions.filter((s) => s.origin === origin).length;
    t.comment(
      `acknowledged: ${ackSignUps.length} sign-ups, ${ackSessions.length} sessions (${by('signUp')} from sign-up, ` +
        `${by('signIn')} sign-in, ${by('refresh')} refresh) over ${sids.length} session rows; found ` +
        `${users.rows[0].n} users, ${sessions.rows[0].n} session rows, ${tokens.rows[0].n} refresh tokens; ` +
        `${ambiguousRefreshes.length} refreshes committed whose answer was lost; ${refusedSignUps.length} sign-ups ` +
        `answered 503, ${orphans.rows[0].n} of them with their account created`,
    );
    t.equal(users.rows[0].n, ackSignUps.length, 'every sign-up answered 201 is in the database');
    t.equal(sessions.rows[0].n, sids.length, 'every session answered 200/201 is in the database');
    t.equal(tokens.rows[0].n, ackSessions.length, 'every refresh token handed out is recorded for its session');

    // The process's LISTEN connection (src/db/notification-listener.ts): one, no leaked ones.
    const listeners = await client.query(
      `select count(*)::int as n from pg_stat_activity
       where datname = 'app' and pid <> pg_backend_pid() and application_name = $1`,
      [LISTENER_APPLICATION_NAME],
    );
    t.equal(listeners.rows[0].n, 1, 'the policy cache listens again, on exactly one connection');
    await client.query('create policy outage_probe on realtime.channels for select to authenticated using (true)');
  });
  let probeSeenMs: number | undefined;
  for (const began = performance.now(); performance.now() - began < 3_000; await pause(20)) {
    const r = await call('realtime', 'GET', '/api/realtime/permissions', { token: userToken });
    if (JSON.stringify(r.body).includes('outage_probe')) {
      probeSeenMs = performance.now() - began;
      break;
    }
  }
  t.ok(probeSeenMs !== undefined, `a policy created afterwards is served (after ${Math.round(probeSeenMs ?? -1)} ms)`);
  t.ok(ackSignUps.length > 20 && ackSessions.length > 100, 'the traffic acknowledged enough writes to mean something');
}

/** The app on a migrated database of the private cluster, listening on a free port, with its log lines collected. */
async function startService(
  t: Test,
  cluster: PrivatePostgres,
): Promise<{ base: string; logLines: string[]; poolStats: () => unknown }> {
  const creator = new pg.Client({ connectionString: cluster.url });
  await creator.connect();
  await creator.query('create database app');
  await creator.end();
  const url = cluster.urlOf('app');
  const handle = await openDatabase({ kind: 'postgres', url });
  t.teardown(() => handle.close());
  await migrateToLatest(handle.db);
  const smtp = await startSmtpCapture();
  t.teardown(() => smtp.close());
  const config = loadConfig({
    NODE_ENV: 'test',
    DATABASE_URL: url,
    SMTP_URL: smtp.url,
    REQUIRE_EMAIL_VERIFICATION: 'false',
    ADMIN_EMAIL,
    ADMIN_PASSWORD,
    RATE_LIMIT_SIGN_UP: '1000000',
    RATE_LIMIT_SIGN_IN: '1000000',
    RATE_LIMIT_REFRESH: '1000000',
    RATE_LIMIT_VERIFY: '1000000',
    RATE_LIMIT_SEND_VERIFICATION: '1000000',
  });
  const logLines: string[] = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n')) if (line !== '') logLines.push(line);
      done();
    },
  });
  const app = await buildApp(config, { database: handle, logger: { level: 'warn', stream } });
  checkResponsesAgainstContract(app);
  t.teardown(() => app.close());
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = app.server.address();
  if (address === null || typeof address === 'string') throw new Error('the app does not listen on TCP');
  return { base: `http://127.0.0.1:${address.port}`, logLines, poolStats: handle.poolStats };
}
