// DATABASE_READ_URL on a real streaming replica (a private primary and a pg_basebackup copy that
// follows it): the lag-tolerant reads go to the replica while it is within DATABASE_READ_MAX_LAG_MS,
// to the primary while its replay is paused past that lag or while it is stopped (a read in flight
// when it fails is made again on the primary), and back to the replica when it catches up. The
// health check and /metrics report its state and lag; the operations that must read their own
// writes never go to it.
import { sql } from 'kysely';
import pg from 'pg';
import t, { type Test } from 'tap';
import { buildApp } from '../src/app.ts';
import { ConfigError, loadConfig } from '../src/config.ts';
import { type DatabaseHandle, openDatabase } from '../src/db/database.ts';
import { migrateToLatest } from '../src/db/migrate.ts';
import { LAG_CHECK_INTERVAL_MS } from '../src/db/read-replica.ts';
import { pause } from './helpers/auth.ts';
import { checkResponsesAgainstContract } from './helpers/contract-check.ts';
import { usingPostgres } from './helpers/database.ts';
import { createPrivatePostgres, type PrivatePostgres, privatePostgresUnavailable } from './helpers/private-postgres.ts';

const MAX_LAG_MS = 1_500;
const METRICS_TOKEN = 'metrics-token-of-the-read-replica-test-0123456789';

t.test('DATABASE_READ_URL is refused without a PostgreSQL DATABASE_URL, and must name PostgreSQL', async (t) => {
  t.throws(
    () => loadConfig({ DATABASE_READ_URL: 'postgres://127.0.0.1:5433/app' }),
    new ConfigError(
      'DATABASE_READ_URL names a replica of a PostgreSQL server: it needs DATABASE_URL to name that server (the embedded database has no replicas)',
    ),
  );
  t.throws(
    () => loadConfig({ DATABASE_URL: 'postgres://127.0.0.1/app', DATABASE_READ_URL: 'memory://' }),
    /^DATABASE_READ_URL must be postgres:\/\/user:password@host:port\/database$/,
  );
  const config = loadConfig({
    DATABASE_URL: 'postgres://127.0.0.1/app',
    DATABASE_READ_URL: 'postgres://127.0.0.2/app',
  });
  t.same(config.database, {
    kind: 'postgres',
    url: 'postgres://127.0.0.1/app',
    replica: { url: 'postgres://127.0.0.2/app', maxLagMs: 1_000 },
  });
});

const unavailable = usingPostgres ? privatePostgresUnavailable() : undefined;
const skip = !usingPostgres
  ? 'PostgreSQL only: runs a private primary and a streaming replica; runs in the PostgreSQL suite (npm run test:pg)'
  : unavailable !== undefined
    ? `needs the PostgreSQL server binaries to run private clusters: ${unavailable}`
    : false;

/** Which server a lag-tolerant read reached: the replica is in recovery, the primary is not. */
const readsFrom = (handle: DatabaseHandle) =>
  handle.read(async (db) => {
    const { rows } = await sql<{ recovering: boolean }>`select pg_is_in_recovery() as recovering`.execute(db);
    return rows[0]?.recovering === true ? 'replica' : 'primary';
  });

async function waitForState(handle: DatabaseHandle, state: string, what: string): Promise<number> {
  const began = performance.now();
  while (handle.replicaStatus?.().state !== state) {
    if (performance.now() - began > 15_000) {
      throw new Error(`${what}: still ${JSON.stringify(handle.replicaStatus?.())} after 15 s`);
    }
    await pause(LAG_CHECK_INTERVAL_MS / 2);
  }
  return performance.now() - began;
}

async function run(cluster: PrivatePostgres, text: string): Promise<pg.QueryResult> {
  const client = new pg.Client({ connectionString: cluster.urlOf('app') });
  await client.connect();
  try {
    return await client.query(text);
  } finally {
    await client.end();
  }
}

t.test(
  'lag-tolerant reads follow the replica while it keeps up, and the primary otherwise',
  { skip },
  async (t: Test) => {
    const primary = await createPrivatePostgres(t);
    const setup = new pg.Client({ connectionString: primary.url });
    await setup.connect();
    await setup.query('create database app');
    await setup.end();
    const migrating = await openDatabase({ kind: 'postgres', url: primary.urlOf('app') });
    await migrateToLatest(migrating.db);
    await migrating.close();
    const replica = await createPrivatePostgres(t, { replicaOf: primary });

    const config = loadConfig({
      NODE_ENV: 'test',
      DATABASE_URL: primary.urlOf('app'),
      DATABASE_READ_URL: replica.urlOf('app'),
      DATABASE_READ_MAX_LAG_MS: String(MAX_LAG_MS),
      METRICS_TOKEN,
    });
    const handle = await openDatabase(config.database);
    t.teardown(() => handle.close());
    const app = await buildApp(config, { database: handle, logger: false, housekeeping: false });
    checkResponsesAgainstContract(app);
    t.teardown(() => app.close());
    const health = async () => (await app.inject({ method: 'GET', url: '/api/health' })).json();
    const metric = async (name: string) => {
      const text = (
        await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${METRICS_TOKEN}` } })
      ).body;
      return Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1]);
    };

    await t.test('a replica that keeps up serves them, and says so', async (t) => {
      await waitForState(handle, 'replica', 'the first measurement');
      t.equal(await readsFrom(handle), 'replica');
      const body = await health();
      t.equal(body.replica.state, 'replica');
      t.ok(
        body.replica.lagMs >= 0 && body.replica.lagMs <= MAX_LAG_MS,
        `lag ${body.replica.lagMs} ms within the limit`,
      );
      t.equal(body.replica.maxLagMs, MAX_LAG_MS);
      t.equal(await metric('db_replica_serving_reads'), 1);
      t.ok((await metric('db_replica_lag_seconds')) >= 0);
      // A write on the primary reaches the reads within the limit.
      await run(primary, "insert into users (email, password_hash) values ('replicated@example.com', 'x')");
      const began = performance.now();
      let seen = false;
      while (!seen && performance.now() - began < MAX_LAG_MS) {
        seen = await handle.read(
          async (db) =>
            (await db.selectFrom('users').select('id').where('email', '=', 'replicated@example.com').execute())
              .length === 1,
        );
      }
      t.ok(seen, `a row written on the primary is read from the replica within ${MAX_LAG_MS} ms`);
    });

    await t.test('a replica whose replay is paused past the limit gives them back to the primary', async (t) => {
      await run(replica, 'select pg_wal_replay_pause()');
      await run(primary, "insert into users (email, password_hash) values ('behind@example.com', 'x')");
      const found = () =>
        handle.read(
          async (db) =>
            (await db.selectFrom('users').select('id').where('email', '=', 'behind@example.com').execute()).length,
        );
      // Within the limit, the replica still serves, and does not have the row yet: the reads do go there.
      t.equal(await readsFrom(handle), 'replica');
      t.equal(await found(), 0, 'within the limit, the read is the replica’s (the row is not there yet)');
      const movedMs = await waitForState(handle, 'lagging', 'paused replay');
      t.ok(
        movedMs <= MAX_LAG_MS + 4 * LAG_CHECK_INTERVAL_MS + 1_000,
        `moved to the primary after ${Math.round(movedMs)} ms`,
      );
      t.equal(await readsFrom(handle), 'primary');
      t.equal(await found(), 1, 'past the limit, the read is the primary’s');
      const body = await health();
      t.equal(body.replica.state, 'lagging');
      t.ok(body.replica.lagMs > MAX_LAG_MS);
      t.equal(await metric('db_replica_serving_reads'), 0);
      t.ok((await metric('db_replica_lag_seconds')) > MAX_LAG_MS / 1000);
      await run(replica, 'select pg_wal_replay_resume()');
      const backMs = await waitForState(handle, 'replica', 'resumed replay');
      t.equal(await readsFrom(handle), 'replica', `back on the replica ${Math.round(backMs)} ms after it caught up`);
      t.equal(await found(), 1);
    });

    await t.test(
      'a stopped replica: reads in flight and after go to the primary; it comes back by itself',
      async (t) => {
        await replica.stop('fast');
        // The first read may still be handed to the replica (measured up a moment ago): it is made again on the primary.
        t.equal(await readsFrom(handle), 'primary', 'the read right after the stop is answered, by the primary');
        await waitForState(handle, 'down', 'stopped replica');
        const body = await health();
        t.equal(body.status, 'ok', 'the replica does not decide the health');
        t.same(body.replica, { state: 'down', lagMs: null, maxLagMs: MAX_LAG_MS });
        t.equal(await metric('db_replica_lag_seconds'), -1);
        await replica.start();
        await waitForState(handle, 'replica', 'restarted replica');
        t.equal(await readsFrom(handle), 'replica');
      },
    );

    await t.test(
      'a promoted replica serves nothing while DATABASE_URL still reaches another primary; alone, it serves with no lag',
      async (t) => {
        await replica.promote();
        // A split brain: the service still writes to the old primary, which the promoted copy no
        // longer follows. Its reads would be stale for ever: they go to the primary.
        await waitForState(handle, 'down', 'promoted replica beside a live primary');
        await run(primary, "insert into users (email, password_hash) values ('after-promotion@example.com', 'x')");
        const found = await handle.read(
          async (db) =>
            (await db.selectFrom('users').select('id').where('email', '=', 'after-promotion@example.com').execute())
              .length,
        );
        t.equal(found, 1, 'a row written on the primary after the promotion is read');
        t.equal((await health()).replica.state, 'down');
        // The old primary gone (the failover finished), the promoted server is the only one: no lag.
        await primary.stop('fast');
        await waitForState(handle, 'replica', 'promoted replica, old primary gone');
        t.equal(handle.replicaStatus?.().lagMs, 0);
      },
    );
  },
);
