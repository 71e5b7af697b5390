/**
 * Webhook delivery from the outbox: the time from an event's commit to its arrival at a receiver on
 * loopback, and how many events a second one instance delivers, for a burst of N events.
 *
 * - PostgreSQL (default): the service runs as its own process (`node src/server.ts` with
 *   WEBHOOK_URL), as in production; the bench commits N events straight into the outbox (each in its
 *   own transaction, 10 writers at once, as N account changes would), and the service wakes on
 *   their NOTIFY.
 * - PGlite (`--database pglite`): one process holds the database, so the delivery loop runs in the
 *   bench's process and wakes on its own queuing.
 *
 * The receiver verifies every request with standardwebhooks and answers 200 at once. The ceiling,
 * measured in the same run, is the same number of signed POSTs sent straight to the receiver with
 * the delivery's concurrency (16), without a database: the ratio says what the outbox costs.
 *
 *   npm run bench:webhooks                        # 2,000 events on PostgreSQL
 *   npm run bench:webhooks -- --events 500 --database pglite
 *
 * DATABASE_URL names the PostgreSQL server (loopback only; default postgres://postgres@127.0.0.1:5432/postgres).
 * Writes bench/results/webhooks.md (or webhooks-pglite.md) and prints it.
 */
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import type { FastifyBaseLogger } from 'fastify';
import { sql } from 'kysely';
import { Webhook } from 'standardwebhooks';
import { Pool } from 'undici';
import { freePort, startService, waitFor200 } from '../scripts/lib/service-process.ts';
import { type DatabaseHandle, openDatabase } from '../src/db/database.ts';
import { migrateToLatest } from '../src/db/migrate.ts';
import { NotificationListener } from '../src/db/notification-listener.ts';
import { enqueueWebhookEvents } from '../src/db/repositories/webhook-outbox.ts';
import { DEFAULT_WEBHOOK_TUNING, WebhookDelivery } from '../src/webhooks/delivery.ts';
import { LatencyHistogram } from './lib/latency.ts';
import { writeResults } from './lib/report.ts';
import { newScratchDatabase } from './lib/scratch-database.ts';

const { values } = parseArgs({
  options: {
    events: { type: 'string', default: '2000' },
    database: { type: 'string', default: 'postgres' },
    writers: { type: 'string', default: '10' },
    'timeout-seconds': { type: 'string', default: '120' },
  },
});
const eventCount = Number(values.events);
const writers = Number(values.writers);
const timeoutMs = Number(values['timeout-seconds']) * 1000;
const kind = values.database;
if (
  !(Number.isSafeInteger(eventCount) && eventCount > 0 && eventCount <= 100_000) ||
  !(Number.isSafeInteger(writers) && writers > 0 && writers <= 100) ||
  !(timeoutMs > 0) ||
  (kind !== 'postgres' && kind !== 'pglite')
) {
  console.error(
    'usage: npm run bench:webhooks -- [--events 2000 (at most 100000)] [--database postgres|pglite] [--writers 10] [--timeout-seconds 120]',
  );
  process.exit(1);
}

const secret = `whsec_${randomBytes(32).toString('base64')}`;
const log = {
  warn: console.warn,
  error: console.error,
  info: () => {},
  debug: () => {},
  trace: () => {},
} as unknown as FastifyBaseLogger;
const n = (x: number, digits = 0) => x.toLocaleString('en-US', { maximumFractionDigits: digits });

/** The receiver: verifies each request, records when each event (by its `seq`) first arrived. */
async function startReceiver() {
  const verifier = new Webhook(secret);
  const arrivals = new Map<number, number>();
  let duplicates = 0;
  let unverified = 0;
  let onArrival: (() => void) | undefined;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const at = performance.now();
      try {
        const body = verifier.verify(Buffer.concat(chunks).toString('utf8'), {
          'webhook-id': String(req.headers['webhook-id']),
          'webhook-timestamp': String(req.headers['webhook-timestamp']),
          'webhook-signature': String(req.headers['webhook-signature']),
        }) as { data: { seq?: number } };
        const seq = body.data.seq;
        if (typeof seq === 'number') {
          if (arrivals.has(seq)) duplicates++;
          else arrivals.set(seq, at);
        }
      } catch {
        unverified++;
      }
      res.writeHead(200).end();
      onArrival?.();
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    arrivals,
    stats: () => ({ duplicates, unverified }),
    /** Resolves when `count` events have arrived, or rejects after the bench's timeout. */
    waitFor(count: number): Promise<void> {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`${arrivals.size} of ${count} events arrived in ${timeoutMs} ms`)),
          timeoutMs,
        );
        onArrival = () => {
          if (arrivals.size < count) return;
          clearTimeout(timer);
          onArrival = undefined;
          resolve();
        };
        onArrival();
      });
    },
    reset: () => {
      arrivals.clear();
      duplicates = 0;
      unverified = 0;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** The ceiling: `count` signed POSTs straight to the receiver, `concurrency` at a time; events/s. */
async function ceiling(receiver: Awaited<ReturnType<typeof startReceiver>>, count: number, concurrency: number) {
  const url = new URL(receiver.url);
  const pool = new Pool(url.origin, { connections: concurrency });
  const signer = new Webhook(secret);
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < count) {
        const seq = next++;
        const body = JSON.stringify({ type: 'user.updated', timestamp: new Date().toISOString(), data: { seq } });
        const id = `msg_${seq}`;
        const at = new Date();
        const res = await pool.request({
          method: 'POST',
          path: url.pathname,
          headers: {
            'content-type': 'application/json',
            'webhook-id': id,
            'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
            'webhook-signature': signer.sign(id, at, body),
          },
          body,
        });
        await res.body.dump();
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  await pool.close();
  return count / seconds;
}

/** Commits `count` events, one per transaction, `writers` at a time; returns each one's commit time by seq. */
async function burst(database: DatabaseHandle, count: number): Promise<number[]> {
  const committed: number[] = new Array(count);
  let next = 0;
  await Promise.all(
    Array.from({ length: writers }, async () => {
      while (next < count) {
        const seq = next++;
        const createdAt = new Date();
        await database.db.transaction().execute((trx) =>
          enqueueWebhookEvents(trx, [
            {
              eventType: 'user.updated',
              createdAt,
              payload: { type: 'user.updated', timestamp: createdAt.toISOString(), data: { seq, userId: null } },
            },
          ]),
        );
        committed[seq] = performance.now();
      }
    }),
  );
  return committed;
}

/** Commits `count` events in one transaction (500 to a statement); returns the commit's time. */
async function backlog(database: DatabaseHandle, count: number): Promise<number> {
  await database.db.transaction().execute(async (trx) => {
    for (let from = 0; from < count; from += 500) {
      const createdAt = new Date();
      await enqueueWebhookEvents(
        trx,
        Array.from({ length: Math.min(500, count - from) }, (_, i) => ({
          eventType: 'user.updated',
          createdAt,
          payload: { type: 'user.updated', timestamp: createdAt.toISOString(), data: { seq: from + i, userId: null } },
        })),
      );
    }
  });
  return performance.now();
}

/** Waits until no event is pending (every attempt's result written). */
async function settled(database: DatabaseHandle): Promise<void> {
  const pending = () =>
    database.db.selectFrom('webhook_outbox').select('id').where('status', '=', 'pending').limit(1).execute();
  while ((await pending()).length > 0) await new Promise((resolve) => setTimeout(resolve, 50));
}

const wallStart = performance.now();
const receiver = await startReceiver();
const scratch = await newScratchDatabase(kind, 'bench_webhooks');
let database: DatabaseHandle | undefined;
let stopDelivery: () => Promise<void> = async () => {};
try {
  const config =
    kind === 'postgres'
      ? { kind: 'postgres' as const, url: scratch.env.DATABASE_URL as string }
      : { kind: 'pglite' as const, dataDir: scratch.env.DATA_DIR as string };
  database = await openDatabase(config);
  await migrateToLatest(database.db);
  const version = (await sql<{ v: string }>`select current_setting('server_version') as v`.execute(database.db)).rows[0]
    ?.v;

  if (kind === 'postgres') {
    const port = await freePort();
    const service = startService({
      ...scratch.env,
      PORT: String(port),
      HOST: '127.0.0.1',
      JWT_SECRET: randomBytes(32).toString('hex'),
      WEBHOOK_URL: receiver.url,
      WEBHOOK_SECRET: secret,
    });
    stopDelivery = async () => {
      service.child.kill('SIGTERM');
      await service.exited;
    };
    await waitFor200(`http://127.0.0.1:${port}/api/health`, 30_000);
  } else {
    const notifications = new NotificationListener({ url: undefined, name: 'bench listener', log });
    const delivery = new WebhookDelivery({
      db: database.db,
      url: receiver.url,
      secret,
      timeoutMs: 10_000,
      retentionDays: 30,
      notifications,
      log,
      now: () => new Date(),
    });
    await notifications.start();
    delivery.start();
    stopDelivery = async () => {
      await delivery.close();
      await notifications.close();
    };
  }

  // A warm-up (connections, JIT), then the measured burst.
  const warmUp = Math.min(200, eventCount);
  const warmed = receiver.waitFor(warmUp);
  await burst(database, warmUp);
  await warmed;
  await settled(database);
  receiver.reset();

  const arrived = receiver.waitFor(eventCount);
  const committed = await burst(database, eventCount);
  await arrived;
  const burstFigures = receiver.stats();
  const latency = LatencyHistogram.of(committed.map((at, seq) => (receiver.arrivals.get(seq) ?? at) - at));
  const firstCommit = Math.min(...committed);
  const lastCommit = Math.max(...committed);
  const deliveredPerSecond = eventCount / ((Math.max(...receiver.arrivals.values()) - firstCommit) / 1000);
  const committedPerSecond = eventCount / ((lastCommit - firstCommit) / 1000);

  // The same number of events committed at once: how fast one instance works off a backlog.
  await settled(database);
  receiver.reset();
  const drained = receiver.waitFor(eventCount);
  const backlogCommitted = await backlog(database, eventCount);
  await drained;
  const backlogFigures = receiver.stats();
  const drainedPerSecond = eventCount / ((Math.max(...receiver.arrivals.values()) - backlogCommitted) / 1000);
  await settled(database);
  await stopDelivery();
  stopDelivery = async () => {};

  receiver.reset();
  const ceilingPerSecond = await ceiling(receiver, eventCount, DEFAULT_WEBHOOK_TUNING.concurrency);

  const duplicates = burstFigures.duplicates + backlogFigures.duplicates;
  const unverified = burstFigures.unverified + backlogFigures.unverified;
  const where =
    kind === 'postgres'
      ? `PostgreSQL ${version}; the service as its own process, woken by NOTIFY`
      : `PGlite (Postgres ${version}) on a data directory; the delivery loop in the bench's process`;
  const markdown = `# Webhook delivery

${os.cpus().length} cores (${os.cpus()[0]?.model.trim() ?? 'unknown'}); Node ${process.version}; ${where}; ${new Date().toISOString()}

One instance delivers (at most ${DEFAULT_WEBHOOK_TUNING.concurrency} attempts at once) to a receiver on
loopback that verifies every signature and answers 200 at once. Burst: ${n(eventCount)} events,
each committed in its own transaction by ${writers} writers at once (as ${n(eventCount)} account
changes would be); latency is from an event's commit to its arrival. Backlog: ${n(eventCount)}
events committed in one transaction, timed from the commit to the last arrival. The ceiling is the
same number of signed POSTs sent straight to the receiver, ${DEFAULT_WEBHOOK_TUNING.concurrency} at once, without a
database, in the same run. Reproduce with \`npm run bench:webhooks${kind === 'pglite' ? ' -- --database pglite' : ''}\`.

| figure | value |
|---|---:|
| burst: latency p50 | ${n(latency.percentile(50), 1)} ms |
| burst: latency p90 | ${n(latency.percentile(90), 1)} ms |
| burst: latency p99 | ${n(latency.percentile(99), 1)} ms |
| burst: latency max | ${n(latency.maxMs, 1)} ms |
| burst: commits/s (the writers) | ${n(committedPerSecond)} |
| burst: delivered/s (first commit to last arrival) | ${n(deliveredPerSecond)} |
| backlog: delivered/s | ${n(drainedPerSecond)} |
| ceiling: signed POSTs/s, no database | ${n(ceilingPerSecond)} |
| backlog delivered/s as a share of the ceiling | ${n(drainedPerSecond / ceilingPerSecond, 2)} |
| duplicates, unverified requests | ${duplicates}, ${unverified} |

When the burst's delivered/s is close to its commits/s, delivery kept up with the writers and the
latency is the wake-up (NOTIFY, or the process's own queuing on PGlite), the claim, the POST and
nothing else; when it falls behind, the latency includes the wait behind the events committed before.
${kind === 'pglite' ? 'On PGlite the writers and the delivery share its one connection, which runs one transaction at a time.\n' : ''}`;
  const [file] = writeResults(kind === 'postgres' ? 'webhooks' : 'webhooks-pglite', markdown);
  console.log(markdown);
  console.log(`wrote ${file} in ${n((performance.now() - wallStart) / 1000, 1)} s`);
  if (duplicates > 0 || unverified > 0) process.exitCode = 1;
} finally {
  await stopDelivery().catch(() => {});
  await database?.close();
  await receiver.close();
  await scratch.drop();
}
