/**
 * The audit log's cost per sign-in: password sign-ins per second against the app as it runs (every
 * sign-in writes its `sign_in` entry in the transaction that opens the session) and against the
 * same app with a trail that records nothing (NO_AUDIT_TRAIL, given as buildApp's `audit`), the
 * ceiling. Both apps run in this process on one database and are loaded in turns (the order
 * alternating from round to round), so that both see the same machine; each round checks that the
 * first wrote one entry per sign-in and the second none. Reported: the ratio of the median rates,
 * the added time per sign-in that it means, and the trail alone (one entry written in a
 * transaction, against the same transaction without it), timed in this process.
 *
 *   npm run bench:audit                          # PGlite in memory; 5 rounds of 6 s per app, 4 connections
 *   TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npm run bench:audit
 *                                                # PostgreSQL: a database audit_cost_<random> beside the one
 *                                                # named (TEST_DATABASE_URL, else DATABASE_URL), dropped after
 *   npm run bench:audit -- --rounds 3 --duration 2 --connections 4
 *
 * A sign-in is mostly its password hash (scrypt, one at a time per hashing thread: the
 * PASSWORD_HASH_CONCURRENCY default), so the rates are low and the ratio is near 1; the trail alone
 * says what the entry costs the database. Bounded: the run stops itself after the rounds' time and
 * two minutes more. Writes bench/results/audit-cost.md.
 */

import { createHash, randomBytes } from 'node:crypto';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import type { FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import { buildApp } from '../src/app.ts';
import { createAuditTrail, NO_AUDIT_TRAIL } from '../src/audit/audit-trail.ts';
import { systemClock } from '../src/clock.ts';
import { type DatabaseConfig, loadConfig } from '../src/config.ts';
import { type DatabaseHandle, openDatabase } from '../src/db/database.ts';
import { migrateToLatest } from '../src/db/migrate.ts';
import { runLoad } from './lib/load.ts';
import { writeResults } from './lib/report.ts';
import { newScratchDatabase } from './lib/scratch-database.ts';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '5' },
    duration: { type: 'string', default: '6' },
    connections: { type: 'string', default: '4' },
  },
});
const rounds = Number(values.rounds);
const durationSeconds = Number(values.duration);
const connections = Number(values.connections);
const whole = (n: number, max: number) => Number.isSafeInteger(n) && n > 0 && n <= max;
if (!(whole(rounds, 50) && whole(durationSeconds, 60) && whole(connections, 64))) {
  console.error('usage: npm run bench:audit -- [--rounds 5] [--duration 6] [--connections 4]');
  process.exit(1);
}

// Bounded in time: the rounds, the set-up and the trail alone take well under two minutes more.
const budgetMs = (rounds * 2 * durationSeconds + 120) * 1000;
const watchdog = setTimeout(() => {
  console.error(`bench:audit: still running after ${budgetMs / 1000} s; stopping`);
  process.exit(1);
}, budgetMs);
watchdog.unref();

const median = (xs: number[]) => {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
};
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A fresh database: beside the PostgreSQL database named (loopback only), else PGlite in memory. */
async function scratchDatabase(): Promise<{ config: DatabaseConfig; label: string; drop: () => Promise<void> }> {
  const serverUrl = process.env.TEST_DATABASE_URL || process.env.DATABASE_URL;
  if (!serverUrl || serverUrl === 'memory://') {
    return { config: { kind: 'pglite-memory' }, label: 'PGlite (in memory)', drop: async () => {} };
  }
  process.env.DATABASE_URL = serverUrl;
  const scratch = await newScratchDatabase('postgres', 'audit_cost');
  return {
    config: { kind: 'postgres', url: scratch.env.DATABASE_URL ?? serverUrl },
    label: `PostgreSQL (database ${scratch.label}, dropped after)`,
    drop: scratch.drop,
  };
}

/** The `sign_in` entries in the log. */
async function signIns(handle: DatabaseHandle): Promise<number> {
  const { rows } = await sql<{
    n: number | string;
  }>`select count(*) as n from audit_log where type = 'sign_in'`.execute(handle.db);
  return Number(rows[0]?.n ?? 0);
}

/**
 * The trail alone: milliseconds per transaction that writes a row (as a sign-in's transaction writes
 * its session, so that both commit a write) and a sign-in's entry, and per transaction that writes
 * the row only (the ceiling), in alternating blocks; medians of the blocks. The row goes to a table
 * of this scratch database's own.
 */
async function trailAlone(handle: DatabaseHandle, userId: string): Promise<{ withMs: number; withoutMs: number }> {
  await sql`create table bench_audit_cost_rows (id bigint generated always as identity primary key, at timestamptz not null)`.execute(
    handle.db,
  );
  const trail = createAuditTrail({ clock: systemClock, webhookEvents: new Set() });
  const event = {
    type: 'sign_in' as const,
    method: 'password',
    userId,
    sessionId: userId,
    client: { ip: '127.0.0.1', userAgent: 'bench/audit-cost' },
    details: { clientType: 'mobile', aal: 'aal1' },
    opensSession: true,
  };
  const block = async (record: boolean, n: number) => {
    const start = performance.now();
    for (let i = 0; i < n; i++) {
      await handle.db.transaction().execute(async (trx) => {
        await sql`insert into bench_audit_cost_rows (at) values (now())`.execute(trx);
        if (record) await trail.record(trx, event);
      });
    }
    return (performance.now() - start) / n;
  };
  await block(true, 50);
  await block(false, 50);
  const withMs: number[] = [];
  const withoutMs: number[] = [];
  for (let i = 0; i < 7; i++) {
    withoutMs.push(await block(false, 200));
    withMs.push(await block(true, 200));
  }
  return { withMs: median(withMs), withoutMs: median(withoutMs) };
}

const database = await scratchDatabase();
const apps: FastifyInstance[] = [];
let handle: DatabaseHandle | undefined;
try {
  handle = await openDatabase(database.config);
  await migrateToLatest(handle.db);
  const config = loadConfig({
    NODE_ENV: 'production',
    // Production refuses weak secrets; this one only ever signs tokens on loopback.
    JWT_SECRET: createHash('sha512').update('accounts-service audit-cost benchmark, loopback only').digest('base64'),
    SMTP_URL: 'smtp://127.0.0.1:9',
    LOG_LEVEL: 'warn',
    DATABASE_URL: database.config.kind === 'postgres' ? database.config.url : 'memory://',
    REQUIRE_EMAIL_VERIFICATION: 'false',
    // Every request comes from 127.0.0.1: the per-IP limits out of the way, and one network may fill the hash queue.
    RATE_LIMIT_SIGN_IN: '1000000000',
    RATE_LIMIT_SIGN_UP: '1000000000',
    PASSWORD_HASH_QUEUE_PER_NETWORK: '32',
  });
  const withTrail = await buildApp(config, { database: handle, logger: false });
  apps.push(withTrail);
  const withoutTrail = await buildApp(config, { database: handle, logger: false, audit: NO_AUDIT_TRAIL });
  apps.push(withoutTrail);
  const bases: Record<'with' | 'without', string> = {
    with: await withTrail.listen({ port: 0, host: '127.0.0.1' }),
    without: await withoutTrail.listen({ port: 0, host: '127.0.0.1' }),
  };

  // One account per connection, signed in by turns.
  const password = 'audit cost benchmark passphrase';
  const accounts: string[] = [];
  let firstUserId = '';
  for (let i = 0; i < connections; i++) {
    const email = `audit-cost-${i}-${randomBytes(3).toString('hex')}@example.com`;
    const res = await withoutTrail.inject({
      method: 'POST',
      url: '/api/auth/users?client_type=mobile',
      payload: { email, password },
    });
    if (res.statusCode !== 201) throw new Error(`sign-up answered ${res.statusCode} ${res.body}`);
    firstUserId ||= (res.json() as { user: { id: string } }).user.id;
    accounts.push(JSON.stringify({ email, password }));
  }
  let next = 0;
  const load = (which: 'with' | 'without', seconds: number) =>
    runLoad({
      title: which,
      url: `${bases[which]}/api/auth/sessions?client_type=mobile`,
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      setupRequest: (request) => ({ ...request, body: accounts[next++ % accounts.length] }),
      connections,
      durationSeconds: seconds,
    });
  /** The sign_in entries once the sign-ins still under way are done: the count no longer moving for a second. */
  const settled = async () => {
    let count = await signIns(handle as DatabaseHandle);
    for (let i = 0; i < 30; i++) {
      await pause(1_000);
      const now = await signIns(handle as DatabaseHandle);
      if (now === count) return count;
      count = now;
    }
    throw new Error('sign-ins were still being recorded 30 s after the load stopped');
  };
  /** A round on one app, and the sign_in entries it added. */
  const round = async (which: 'with' | 'without', seconds: number) => {
    const before = await settled();
    const result = await load(which, seconds);
    if (result.errors > 0 || result.non2xx > 0) {
      throw new Error(`${which}: ${result.errors} errors, statuses ${JSON.stringify(result.unexpectedStatuses)}`);
    }
    const added = (await settled()) - before;
    return { result, added };
  };

  process.stderr.write('warm-up: 1 s per app\n');
  await round('with', 1);
  await round('without', 1);
  const rates: Record<'with' | 'without', number[]> = { with: [], without: [] };
  const p50: Record<'with' | 'without', number[]> = { with: [], without: [] };
  for (let r = 1; r <= rounds; r++) {
    const order = r % 2 === 1 ? (['without', 'with'] as const) : (['with', 'without'] as const);
    for (const which of order) {
      process.stderr.write(`round ${r}/${rounds}: ${which} the trail (${durationSeconds} s)\n`);
      const { result, added } = await round(which, durationSeconds);
      // Sign-ins answered after the load stopped still write their entry: up to one per connection more.
      const expected = which === 'with' ? [result.total, result.total + connections] : [0, 0];
      if (added < (expected[0] as number) || added > (expected[1] as number)) {
        throw new Error(
          `${which}: ${result.total} sign-ins wrote ${added} sign_in entries (expected ${expected.join(' to ')})`,
        );
      }
      // The answers over the round's time (autocannon's own average is rounded to whole requests per second).
      rates[which].push(result.total / durationSeconds);
      p50[which].push(result.p50Ms);
    }
  }
  const alone = await trailAlone(handle, firstUserId);

  const without = median(rates.without);
  const withRate = median(rates.with);
  const ratio = withRate / without;
  const addedMs = (1 / withRate - 1 / without) * 1000;
  const trailMs = alone.withMs - alone.withoutMs;
  // How far the ceiling's own rounds lie from their median: a ratio closer to 1 than this is noise.
  const spread = Math.max(...rates.without.map((r) => Math.abs(r / without - 1)));
  const verdict =
    Math.abs(ratio - 1) <= spread
      ? `within the noise of this run (the ceiling's own rounds lie up to ${(spread * 100).toFixed(0)}% from their median)`
      : `beyond the noise of this run (the ceiling's own rounds lie up to ${(spread * 100).toFixed(0)}% from their median)`;
  const loadAverage = os.loadavg()[0] ?? 0;
  const md = [
    '# The audit log per sign-in',
    '',
    `${new Date().toISOString()}, ${os.cpus().length} cores (${os.cpus()[0]?.model ?? 'unknown'}), Node ${process.version}; ${database.label};`,
    `${rounds} rounds of ${durationSeconds} s per app (the order alternating), ${connections} connections, password sign-ins (\`POST /api/auth/sessions\`), medians;`,
    `password hashing ${config.passwordHashing.concurrency} at a time; load average ${loadAverage.toFixed(2)} at the end (others' work on the machine counts in it). Reproduce with \`npm run bench:audit -- --rounds ${rounds} --duration ${durationSeconds} --connections ${connections}\`${database.config.kind === 'postgres' ? ' and TEST_DATABASE_URL' : ''}.`,
    '',
    '| app | sign-ins/s (median) | p50 ms (median) | rounds |',
    '|---|---:|---:|---|',
    `| with a trail that records nothing (ceiling) | ${without.toFixed(1)} | ${median(p50.without)} | ${rates.without.map((r) => r.toFixed(1)).join(', ')} |`,
    `| with the audit trail | ${withRate.toFixed(1)} | ${median(p50.with)} | ${rates.with.map((r) => r.toFixed(1)).join(', ')} |`,
    '',
    `Ratio ${ratio.toFixed(3)}, ${verdict}; added time per sign-in ${addedMs.toFixed(2)} ms of the rate's worth, ${(median(p50.with) - median(p50.without)).toFixed(1)} ms of median latency (negative: less).`,
    `Every round with the trail wrote one \`sign_in\` entry per sign-in; the rounds without it wrote none.`,
    `The trail alone: a transaction writing a row and a sign-in's entry ${alone.withMs.toFixed(3)} ms, the same transaction with the row only ${alone.withoutMs.toFixed(3)} ms: ${trailMs.toFixed(3)} ms per entry (medians of 7 blocks of 200, one at a time, in this process).`,
    '',
  ].join('\n');
  const written = writeResults('audit-cost', md);
  console.log(md);
  console.log(`Written: ${written.join(', ')}`);
} finally {
  for (const app of apps) await app.close();
  await handle?.close();
  await database.drop();
  clearTimeout(watchdog);
}
