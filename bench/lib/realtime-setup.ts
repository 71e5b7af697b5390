/**
 * The realtime benchmark's service side: a fresh PostgreSQL database, two instances of the service
 * on it (as `npm start` runs it) (realtime enabled, one adapter), the users and the channel, and an orderly stop.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import {
  freePort,
  NPM_START,
  projectRoot,
  type RunningService,
  spawnCapturing,
  waitFor200,
} from '../../scripts/lib/service-process.ts';
import { CHANNEL, CHANNEL_PATTERN, hashString, OrderFingerprint } from './realtime-shared.ts';
import { adminAccessToken, startServiceInstance } from './setup.ts';

export type Adapter = 'postgres' | 'redis';

export const REDIS_URL = 'redis://127.0.0.1:6379';

export interface Instance {
  service: RunningService;
  pid: number;
  port: number;
  base: string;
}

/** Drops and creates `name` beside the database `serverUrl` names; returns its URL and the server's version. */
export async function recreateDatabase(serverUrl: string, name: string): Promise<{ url: string; version: string }> {
  if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`not a plain database name: ${name}`);
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    await admin.query(`drop database if exists ${name} with (force)`);
    await admin.query(`create database ${name}`);
    const version = (await admin.query<{ v: string }>(`select current_setting('server_version') as v`)).rows[0]
      ?.v as string;
    return { url: Object.assign(new URL(serverUrl), { pathname: `/${name}` }).toString(), version };
  } finally {
    await admin.end();
  }
}

/**
 * The environment of both instances: the database, the adapter (Redis also gets REDIS_URL), access
 * tokens that outlive the run, no per-connection publish limit, sign-ups that sign in at once (no
 * email round trip), and `extra`.
 */
export function instanceEnv(o: {
  databaseUrl: string;
  adapter: Adapter;
  tokenTtlSeconds: number;
  extra: Record<string, string>;
}): Record<string, string> {
  return {
    DATABASE_URL: o.databaseUrl,
    REALTIME_ADAPTER: o.adapter,
    ACCESS_TOKEN_TTL_SECONDS: String(o.tokenTtlSeconds),
    REQUIRE_EMAIL_VERIFICATION: 'false',
    // Per-connection publish budget out of the way: the publishers each go as fast as the window allows.
    REALTIME_PUBLISH_RATE: '1000000000',
    ...(o.adapter === 'redis' ? { REDIS_URL, REDIS_KEY_PREFIX: 'bench-realtime:' } : {}),
    ...o.extra,
  };
}

/**
 * Starts two instances on the same database, one after the other (the first migrates it), each on
 * its own loopback port; returns them with an administrator's access token.
 */
export async function startInstances(
  started: RunningService[],
  env: Record<string, string>,
): Promise<{ instances: [Instance, Instance]; adminToken: string }> {
  const a = await startServiceInstance(started, env);
  const b = await startServiceInstance(started, env);
  return { instances: [a, b], adminToken: await adminAccessToken(a.base) };
}

/**
 * Starts the ceiling: two bare socket.io servers (bench/bare-realtime-server.ts, with the Node flags
 * of `npm start`), the second relaying its publishes to the first, which orders them.
 */
export async function startCeiling(started: RunningService[]): Promise<[Instance, Instance]> {
  const one = async (env: Record<string, string>): Promise<Instance> => {
    const port = await freePort();
    const service = spawnCapturing(process.execPath, [...NPM_START.flags, 'bench/bare-realtime-server.ts'], {
      cwd: projectRoot,
      env: {
        PATH: process.env.PATH ?? '',
        NODE_ENV: 'production',
        PORT: String(port),
        // As the instances get it: `--cpu-prof` profiles the ceiling too, for a comparison.
        ...(process.env.BENCH_NODE_OPTIONS ? { NODE_OPTIONS: process.env.BENCH_NODE_OPTIONS } : {}),
        ...env,
      },
    });
    started.push(service);
    const base = `http://127.0.0.1:${port}`;
    await waitFor200(`${base}/api/health`, 30_000);
    return { service, pid: service.child.pid as number, port, base };
  };
  const a = await one({});
  return [a, await one({ RELAY_TO: a.base })];
}

/** Stops the instances (SIGTERM; SIGKILL after `graceMs`) and waits for them to exit. */
export async function stopServices(started: RunningService[], graceMs = 10_000): Promise<void> {
  for (const s of started) if (s.child.exitCode === null && s.child.signalCode === null) s.child.kill('SIGTERM');
  await Promise.all(
    started.map(async (s) => {
      const timer = setTimeout(() => s.child.kill('SIGKILL'), graceMs);
      await s.exited;
      clearTimeout(timer);
    }),
  );
}

async function json(res: Response, expect: number, what: string): Promise<unknown> {
  const text = await res.text();
  if (res.status !== expect) throw new Error(`${what}: ${res.status} ${text.slice(0, 500)}`);
  return text === '' ? undefined : JSON.parse(text);
}

/** Creates the channel row that admits `bench:room` (POST /api/realtime/channels, administrator). */
export async function createChannel(base: string, adminToken: string): Promise<{ id: string; pattern: string }> {
  const res = await fetch(`${base}/api/realtime/channels`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${adminToken}` },
    body: JSON.stringify({ pattern: CHANNEL_PATTERN, description: 'realtime benchmark' }),
  });
  return (await json(res, 201, `POST /api/realtime/channels ${CHANNEL_PATTERN}`)) as { id: string; pattern: string };
}

export interface BenchUser {
  email: string;
  accessToken: string;
}

/**
 * Signs `count` users up through the API (POST /api/auth/users?client_type=mobile; with
 * REQUIRE_EMAIL_VERIFICATION=false that answers 201 with a session), `concurrency` at a time,
 * alternating between the instances. Each sign-up hashes a password with scrypt (tens of ms).
 */
export async function signUpUsers(
  bases: readonly string[],
  prefix: string,
  count: number,
  concurrency: number,
  onProgress: (done: number) => void = () => {},
): Promise<BenchUser[]> {
  const users: BenchUser[] = new Array(count);
  let next = 0;
  let done = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, count) }, async () => {
      while (next < count) {
        const i = next++;
        const email = `${prefix}-${i}@bench-realtime.invalid`;
        const res = await fetch(`${bases[i % bases.length]}/api/auth/users?client_type=mobile`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ email, password: 'bench-realtime-password', name: `${prefix} ${i}` }),
        });
        const body = (await json(res, 201, `sign-up of ${email}`)) as { accessToken?: unknown };
        if (typeof body.accessToken !== 'string') throw new Error(`sign-up of ${email}: no accessToken in the answer`);
        users[i] = { email, accessToken: body.accessToken };
        onProgress(++done);
      }
    }),
  );
  return users;
}

/**
 * The commit order of the messages of the given publishers on CHANNEL: realtime.messages.seq is
 * assigned under the channel's publish lock, so ordering by it is the order the database committed
 * them in, which every subscriber should have seen. Returns the count and the order fingerprint.
 */
export async function commitOrder(
  databaseUrl: string,
  publisherIds: number[],
): Promise<{ count: number; order: string }> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ id: string }>(
      `select id from realtime.messages
       where channel_name = $1 and (payload->>'publisher')::int = any($2::int[])
       order by seq`,
      [CHANNEL, publisherIds],
    );
    const order = new OrderFingerprint();
    for (const r of rows) order.add(hashString(r.id));
    return { count: rows.length, order: order.toString() };
  } finally {
    await client.end();
  }
}

/**
 * Which service code was measured: the commit, the number of files of src/ changed since, and the
 * newest modification time under src/ (read-only git commands).
 */
export function sourceState(): string {
  const git = (...args: string[]) =>
    execFileSync('git', args, { cwd: projectRoot, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  let newest = 0;
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const file = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(file);
      else newest = Math.max(newest, statSync(file).mtimeMs);
    }
  };
  walk(path.join(projectRoot, 'src'));
  const modified = new Date(newest).toISOString();
  try {
    const changed = git('status', '--porcelain', '--', 'src').split('\n').filter(Boolean).length;
    return `commit ${git('rev-parse', '--short', 'HEAD')}${changed > 0 ? ` with ${changed} files of src/ changed or new` : ''}, src/ last modified ${modified}`;
  } catch {
    return `src/ last modified ${modified} (no git)`;
  }
}
