/**
 * Email verification and sign-in throughput on PostgreSQL, beside GET /api/health and a bare Fastify
 * route measured in the same run:
 *   - verify, success: each request spends a code prepared for its own unverified user;
 *   - verify, failure: a wrong code for an existing user;
 *   - sign-in: a verified user with the right password (scrypt-bound).
 *
 *   npm run bench:auth -- [--duration 10] [--connections 10] [--users 30000]
 *
 * Uses DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test): a database named
 * bench_auth_<pid> is created there and dropped at the end.
 */
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import pg from 'pg';
import { freePort, type RunningService, startService, waitFor200 } from '../scripts/lib/service-process.ts';
import { deriveKeys, hashPassword, hmacHex, sha256Hex } from '../src/auth/crypto.ts';
import { type LoadResult, resultTable, runLoad } from './lib/load.ts';
import { benchArgs, ceilingTitle, startCeiling, stopAll } from './lib/setup.ts';

const args = benchArgs({ users: '30000' });
const { durationSeconds, connections } = args;
const userCount = Number(args.options.users);
const serverUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const dbName = `bench_auth_${process.pid}`;
const dbUrl = Object.assign(new URL(serverUrl), { pathname: `/${dbName}` }).toString();
const secret = 'bench-secret-'.padEnd(48, 'x');
const code = '424242';

const admin = new pg.Client({ connectionString: serverUrl });
await admin.connect();
await admin.query(`create database ${dbName}`);
const started: RunningService[] = [];
try {
  const port = await freePort();
  const service = startService({
    DATABASE_URL: dbUrl,
    PORT: String(port),
    NODE_ENV: 'production',
    JWT_SECRET: secret,
    SMTP_URL: 'smtp://127.0.0.1:9', // never used: nothing in this benchmark sends mail
    LOG_LEVEL: 'warn',
    RATE_LIMIT_VERIFY: '1000000000',
    RATE_LIMIT_SIGN_IN: '1000000000',
  });
  started.push(service);
  await waitFor200(`http://127.0.0.1:${port}/api/health`, 60_000);

  // Prepared sign-ups: unverified users, each with a live code, written straight into the database.
  process.stderr.write(`preparing ${userCount} unverified users with codes…\n`);
  const db = new pg.Client({ connectionString: dbUrl });
  await db.connect();
  const otpKey = deriveKeys(secret).otp;
  const emails: string[] = [];
  for (let start = 0; start < userCount; start += 2000) {
    const ids: string[] = [];
    const batchEmails: string[] = [];
    for (let i = start; i < Math.min(start + 2000, userCount); i++) {
      ids.push(randomUUID());
      batchEmails.push(`bench-${i}@example.com`);
    }
    await db.query(
      `insert into users (id, email, password_hash) select * from unnest($1::uuid[], $2::text[], $3::text[])`,
      [ids, batchEmails, ids.map(() => 'scrypt$unused')],
    );
    await db.query(
      `insert into email_verifications (user_id, code_hmac, token_hash, code_expires_at, token_expires_at)
       select id, hmac, th, now() + interval '1 hour', now() + interval '1 hour'
       from unnest($1::uuid[], $2::text[], $3::text[]) as t(id, hmac, th)`,
      [ids, ids.map((id) => hmacHex(otpKey, `${id}:${code}`)), ids.map(() => sha256Hex(randomUUID()))],
    );
    emails.push(...batchEmails);
  }
  await db.query(`insert into users (email, password_hash, email_verified) values ('signin@example.com', $1, true)`, [
    await hashPassword('bench-password'),
  ]);
  await db.end();

  const ceilingUrl = await startCeiling(started);

  const base = `http://127.0.0.1:${port}`;
  const json = { 'content-type': 'application/json' };
  const results: LoadResult[] = [];
  results.push(
    await runLoad({
      title: ceilingTitle,
      url: ceilingUrl,
      connections,
      durationSeconds,
    }),
  );
  results.push(await runLoad({ title: 'GET /api/health', url: `${base}/api/health`, connections, durationSeconds }));
  let next = 0;
  const success = await runLoad({
    title: 'POST /api/auth/email/verify, success (mobile)',
    url: `${base}/api/auth/email/verify?client_type=mobile`,
    method: 'POST',
    headers: json,
    connections,
    durationSeconds,
    setupRequest: (request) => ({
      ...request,
      body: JSON.stringify({ otp: code, email: emails[next++ % emails.length] }),
    }),
  });
  if (next > emails.length)
    process.stderr.write(`warning: ${next} requests for ${emails.length} prepared users: raise --users\n`);
  results.push(success);
  results.push(
    await runLoad({
      title: 'POST /api/auth/email/verify, wrong code',
      url: `${base}/api/auth/email/verify?client_type=mobile`,
      method: 'POST',
      headers: json,
      body: JSON.stringify({ otp: '000001', email: 'bench-0@example.com' }),
      connections,
      durationSeconds,
      expectStatus: 400,
    }),
  );
  results.push(
    await runLoad({
      title: 'POST /api/auth/sessions (sign-in, scrypt)',
      url: `${base}/api/auth/sessions?client_type=mobile`,
      method: 'POST',
      headers: json,
      body: JSON.stringify({ email: 'signin@example.com', password: 'bench-password' }),
      connections,
      durationSeconds,
    }),
  );
  const version = (await admin.query('show server_version')).rows[0]?.server_version;
  console.log(
    `\nPostgreSQL ${version}; ${os.cpus().length} cores; Node ${process.version}; ${connections} connections, ${durationSeconds} s each\n`,
  );
  console.log(resultTable(results));
} finally {
  await stopAll(started);
  await admin.query(`drop database if exists ${dbName} with (force)`);
  await admin.end();
}
