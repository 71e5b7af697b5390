// deploy/haproxy.cfg, the HAProxy example of docs/operations.md ("Several instances behind a load
// balancer"), run as it is in front of three real service processes on one PostgreSQL database: it
// spreads requests over the instances, carries a realtime socket (WebSocket) and the messages
// published through it, hands the instances each client's own address (X-Forwarded-For, read with
// TRUST_PROXY), and takes out of rotation, within its health check's window, an instance whose
// database is away (503 on /api/health) and one that was killed, while requests go on succeeding.
// The timeouts that would take minutes to exercise are read from the file and held to the guide.

import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import t, { type Test } from 'tap';
import { freePort, projectRoot, spawnCapturing } from '../scripts/lib/service-process.ts';
import { decodeClaims, newEmail, PASSWORD } from './helpers/auth.ts';
import { contractProblem } from './helpers/contract-check.ts';
import { createTestDatabase, usingPostgres } from './helpers/database.ts';
import { type ServiceInstance, startInstances, stopService } from './helpers/instances.ts';
import { collect, RealtimeClients, subscribed, waitForCount } from './helpers/realtime-client.ts';

const CONFIG_FILE = path.join(projectRoot, 'deploy', 'haproxy.cfg');
const METRICS_TOKEN = randomBytes(24).toString('base64url');
/** The address the test's HTTP client connects from (all of 127.0.0.0/8 is loopback on Linux). */
const CLIENT_ADDRESS = '127.0.0.2';
/** What the client writes into X-Forwarded-For itself: the instances must not believe it. */
const FORGED_ADDRESS = '203.0.113.9';
/** Added to the health check's own window for the time HAProxy and a loaded machine take. */
const REMOVAL_SLACK_MS = 1_000;

// ---------------------------------------------------------------------------------------------
// The file, read as HAProxy reads it (sections, keywords, times), for the settings checked as written.

type Section = { name: string; lines: string[][] };

function sections(text: string): Section[] {
  const found: Section[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.replace(/(^|\s)#.*$/, '').trimEnd();
    if (line.trim() === '') continue;
    const words = line.trim().split(/\s+/);
    if (!/^\s/.test(line)) found.push({ name: words.join(' '), lines: [] });
    else found.at(-1)?.lines.push(words);
  }
  return found;
}

/** A time in HAProxy's units (milliseconds when none is given). */
function milliseconds(value: string): number {
  const match = /^(\d+)(us|ms|s|m|h|d)?$/.exec(value);
  if (match === null) throw new Error(`not a HAProxy time: ${value}`);
  const factor = { us: 0.001, ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }[match[2] ?? 'ms'] ?? 1;
  return Number(match[1]) * factor;
}

/** The words after `keyword` in `section`, else in `defaults` (the value in effect there). */
function setting(all: Section[], section: string, ...keyword: string[]): string[] | undefined {
  const lookIn = (name: string) =>
    all
      .find((s) => s.name === name)
      ?.lines.findLast((words) => keyword.every((k, i) => words[i] === k))
      ?.slice(keyword.length);
  return lookIn(section) ?? lookIn('defaults');
}

function timeout(all: Section[], section: string, name: string): number | undefined {
  const words = setting(all, section, 'timeout', name);
  return words?.[0] === undefined ? undefined : milliseconds(words[0]);
}

/** How long after an instance fails its checks take it out: a check within `inter`, then `fall - 1` more. */
function removalWindowMs(all: Section[]): { windowMs: number; described: string } {
  const words = setting(all, 'backend instances', 'default-server') ?? [];
  const option = (name: string) => {
    const i = words.indexOf(name);
    return i === -1 ? undefined : words[i + 1];
  };
  const inter = milliseconds(option('inter') ?? '2000');
  const fastinter = milliseconds(option('fastinter') ?? String(inter));
  const fall = Number(option('fall') ?? '3');
  return {
    windowMs: inter + (fall - 1) * fastinter,
    described: `inter ${inter} ms, then ${fall - 1} × fastinter ${fastinter} ms`,
  };
}

// ---------------------------------------------------------------------------------------------
// HAProxy, the instances and their database.

interface Balancer {
  port: number;
  url: string;
  statsPort: number;
  output(): string;
}

/** Runs `haproxy -db -f deploy/haproxy.cfg` with the instances' addresses; killed when `t` ends. */
async function startHaproxy(t: Test, instances: ServiceInstance[]): Promise<Balancer> {
  const port = await freePort();
  const statsPort = await freePort();
  const haproxy = spawnCapturing('haproxy', ['-db', '-f', CONFIG_FILE], {
    cwd: projectRoot,
    env: {
      PATH: process.env.PATH ?? '',
      LB_BIND: `127.0.0.1:${port}`,
      LB_STATS_BIND: `127.0.0.1:${statsPort}`,
      ...Object.fromEntries(instances.map((instance, i) => [`INSTANCE_${i + 1}`, `127.0.0.1:${instance.port}`])),
    },
  });
  const { child, exited } = haproxy;
  const output = () => haproxy.output();
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null && child.pid !== undefined) {
      process.kill(child.pid, 'SIGTERM');
      await exited;
    }
  });
  const balancer = { port, url: `http://127.0.0.1:${port}`, statsPort, output };
  for (const deadline = Date.now() + 5_000; ; await pause(50)) {
    if (child.exitCode !== null) throw new Error(`haproxy exited with ${child.exitCode}:\n${output()}`);
    const states = await serverStates(balancer).catch(() => undefined);
    if (states !== undefined && instances.every((_, i) => states.get(`instance${i + 1}`) === 'UP')) break;
    if (Date.now() > deadline) {
      const seen = [...(states ?? [])].map(([server, state]) => `${server} ${state}`).join(', ');
      throw new Error(`haproxy did not report every instance UP within 5 s (${seen}):\n${output().slice(-2_000)}`);
    }
  }
  return balancer;
}

/** The state HAProxy gives each server of the `instances` backend (UP, DOWN, "UP 1/3", "no check"…), from its stats CSV. */
async function serverStates(balancer: Balancer): Promise<Map<string, string>> {
  const res = await fetch(`http://127.0.0.1:${balancer.statsPort}/stats;csv`);
  const [header = '', ...rows] = (await res.text()).trim().split('\n');
  const columns = header.replace(/^# /, '').split(',');
  const at = (name: string) => columns.indexOf(name);
  const states = new Map<string, string>();
  for (const row of rows) {
    const cells = row.split(',');
    if (cells[at('pxname')] === 'instances') states.set(cells[at('svname')] ?? '', cells[at('status')] ?? '');
  }
  return states;
}

/**
 * A TCP relay to PostgreSQL for one instance: `cut()` ends its connections and stops listening, so
 * that this instance alone loses its database (its /api/health answers 503) while the others keep theirs.
 */
async function databaseRelay(t: Test, databaseUrl: string) {
  const target = new URL(databaseUrl);
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    for (const [a, b] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      sockets.add(a);
      a.on('error', () => b.destroy());
      a.on('close', () => {
        sockets.delete(a);
        b.destroy();
      });
      a.pipe(b);
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  const cut = () => {
    if (server.listening) server.close();
    for (const socket of sockets) socket.destroy();
  };
  t.teardown(cut);
  const url = new URL(databaseUrl);
  url.host = `127.0.0.1:${port}`;
  return { url: url.toString(), cut };
}

// ---------------------------------------------------------------------------------------------
// Requests through the balancer, from CLIENT_ADDRESS, and to an instance's own port.

interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
  // biome-ignore lint/suspicious/noExplicitAny: test code reads what it asserts on
  json(): any;
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** One request on a connection of its own from CLIENT_ADDRESS; the answer is checked against openapi.yaml. */
function call(
  t: Test,
  balancer: Balancer,
  method: 'GET' | 'POST',
  pathAndQuery: string,
  options: { token?: string; body?: unknown } = {},
): Promise<Reply> {
  const payload = options.body === undefined ? undefined : JSON.stringify(options.body);
  const headers: Record<string, string> = { 'x-forwarded-for': FORGED_ADDRESS };
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  if (payload !== undefined) headers['content-type'] = 'application/json';
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port: balancer.port,
        localAddress: CLIENT_ADDRESS,
        method,
        path: pathAndQuery,
        headers,
        agent: false,
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          body += chunk;
        });
        res.on('end', () => {
          const status = res.statusCode ?? 0;
          const problem = contractProblem({
            method,
            routePath: pathAndQuery.split('?')[0],
            status,
            contentType: String(res.headers['content-type'] ?? ''),
            body: body === '' ? undefined : body,
          });
          if (problem !== undefined) t.fail(`${method} ${pathAndQuery} through HAProxy: ${problem}`);
          resolve({ status, headers: res.headers, body, json: () => JSON.parse(body) });
        });
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

/** How many requests of `operation` an instance has answered with `status`, from its own /metrics. */
async function answered(instance: ServiceInstance, operation: string, status = 200): Promise<number> {
  const res = await fetch(`${instance.url}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
  const text = await res.text();
  const line = text
    .split('\n')
    .find((l) =>
      l.startsWith(`http_request_duration_seconds_count{operation="${operation}",status_code="${String(status)}"}`),
    );
  return line === undefined ? 0 : Number(line.split(' ').at(-1));
}

/** The number of sockets an instance holds, from its own /metrics. */
async function connectedSockets(instance: ServiceInstance): Promise<number> {
  const res = await fetch(`${instance.url}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
  const line = (await res.text()).split('\n').find((l) => l.startsWith('realtime_connected_sockets '));
  return Number(line?.split(' ').at(-1) ?? Number.NaN);
}

// ---------------------------------------------------------------------------------------------

async function scenario(t: Test) {
  const setupStarted = Date.now();
  const config = sections(readFileSync(CONFIG_FILE, 'utf8'));

  t.test('the settings that take minutes to exercise are those the operator guide asks for', async (t) => {
    const tunnel = timeout(config, 'backend instances', 'tunnel');
    t.ok(tunnel !== undefined && tunnel >= 3_600_000, `timeout tunnel (${tunnel} ms) is at least an hour`);
    const client = timeout(config, 'frontend accounts', 'client');
    t.ok(client !== undefined && client > 60_000, `timeout client (${client} ms) is above a minute`);
    const keepAlive = timeout(config, 'frontend accounts', 'http-keep-alive');
    t.ok(keepAlive !== undefined && keepAlive < 72_000, `timeout http-keep-alive (${keepAlive} ms) is below 72 s`);
    const serverClose = ['frontend accounts', 'backend instances'].some((s) =>
      ['http-server-close', 'httpclose'].some((o) => setting(config, s, 'option', o) !== undefined),
    );
    t.ok(serverClose, 'no idle connection to an instance outlives its 72 s keep-alive: option http-server-close');
    t.notOk(
      config.some((s) => s.lines.some((w) => w[0] === 'cookie' || w[0] === 'stick-table' || w[0] === 'stick')),
      'no sticky sessions',
    );
  });

  const database = await createTestDatabase();
  const relay = await databaseRelay(t, database.url);
  let instances: ServiceInstance[] = [];
  // Teardowns run last-registered first: the instances stop before the relay closes and the database goes.
  t.teardown(async () => {
    await Promise.all(instances.map((i) => stopService(i.service, 5_000)));
    await database.drop();
  });
  await database.handle.db.insertInto('realtime.channels').values({ pattern: 'room:%' }).execute();
  const databaseReadyMs = Date.now() - setupStarted;
  const env = {
    NODE_ENV: 'test',
    LOG_LEVEL: 'warn',
    DATABASE_URL: database.url,
    JWT_SECRET: randomBytes(32).toString('base64url'),
    // One proxy in front: each instance takes the last address of X-Forwarded-For, the one HAProxy added.
    TRUST_PROXY: 'true',
    REQUIRE_EMAIL_VERIFICATION: 'false',
    METRICS_TOKEN,
  };
  // A and C reach the database directly, B through the relay (cut later).
  const started = await Promise.all([
    startInstances(['A'], env, { timeoutMs: 60_000 }),
    startInstances(['B'], { ...env, DATABASE_URL: relay.url }, { timeoutMs: 60_000 }),
    startInstances(['C'], env, { timeoutMs: 60_000 }),
  ]);
  instances = started.flat();
  const [a, , c] = instances as [ServiceInstance, ServiceInstance, ServiceInstance];
  const balancer = await startHaproxy(t, instances);
  t.teardown(() => {
    if (t.passing()) return;
    t.comment(`haproxy printed:\n${balancer.output().slice(-4_000)}`);
  });
  t.comment(
    `database ready after ${databaseReadyMs} ms, three instances and HAProxy after ${Date.now() - setupStarted} ms`,
  );

  // A user of the service, signed up through the balancer.
  const signedUp = await call(t, balancer, 'POST', '/api/auth/users?client_type=mobile', {
    body: { email: newEmail('haproxy'), password: PASSWORD },
  });
  t.equal(signedUp.status, 201, 'sign-up through HAProxy: 201');
  const accessToken: string = signedUp.json().accessToken;
  const userId = String(decodeClaims(accessToken).sub);

  t.test('requests are spread over the three instances, none sticking', async (t) => {
    const operation = 'getPublicAuthConfig';
    const before = await Promise.all(instances.map((i) => answered(i, operation)));
    const count = 30;
    for (let i = 0; i < count; i++) {
      const res = await call(t, balancer, 'GET', '/api/auth/public-config');
      if (res.status !== 200) t.fail(`request ${i}: ${res.status} ${res.body.slice(0, 200)}`);
    }
    const after = await Promise.all(instances.map((i) => answered(i, operation)));
    const each = after.map((n, i) => n - (before[i] ?? 0));
    t.equal(
      each.reduce((x, y) => x + y, 0),
      count,
      'every request was answered by one of them',
    );
    t.same(each, [10, 10, 10], `round robin: 10 each (A, B, C answered ${each.join(', ')})`);
  });

  t.test('the instances see the client’s own address, not the one it wrote into X-Forwarded-For', async (t) => {
    const res = await call(t, balancer, 'GET', '/api/auth/sessions', { token: accessToken });
    t.equal(res.status, 200);
    t.same(
      res.json().sessions.map((s: { ip: string }) => s.ip),
      [CLIENT_ADDRESS],
      `the session opened by the sign-up records ${CLIENT_ADDRESS}`,
    );
  });

  t.test('a socket connects over WebSocket and receives what is published through HAProxy', async (t) => {
    const clients = new RealtimeClients(t, balancer.url);
    const channel = 'room:lobby';
    const first = await clients.connect(accessToken);
    const second = await clients.connect(accessToken);
    for (const socket of [first, second]) {
      t.equal(socket.io.engine.transport.name, 'websocket', 'the transport is WebSocket');
      await subscribed(socket, channel);
    }
    const held = await Promise.all(instances.map(connectedSockets));
    t.equal(
      held.filter((n) => n === 1).length,
      2,
      `the two sockets are on two instances (A, B, C hold ${held.join(', ')})`,
    );
    const received = [first, second].map((s) => collect<Record<string, unknown>>(s, 'note'));
    const published = await call(t, balancer, 'POST', '/api/realtime/messages', {
      token: accessToken,
      body: { channel, event: 'note', payload: { text: 'through the balancer' } },
    });
    t.equal(published.status, 201, 'published over HTTP through HAProxy: 201');
    for (const list of received) await waitForCount(list, 1, 5_000);
    for (const list of received) {
      t.match(list[0], {
        text: 'through the balancer',
        meta: { messageId: published.json().messageId, senderId: userId },
      });
    }
    t.same(clients.violations(), [], 'everything sent and received matched asyncapi.yaml');
  });

  t.test('an instance without its database, and a killed one, leave the rotation; requests go on', async (t) => {
    const { windowMs, described } = removalWindowMs(config);
    const clients = new RealtimeClients(t, balancer.url);
    const failedAt = Date.now();
    relay.cut(); // B: /api/health answers 503 from now on
    c.service.child.kill('SIGKILL');
    await c.service.exited;

    const statuses: number[] = [];
    let removedAfter: number | undefined;
    while (Date.now() - failedAt < windowMs + REMOVAL_SLACK_MS) {
      statuses.push((await call(t, balancer, 'GET', '/api/auth/sessions', { token: accessToken })).status);
      const states = await serverStates(balancer);
      if (states.get('instance2') === 'DOWN' && states.get('instance3') === 'DOWN') {
        removedAfter = Date.now() - failedAt;
        break;
      }
      await pause(50);
    }
    const states = await serverStates(balancer);
    t.ok(
      removedAfter !== undefined,
      `B (503) and C (killed) are DOWN within ${windowMs} ms (${described}) + ${REMOVAL_SLACK_MS} ms: ` +
        `after ${removedAfter ?? 'more'} ms (${[...states].map(([k, v]) => `${k} ${v}`).join(', ')})`,
    );
    t.equal(states.get('instance1'), 'UP', 'A stays UP');
    t.comment(
      `during the window: ${statuses.length} requests, ${statuses.filter((s) => s >= 500).length} answered 5xx ` +
        '(B’s own 503 until it was taken out)',
    );

    const after: number[] = [];
    for (let i = 0; i < 20; i++) {
      after.push((await call(t, balancer, 'GET', '/api/auth/sessions', { token: accessToken })).status);
    }
    t.same(
      after.filter((s) => s !== 200),
      [],
      'after the window every request succeeds',
    );

    // (Only the handshake: a subscription's presence answer waits, up to socket.io's 5 s, for the
    // instances that went away until their heartbeats are missed.)
    const socket = await clients.connect(accessToken);
    t.equal(socket.io.engine.transport.name, 'websocket', 'a new socket connects over WebSocket');
    t.equal(await connectedSockets(a), 1, 'on A, the one instance left');
    t.same(clients.violations(), [], 'everything sent and received matched asyncapi.yaml');
  });

  t.test('with no instance left, HAProxy answers 503 in the service’s error shape', async (t) => {
    a.service.child.kill('SIGKILL');
    await a.service.exited;
    const res = await call(t, balancer, 'GET', '/api/auth/sessions', { token: accessToken });
    t.equal(res.status, 503);
    t.same(res.json(), {
      error: 'SERVICE_UNAVAILABLE',
      message: 'No instance of the service is available',
      statusCode: 503,
    });
    t.equal(res.headers['retry-after'], '5', 'with Retry-After');
  });
}

const NAME = 'deploy/haproxy.cfg in front of three instances';
const haproxyMissing = spawnSync('haproxy', ['-v']).error !== undefined;
if (!usingPostgres) {
  t.test(NAME, { skip: 'needs PostgreSQL (three processes on one database): run it with `npm run test:pg`' }, scenario);
} else if (haproxyMissing && process.env.CI === 'true') {
  t.fail(`${NAME}: the haproxy binary is not installed, and CI requires it (.ci/run installs Debian's package)`);
} else if (haproxyMissing) {
  t.test(NAME, { skip: 'the haproxy binary is not installed (Debian: apt-get install haproxy)' }, scenario);
} else {
  t.test(NAME, scenario);
}
