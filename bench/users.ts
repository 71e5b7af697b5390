/**
 * GET /api/auth/users on a large directory (PostgreSQL), beside a bare Fastify route measured in the
 * same run: the first page, a deep offset, a search matching about 50 users, one matching about 10%,
 * and a one-letter search. Prints the EXPLAIN ANALYZE plan of each case after the table.
 *
 *   npm run seed -- --users 1000000            # once, with DATABASE_URL pointing at the bench database
 *   DATABASE_URL=postgres://…/users1m npm run bench:users -- [--duration 10] [--connections 10]
 */
import os from 'node:os';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { freePort, type RunningService, startService, waitFor200 } from '../scripts/lib/service-process.ts';
import { userDirectoryQuery } from '../src/db/repositories/user-directory.ts';
import type { Database } from '../src/db/schema.ts';
import { type LoadResult, resultTable, runLoad } from './lib/load.ts';
import { adminAccessToken, benchArgs, benchServiceEnv, ceilingTitle, startCeiling, stopAll } from './lib/setup.ts';

const args = benchArgs();
const { durationSeconds, connections } = args;
const databaseUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/users1m';

const client = new pg.Client({ connectionString: databaseUrl });
await client.connect();
const users = Number((await client.query('select n from user_count')).rows[0]?.n ?? 0);
if (users < 1000) {
  console.error(`only ${users} users in ${databaseUrl}: seed first (npm run seed -- --users 1000000)`);
  process.exit(1);
}
const count = async (term: string) =>
  Number(
    (
      await client.query(`select count(*) from users where email ilike $1 or (profile->>'name') ilike $1`, [
        `%${term}%`,
      ])
    ).rows[0].count,
  );
const fiftyTerm = 'james.smith';
const tenPercentTerm = '@gmail.com';
const half = Math.floor(users / 2);
const cases = [
  { title: 'first page', offset: 0, search: undefined },
  { title: `offset ${half.toLocaleString('en-US')}`, offset: half, search: undefined },
  { title: `search "${fiftyTerm}" (${await count(fiftyTerm)} matches)`, offset: 0, search: fiftyTerm },
  { title: `search "${tenPercentTerm}" (${await count(tenPercentTerm)} matches)`, offset: 0, search: tenPercentTerm },
  { title: `search "a" (${await count('a')} matches)`, offset: 0, search: 'a' },
];
const queryString = (c: (typeof cases)[number]) =>
  `?offset=${c.offset}${c.search === undefined ? '' : `&search=${encodeURIComponent(c.search)}`}`;

const started: RunningService[] = [];
try {
  const port = await freePort();
  const service = startService({
    DATABASE_URL: databaseUrl,
    PORT: String(port),
    ...benchServiceEnv,
  });
  started.push(service);
  const base = `http://127.0.0.1:${port}`;
  await waitFor200(`${base}/api/health`, 60_000);
  const accessToken = await adminAccessToken(base);
  const ceilingUrl = await startCeiling(started);

  const results: LoadResult[] = [
    await runLoad({
      title: ceilingTitle,
      url: ceilingUrl,
      connections,
      durationSeconds,
    }),
  ];
  // Each case's plan, from the repository's own statement, right after its load: the steady state
  // it measured (a later broad search would have pushed its index pages out of shared buffers).
  const kysely = new Kysely<Database>({
    // The same session settings as the service (no JIT), so that the plans are the ones it runs.
    dialect: new PostgresDialect({
      pool: new pg.Pool({ connectionString: databaseUrl, max: 1, options: '-c jit=off' }),
    }),
  });
  const plans: string[] = [];
  for (const c of cases) {
    results.push(
      await runLoad({
        title: `GET /api/auth/users, ${c.title}`,
        url: `${base}/api/auth/users${queryString(c)}`,
        headers: { authorization: `Bearer ${accessToken}` },
        connections,
        durationSeconds,
      }),
    );
    const statement = userDirectoryQuery({ offset: c.offset, limit: 10, search: c.search });
    const plan = await sql<{ 'QUERY PLAN': string }>`explain (analyze, buffers, costs off) ${statement}`.execute(
      kysely,
    );
    plans.push(`#### ${c.title}\n\n\`\`\`\n${plan.rows.map((r) => r['QUERY PLAN']).join('\n')}\n\`\`\``);
  }
  await kysely.destroy();
  const version = (await client.query('show server_version')).rows[0]?.server_version;
  console.log(
    `\nPostgreSQL ${version}; ${users.toLocaleString('en-US')} users; ${os.cpus().length} cores; Node ${process.version}; ${connections} connections, ${durationSeconds} s each\n`,
  );
  console.log(resultTable(results));
  console.log(`\n### Plans (EXPLAIN ANALYZE, limit 10)\n\n${plans.join('\n\n')}`);
} finally {
  await stopAll(started);
  await client.end();
}
