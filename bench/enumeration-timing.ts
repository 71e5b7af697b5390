/**
 * Account enumeration by timing: does an auth operation answer a registered address measurably
 * slower or faster than an unknown one? Three kinds of address (known-unverified: signed up, never
 * verified; known-verified: signed up and verified; unknown: never seen) and three operations
 * (re-send the verification email, sign up, verify with a wrong code). And whether an address has an
 * unused code: a wrong sign-in code (`POST /api/auth/sessions`, method otp) and a wrong reset code
 * (exchange-reset-password-token) at an address with an unused code (known-with-code) and at a
 * verified account without one (known-verified), each against the unknown address (which has no
 * code); for verify, known-unverified is the address with an unused code. The per-address sign-in
 * back-off answers wrong sign-in codes 429 after the first five, so that comparison mostly measures
 * the back-off (as it would for an attacker). For each operation, each
 * known kind is compared with the unknown kind: a warm-up, then alternating pairs (known, unknown,
 * known, unknown, …), one request at a time over one keep-alive connection. Reported per comparison:
 * the median latency of each kind, their difference, whether it is within 1 ms, and whether status
 * and body are identical across the kinds.
 *
 *   npm run bench:timing -- --database pglite       # or postgres (the default)
 *   npm run bench:timing -- --pairs 50 --warmup 20 --timeout 900
 *   npm run bench:timing -- --quick                 # 10 pairs, 4 warm-up requests: a smoke test
 *   npm run bench:timing -- --operations verify-wrong-code,sign-in-wrong-code,reset-wrong-code
 *
 * As an attacker probes: one address of each kind, re-used for every request of an operation
 * (each operation gets its own three addresses, so that one operation's probes do not change the
 * state another operation starts from). The exception is sign-up's unknown kind: signing up an
 * address registers it, so every unknown sign-up uses a new address.
 *
 * The service runs from its build on loopback (bench/lib/setup.ts) in development mode without
 * SMTP_URL, so that mail is kept in its development inbox (LOG_LEVEL=warn keeps the log quiet);
 * the code that verifies the known-verified address is read from /dev/inbox.json. Per-IP rate limits are
 * raised so that nothing is limited. The database is new and empty and is removed afterwards:
 * PostgreSQL (DATABASE_URL names the server, default postgres://postgres@127.0.0.1:5432/postgres;
 * a database enumeration_timing_<random> is created beside it and dropped) or PGlite (a temporary
 * data directory). Writes bench/results/enumeration-timing-<database>.md and prints it.
 */
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { Client } from 'undici';
import { projectRoot, type RunningService } from '../scripts/lib/service-process.ts';
import { parseBenchOptions } from './lib/options.ts';
import { writeResults } from './lib/report.ts';
import { newScratchDatabase, type ScratchDatabase } from './lib/scratch-database.ts';
import { startServiceInstance, stopAll } from './lib/setup.ts';

const usage =
  'usage: npm run bench:timing -- [--quick] [--database postgres|pglite] [--pairs N] [--warmup N] [--timeout S] [--operations id,…]';
const { quick, kind, extra } = parseBenchOptions(usage, { quick: 1, full: 1 }, [
  'pairs',
  'warmup',
  'timeout',
  'operations',
]);
const whole = (value: string | undefined, fallback: number, max: number): number => {
  const n = Number(value ?? fallback);
  if (!Number.isSafeInteger(n) || n < 0 || n > max) {
    console.error(usage);
    process.exit(1);
  }
  return n;
};
const pairs = Math.max(1, whole(extra.pairs, quick ? 10 : 50, 1000));
const warmup = whole(extra.warmup, quick ? 4 : 20, 1000);
const timeoutSeconds = Math.max(1, whole(extra.timeout, 900, 3600));

const wallStart = Date.now();
const deadline = wallStart + timeoutSeconds * 1000;
const progress = (text: string) => process.stderr.write(`${text}\n`);
const loadAverage = () =>
  os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(' / ');
const loadAtStart = loadAverage();

const PASSWORD = 'enumeration-timing-password';
const WRONG_CODE = '000000';
const DOMAIN = 'example.com';
const tag = randomBytes(4).toString('hex');

type AddressKind = 'known-unverified' | 'known-verified' | 'known-with-code' | 'unknown';
type Operation = 'send-verification' | 'sign-up' | 'verify-wrong-code' | 'sign-in-wrong-code' | 'reset-wrong-code';
const operations: { id: Operation; title: string }[] = [
  { id: 'send-verification', title: 'POST /api/auth/email/send-verification' },
  { id: 'sign-up', title: 'POST /api/auth/users (sign-up)' },
  { id: 'verify-wrong-code', title: 'POST /api/auth/email/verify (wrong code)' },
  { id: 'sign-in-wrong-code', title: 'POST /api/auth/sessions (wrong sign-in code)' },
  { id: 'reset-wrong-code', title: 'POST /api/auth/email/exchange-reset-password-token (wrong code)' },
];
const chosen = extra.operations?.split(',').map((id) => id.trim());
if (chosen?.some((id) => !operations.some((op) => op.id === id))) {
  console.error(`${usage}\n  operations: ${operations.map((op) => op.id).join(', ')}`);
  process.exit(1);
}
const measured = chosen === undefined ? operations : operations.filter((op) => chosen.includes(op.id));
/** The operations that compare an address with an unused code (and a verified one without) with the unknown one. */
const codeOperations: readonly Operation[] = ['sign-in-wrong-code', 'reset-wrong-code'];
/** The per-address gap between emails: a code sent sooner after the verification email would not be stored. */
const EMAIL_GAP_MS = 61_000;

interface Sample {
  ms: number;
  status: number;
  body: string;
}

interface Comparison {
  operation: Operation;
  title: string;
  known: AddressKind;
  knownSamples: Sample[];
  unknownSamples: Sample[];
}

/** The git commit measured, and whether the working tree differs from it. */
function measuredCode(): string {
  try {
    const git = (...args: string[]) =>
      execFileSync('git', ['--no-optional-locks', ...args], { cwd: projectRoot, encoding: 'utf8' }).trim();
    const subject = git('log', '-1', '--format=%s');
    const head = `${git('log', '-1', '--format=%h')} "${subject.length > 70 ? `${subject.slice(0, 69)}…` : subject}"`;
    const changed = git('status', '--porcelain', '--untracked-files=all', '--', 'src').split('\n').filter(Boolean);
    if (changed.length === 0) return head;
    // A fingerprint of the uncommitted source, so that two runs can be told to measure the same code.
    const fingerprint = createHash('sha256').update(git('diff', 'HEAD', '--', 'src'));
    for (const line of changed.filter((l) => l.startsWith('??')).sort()) {
      fingerprint.update(readFileSync(path.join(projectRoot, line.slice(3))));
    }
    return `${head} plus ${changed.length} changed or new files under src/ (fingerprint ${fingerprint.digest('hex').slice(0, 12)})`;
  } catch {
    return 'unknown (not a git checkout)';
  }
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
};
const quantile = (xs: number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  const at = (s.length - 1) * q;
  const lo = Math.floor(at);
  const hi = Math.ceil(at);
  return (s[lo] as number) + ((s[hi] as number) - (s[lo] as number)) * (at - lo);
};

const started: RunningService[] = [];
let database: ScratchDatabase | undefined;
let http: Client | undefined;
try {
  const code = measuredCode();
  database = await newScratchDatabase(kind, 'enumeration_timing');
  progress(`starting the service on a new ${kind} database (${database.label})`);
  const limits = {
    RATE_LIMIT_VERIFY: '1000000',
    RATE_LIMIT_SIGN_UP: '1000000',
    RATE_LIMIT_SEND_VERIFICATION: '1000000',
    RATE_LIMIT_SIGN_IN: '1000000',
  };
  // Development mode with SMTP_URL unset (an empty value is "not set"): mail goes to the development inbox.
  const { base } = await startServiceInstance(started, {
    NODE_ENV: 'development',
    SMTP_URL: '',
    LOG_LEVEL: 'warn',
    ...limits,
    ...database.env,
  });
  if (!base.startsWith('http://127.0.0.1:')) throw new Error(`refusing ${base}: loopback only`);
  http = new Client(base, { pipelining: 1, keepAliveTimeout: 60_000, headersTimeout: 30_000, bodyTimeout: 30_000 });
  const client = http;

  /** One request, timed from sending to the last byte of the answer. */
  const send = async (method: 'POST', pathAndQuery: string, payload: object): Promise<Sample> => {
    if (Date.now() > deadline) throw new Error(`over the time limit of ${timeoutSeconds} s`);
    const t0 = process.hrtime.bigint();
    const res = await client.request({
      method,
      path: pathAndQuery,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(payload),
    });
    const body = await res.body.text();
    return { ms: Number(process.hrtime.bigint() - t0) / 1e6, status: res.statusCode, body };
  };
  const request = (operation: Operation, email: string): Promise<Sample> => {
    switch (operation) {
      case 'send-verification':
        return send('POST', '/api/auth/email/send-verification', { email });
      case 'sign-up':
        return send('POST', '/api/auth/users', { email, password: PASSWORD });
      case 'verify-wrong-code':
        return send('POST', '/api/auth/email/verify?client_type=mobile', { email, otp: WRONG_CODE });
      case 'sign-in-wrong-code':
        return send('POST', '/api/auth/sessions?client_type=mobile', { method: 'otp', email, otp: WRONG_CODE });
      case 'reset-wrong-code':
        return send('POST', '/api/auth/email/exchange-reset-password-token', { email, code: WRONG_CODE });
    }
  };
  const expect = (sample: Sample, status: number, what: string) => {
    if (sample.status !== status) throw new Error(`${what}: ${sample.status} ${sample.body.slice(0, 300)}`);
  };

  /** The code mailed to `email`, read from the development inbox (SMTP_URL unset keeps every email there). */
  const mailedCode = async (email: string): Promise<string> => {
    const until = Date.now() + 10_000;
    while (Date.now() < until) {
      const res = await fetch(`${base}/dev/inbox.json?to=${encodeURIComponent(email)}`);
      const { messages } = (await res.json()) as { messages: Array<{ code: string | null }> };
      const code = messages.find((m) => m.code !== null)?.code;
      if (code) return code;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`no code for ${email} in the development inbox`);
  };

  /** One address of each known kind for `operation`, made through the API as a user would. */
  const prepareAccounts = async (operation: Operation) => {
    const address = (k: string) => `timing-${tag}-${operation}-${k}@${DOMAIN}`;
    const unverified = address('unverified');
    const verified = address('verified');
    expect(await request('sign-up', unverified), 202, `sign-up of ${unverified}`);
    expect(await request('sign-up', verified), 202, `sign-up of ${verified}`);
    const otp = await mailedCode(verified);
    const verify = await send('POST', '/api/auth/email/verify?client_type=mobile', { email: verified, otp });
    expect(verify, 200, `verification of ${verified}`);
    return { 'known-unverified': unverified, 'known-verified': verified, verifiedAt: Date.now() } as const;
  };

  /**
   * For the code operations: a verified account that is then sent a code (after the per-address gap
   * since its verification email), and another without one.
   */
  const prepareCodeAccounts = async (operation: Operation) => {
    const withCode = await prepareAccounts(operation);
    const other = await prepareAccounts(`${operation}-other` as Operation);
    const wait = withCode.verifiedAt + EMAIL_GAP_MS - Date.now();
    if (wait > 0) {
      progress(`    waiting ${Math.ceil(wait / 1000)} s (the per-address gap between emails)`);
      await new Promise((r) => setTimeout(r, wait));
    }
    const email = withCode['known-verified'];
    const url = operation === 'sign-in-wrong-code' ? '/api/auth/email/send-otp' : '/api/auth/email/send-reset-password';
    expect(await send('POST', url, { email }), 202, `${url} for ${email}`);
    return { 'known-with-code': email, 'known-verified': other['known-verified'] } as const;
  };

  const comparisons: Comparison[] = [];
  for (const [i, op] of measured.entries()) {
    progress(`[${i + 1}/${measured.length}] ${op.title}: preparing a known-unverified and a known-verified address`);
    const known: Partial<Record<AddressKind, string>> = codeOperations.includes(op.id)
      ? await prepareCodeAccounts(op.id)
      : await prepareAccounts(op.id);
    let fresh = 0;
    const unknownAddress = () =>
      op.id === 'sign-up'
        ? `timing-${tag}-${op.id}-unknown-${fresh++}@${DOMAIN}`
        : `timing-${tag}-${op.id}-unknown@${DOMAIN}`;
    const knownKinds = codeOperations.includes(op.id)
      ? (['known-with-code', 'known-verified'] as const)
      : (['known-unverified', 'known-verified'] as const);
    for (const knownKind of knownKinds) {
      const knownAddress = known[knownKind] ?? '';
      const c: Comparison = {
        operation: op.id,
        title: op.title,
        known: knownKind,
        knownSamples: [],
        unknownSamples: [],
      };
      for (let w = 0; w < warmup; w++) {
        await request(op.id, w % 2 === 0 ? knownAddress : unknownAddress());
      }
      for (let p = 0; p < pairs; p++) {
        c.knownSamples.push(await request(op.id, knownAddress));
        c.unknownSamples.push(await request(op.id, unknownAddress()));
        if ((p + 1) % 10 === 0 || p + 1 === pairs) {
          progress(
            `    ${knownKind} vs unknown: ${p + 1}/${pairs} pairs, medians so far ${median(c.knownSamples.map((s) => s.ms)).toFixed(2)} / ${median(c.unknownSamples.map((s) => s.ms)).toFixed(2)} ms`,
          );
        }
      }
      comparisons.push(c);
    }
  }

  const version = await (async () => {
    if (kind === 'pglite') return 'PGlite';
    const c = new pg.Client({ connectionString: database.env.DATABASE_URL });
    await c.connect();
    try {
      return `PostgreSQL ${(await c.query<{ v: string }>("select current_setting('server_version') as v")).rows[0]?.v}`;
    } finally {
      await c.end();
    }
  })();

  // The report.
  const answers = (samples: Sample[]) => [...new Set(samples.map((s) => `${s.status} ${s.body}`))];
  const rows = comparisons.map((c) => {
    const k = c.knownSamples.map((s) => s.ms);
    const u = c.unknownSamples.map((s) => s.ms);
    const diff = median(k) - median(u);
    // Sign tests on neighbours, in both orders, so that an effect of a request's position (the first
    // or second of two) is not taken for one of the address: known_i against unknown_i (known sent
    // first) and unknown_i against known_i+1 (unknown sent first).
    const knownFirst = c.knownSamples.filter((s, j) => s.ms > (c.unknownSamples[j]?.ms ?? Infinity)).length;
    const unknownFirst = c.unknownSamples
      .slice(0, -1)
      .filter((s, j) => (c.knownSamples[j + 1]?.ms ?? -Infinity) > s.ms).length;
    const consistent = (slower: number, n: number) => Math.abs(slower - n / 2) >= Math.sqrt(n);
    const sameSide = knownFirst > pairs / 2 === unknownFirst > (pairs - 1) / 2;
    const systematic = pairs > 1 && sameSide && consistent(knownFirst, pairs) && consistent(unknownFirst, pairs - 1);
    const [ka, ua] = [answers(c.knownSamples), answers(c.unknownSamples)];
    const same = ka.length === 1 && ua.length === 1 && ka[0] === ua[0];
    return {
      c,
      same,
      answers: [...new Set([...ka, ...ua])],
      cells: [
        c.title,
        c.known,
        median(k).toFixed(2),
        median(u).toFixed(2),
        `${diff >= 0 ? '+' : ''}${diff.toFixed(2)}`,
        Math.abs(diff) <= 1 ? 'yes' : '**no**',
        `${(quantile(k, 0.75) - quantile(k, 0.25)).toFixed(2)} / ${(quantile(u, 0.75) - quantile(u, 0.25)).toFixed(2)}`,
        `${knownFirst}/${pairs} · ${unknownFirst}/${pairs - 1}`,
        systematic ? (knownFirst > pairs / 2 ? '**yes, known slower**' : '**yes, known faster**') : 'no',
        same ? `yes (${c.knownSamples[0]?.status})` : '**no**',
      ],
    };
  });
  const table = [
    '| operation | known kind | median known ms | median unknown ms | difference ms | within 1 ms | IQR known / unknown ms | known slower: known first · unknown first | consistent | same status and body |',
    '|---|---|---:|---:|---:|---|---:|---:|---|---|',
    ...rows.map((r) => `| ${r.cells.join(' | ')} |`),
  ].join('\n');
  const differing = rows
    .filter((r) => !r.same)
    .map(
      (r) => `- ${r.c.title}, ${r.c.known} vs unknown: ${r.answers.map((a) => `\`${a.slice(0, 200)}\``).join('; ')}`,
    );
  const loadAtEnd = loadAverage();
  const header = [
    `${version}; ${os.cpus().length} cores (${os.cpus()[0]?.model ?? 'unknown'}); Node ${process.version}; ${new Date().toISOString()}`,
    `Code measured: ${code}.`,
    `${pairs} alternating pairs per comparison (known, unknown, …) after ${warmup} warm-up requests; one request at a time over one keep-alive connection (undici); latency from sending to the last byte of the answer.`,
    `Addresses: one per known kind and operation, re-used for every request; the unknown kind re-uses one never-registered address, except for sign-up (a new address each time: signing up registers it).`,
    `Load average (1 / 5 / 15 min): ${loadAtStart} at the start, ${loadAtEnd} at the end; ${Math.round((Date.now() - wallStart) / 1000)} s in all.`,
  ].join('\n\n');
  const md = [
    `# Enumeration timing (${kind === 'postgres' ? 'PostgreSQL' : 'PGlite'})`,
    '',
    header,
    '',
    table,
    '',
    'Difference = median known - median unknown (positive: the registered address answers slower). "Known slower" counts the neighbouring requests in which the known address was the slower one, separately for known sent first (known_i, unknown_i) and unknown sent first (unknown_i, known_i+1). "Consistent" says that both counts lie on the same side of half, each at least two standard deviations (of a fair coin) away from it: a difference an attacker can find by repeating requests, whatever its size. Counts on opposite sides of half point to the position in the pair, not to the address.',
    ...(differing.length > 0 ? ['', 'Answers that differ between kinds:', '', ...differing] : []),
    '',
  ].join('\n');
  const [file] = writeResults(`enumeration-timing-${kind}`, md);
  console.log(`\n${md}`);
  console.log(`Written: ${path.relative(projectRoot, file as string)}`);
} finally {
  await http?.close().catch(() => {});
  await stopAll(started);
  await database?.drop().catch((err: Error) => progress(`could not remove the database: ${err.message}`));
}
