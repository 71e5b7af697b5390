/**
 * The cluster benchmark's machinery (bench/cluster.ts): a PostgreSQL primary and a streaming
 * replica (private clusters from the machine's binaries, test/helpers/private-postgres.ts), a
 * private Redis, one HAProxy process that balances the service's instances over HTTP (the very
 * deploy/haproxy.cfg) and gives them one TCP endpoint for PostgreSQL that a failover moves to the
 * promoted replica (its runtime API), and the instances, started as `npm start` runs them.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import {
  freePort,
  projectRoot,
  type RunningService,
  startService,
  waitFor200,
} from '../../scripts/lib/service-process.ts';
import { createPrivatePostgres, type PrivatePostgres } from '../../test/helpers/private-postgres.ts';
import { type PrivateRedis, startPrivateRedis } from '../../test/helpers/private-redis.ts';

/** What is torn down at the end, last made first. */
export class Teardowns {
  private readonly fns: (() => unknown)[] = [];
  teardown(fn: () => unknown): void {
    this.fns.push(fn);
  }
  async run(): Promise<void> {
    for (const fn of this.fns.reverse()) {
      try {
        await fn();
      } catch {
        // keep tearing down the rest
      }
    }
  }
}

export const DATABASE = 'app';

/** A primary and a replica that follows it, with the service's database migrated on the primary by the first instance. */
export interface ReplicatedPostgres {
  primary: PrivatePostgres;
  replica: PrivatePostgres;
}

export async function startReplicatedPostgres(teardowns: Teardowns): Promise<ReplicatedPostgres> {
  const primary = await createPrivatePostgres(teardowns);
  const admin = new pg.Client({ connectionString: primary.url });
  await admin.connect();
  try {
    await admin.query(`create database ${DATABASE}`);
  } finally {
    await admin.end();
  }
  const replica = await createPrivatePostgres(teardowns, { replicaOf: primary });
  return { primary, replica };
}

/** Runs one statement on a server's `app` database (a connection of its own). */
export async function query<R extends pg.QueryResultRow>(
  url: string,
  text: string,
  values: unknown[] = [],
): Promise<R[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  await client.connect();
  try {
    return (await client.query<R>(text, values)).rows;
  } finally {
    await client.end();
  }
}

/**
 * Synchronous replication on (the replica must confirm each commit before it is acknowledged) or
 * off. With one replica, synchronous commits wait for it while it is down: production keeps two
 * (`ANY 1 (a, b)`); this harness turns it on for the failover and off while the replica is stopped.
 */
export async function setSynchronous(primary: PrivatePostgres, on: boolean): Promise<void> {
  await query(
    primary.urlOf(DATABASE),
    on ? "alter system set synchronous_standby_names = 'replica'" : 'alter system reset synchronous_standby_names',
  );
  await query(primary.urlOf(DATABASE), 'select pg_reload_conf()');
}

/** Until the replica streams synchronously (pg_stat_replication), at most `timeoutMs`. */
export async function waitForSyncStandby(primary: PrivatePostgres, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const rows = await query<{ sync_state: string; state: string }>(
      primary.urlOf(DATABASE),
      'select sync_state, state from pg_stat_replication',
    );
    if (rows.some((r) => r.sync_state === 'sync' && r.state === 'streaming')) return;
    if (Date.now() > deadline) throw new Error(`the replica is not a synchronous standby: ${JSON.stringify(rows)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export async function startRedis(teardowns: Teardowns): Promise<PrivateRedis> {
  return startPrivateRedis(teardowns);
}

// ---------------------------------------------------------------------------------------------
// HAProxy

/** HAProxy running deploy/haproxy.cfg for the instances, plus a TCP endpoint for PostgreSQL. */
export interface Balancer {
  /** http://127.0.0.1:<port>: the service, through HAProxy. */
  url: string;
  /** postgres://postgres@127.0.0.1:<port>/app: the primary, through HAProxy. */
  databaseUrl: string;
  /** Sends a command to HAProxy's runtime API and returns its answer. */
  command(line: string): Promise<string>;
  /** Moves the PostgreSQL endpoint to the other server and ends the sessions still open to the old one. */
  switchDatabase(to: 'primary' | 'replica'): Promise<void>;
  /** An instance's state as HAProxy sees it (UP, DOWN, MAINT...). */
  instanceState(name: string): Promise<string>;
  output(): string;
}

export async function startBalancer(
  teardowns: Teardowns,
  o: { instancePorts: number[]; primaryPort: number; replicaPort: number },
): Promise<Balancer> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'cluster-haproxy-'));
  teardowns.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const socketPath = path.join(dir, 'admin.sock');
  const [httpPort, statsPort, pgPort] = [await freePort(), await freePort(), await freePort()];
  // The PostgreSQL endpoint: TCP, one server in service at a time (the replica's is in maintenance
  // until a failover); a checked server that stops answering is taken out within about 3 s.
  const databaseSection = [
    'global',
    `    stats socket ${socketPath} mode 600 level admin`,
    '',
    'listen postgres',
    '    mode tcp',
    '    option tcplog',
    `    bind 127.0.0.1:${pgPort}`,
    '    timeout connect 2s',
    // A pooled connection may sit idle for 30 s (idleTimeoutMillis), a LISTEN one for ever: TCP
    // keepalives and the tunnel timeout cover them.
    '    timeout client 1h',
    '    timeout server 1h',
    '    option clitcpka',
    '    option srvtcpka',
    // A server leaving service (maintenance, down) takes its sessions along: clients reconnect to the new one.
    '    default-server check inter 1s fall 2 rise 1 on-marked-down shutdown-sessions',
    `    server primary 127.0.0.1:${o.primaryPort}`,
    `    server replica 127.0.0.1:${o.replicaPort} disabled`,
    '',
  ].join('\n');
  const extra = path.join(dir, 'postgres.cfg');
  writeFileSync(extra, databaseSection);
  const [i1, i2, i3] = o.instancePorts;
  const child: ChildProcess = spawn(
    'haproxy',
    ['-db', '-f', path.join(projectRoot, 'deploy', 'haproxy.cfg'), '-f', extra],
    {
      env: {
        PATH: process.env.PATH ?? '',
        INSTANCE_1: `127.0.0.1:${i1}`,
        INSTANCE_2: `127.0.0.1:${i2}`,
        INSTANCE_3: `127.0.0.1:${i3}`,
        LB_BIND: `127.0.0.1:${httpPort}`,
        LB_STATS_BIND: `127.0.0.1:${statsPort}`,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let output = '';
  const keep = (d: Buffer) => {
    output = (output + String(d)).slice(-20_000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  teardowns.teardown(async () => {
    child.kill('SIGTERM');
    await exited;
  });

  const command = (line: string) =>
    new Promise<string>((resolve, reject) => {
      const socket = net.connect(socketPath);
      let answer = '';
      socket.on('data', (d) => {
        answer += String(d);
      });
      socket.on('end', () => resolve(answer.trim()));
      socket.on('error', reject);
      socket.end(`${line}\n`);
    });
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      await command('show info');
      break;
    } catch {
      if (child.exitCode !== null || Date.now() > deadline) throw new Error(`haproxy did not start:\n${output}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return {
    url: `http://127.0.0.1:${httpPort}`,
    databaseUrl: `postgres://postgres@127.0.0.1:${pgPort}/${DATABASE}`,
    command,
    async switchDatabase(to) {
      const from = to === 'primary' ? 'replica' : 'primary';
      await command(`set server postgres/${from} state maint`);
      await command(`shutdown sessions server postgres/${from}`);
      await command(`set server postgres/${to} state ready`);
    },
    async instanceState(name) {
      const csv = await command('show stat');
      const line = csv.split('\n').find((l) => l.startsWith(`instances,${name},`));
      return line?.split(',')[17] ?? 'unknown';
    },
    output: () => output,
  };
}

// ---------------------------------------------------------------------------------------------
// Instances

export interface ClusterInstance {
  name: string;
  port: number;
  /** http://127.0.0.1:<port>, the instance itself (not through HAProxy). */
  url: string;
  service: RunningService | undefined;
}

/** Starts (or restarts) an instance on its port and waits for its health check. */
export async function startInstance(instance: ClusterInstance, env: Record<string, string>): Promise<number> {
  const began = performance.now();
  const service = startService({ ...env, HOST: '127.0.0.1', PORT: String(instance.port) });
  instance.service = service;
  try {
    await waitFor200(`${instance.url}/api/health`, 60_000);
  } catch (err) {
    throw new Error(`instance ${instance.name}: ${(err as Error).message}\n${service.output().slice(-3000)}`);
  }
  return performance.now() - began;
}

/** SIGKILL: no shutdown, no goodbye to its sockets or its database sessions. */
export async function killInstance(instance: ClusterInstance): Promise<void> {
  const service = instance.service;
  if (service === undefined) return;
  service.child.kill('SIGKILL');
  await service.exited;
  instance.service = undefined;
}

export async function stopInstance(instance: ClusterInstance): Promise<void> {
  const service = instance.service;
  if (service === undefined) return;
  service.child.kill('SIGTERM');
  const killed = setTimeout(() => service.child.kill('SIGKILL'), 10_000);
  await service.exited;
  clearTimeout(killed);
  instance.service = undefined;
}
