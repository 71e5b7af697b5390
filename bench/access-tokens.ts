/**
 * Access tokens in one process, on a fresh PostgreSQL database:
 *
 * - how many tokens a second one core verifies: HS256 (the verifier of the versions before signing
 *   keys: fast-jwt, the same checks) against ES256, RS256 and EdDSA through the service's own
 *   AccessTokens, each token seen once (the verified-token cache misses), and one token seen again
 *   and again (the cache answers: the hot path of a client that sends the same token for 15 minutes);
 * - how many it signs a second;
 * - the time from a rotation on one instance to the new kid on another (two SigningKeys, each with
 *   its own LISTEN connection, as two processes have).
 *
 *   npm run bench:tokens                         # 20,000 tokens per algorithm, 20 rotations
 *   npm run bench:tokens -- --tokens 5000 --rotations 5
 *
 * DATABASE_URL names the PostgreSQL server (loopback only; default postgres://postgres@127.0.0.1:5432/postgres).
 * Writes bench/results/access-tokens.{md,json}.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { createSigner, createVerifier } from 'fast-jwt';
import type { FastifyBaseLogger } from 'fastify';
import { AccessTokens, LEGACY_TOKEN_ISSUER, TOKEN_AUDIENCE } from '../src/auth/access-token.ts';
import { deriveKeys } from '../src/auth/crypto.ts';
import { SigningKeys } from '../src/auth/signing-keys.ts';
import { openDatabase } from '../src/db/database.ts';
import { migrateToLatest } from '../src/db/migrate.ts';
import { NotificationListener } from '../src/db/notification-listener.ts';
import { writeResults } from './lib/report.ts';
import { newScratchDatabase } from './lib/scratch-database.ts';

const { values } = parseArgs({
  options: {
    tokens: { type: 'string', default: '20000' },
    rotations: { type: 'string', default: '20' },
  },
});
const tokenCount = Number(values.tokens);
const rotations = Number(values.rotations);
if (!(Number.isSafeInteger(tokenCount) && tokenCount > 0 && Number.isSafeInteger(rotations) && rotations > 0)) {
  console.error('usage: npm run bench:tokens -- [--tokens 20000] [--rotations 20]');
  process.exit(1);
}

const TTL_SECONDS = 900;
const ISSUER = 'http://127.0.0.1:7130';
const CACHED_VERIFICATIONS = 200_000;
/** Warnings and errors to the console; nothing else. */
const log = {
  warn: console.warn,
  error: console.error,
  info: () => {},
  debug: () => {},
} as unknown as FastifyBaseLogger;
const secret = randomBytes(48).toString('base64');
const subject = () => ({
  sub: randomUUID(),
  email: 'bench@example.com',
  role: 'user' as const,
  sid: randomUUID(),
  token_use: 'access' as const,
});
const perSecond = (count: number, ms: number) => Math.round((count / ms) * 1000);
/** The heap in use after a full collection (the script runs with --expose-gc). */
function heapUsed(): number {
  (globalThis as { gc?: () => void }).gc?.();
  return process.memoryUsage().heapUsed;
}

/** Runs `fn` over every item and returns the rate. */
function rate<T>(items: readonly T[], fn: (item: T) => unknown): number {
  const start = performance.now();
  for (const item of items) fn(item);
  return perSecond(items.length, performance.now() - start);
}

interface AlgorithmFigures {
  alg: string;
  signedPerSecond: number;
  verifiedPerSecond: number;
  cachedPerSecond: number | null;
  tokenBytes: number;
  /** The heap the verified-token cache took, filled to its cap (10,000 tokens) by the verifications. */
  cacheMiB: number | null;
}

const scratch = await newScratchDatabase('postgres', 'bench_tokens');
const url = scratch.env.DATABASE_URL as string;
const handles: Array<{ close(): Promise<void> }> = [];
const listeners: NotificationListener[] = [];
try {
  const database = await openDatabase({ kind: 'postgres', url });
  handles.push(database);
  await migrateToLatest(database.db);

  async function instance(): Promise<{ keys: SigningKeys; tokens: AccessTokens }> {
    const notifications = new NotificationListener({ url, name: 'bench listener', log });
    listeners.push(notifications);
    const own = await openDatabase({ kind: 'postgres', url });
    handles.push(own);
    const keys = new SigningKeys({
      db: own.db,
      issuer: ISSUER,
      sealingKey: deriveKeys(secret).signingKeys,
      notifications,
      log,
      now: () => new Date(),
    });
    await notifications.start();
    await keys.start();
    const tokens = new AccessTokens({
      keys,
      ttlSeconds: TTL_SECONDS,
      legacy: { secret, acceptedUntil: undefined },
      now: Date.now,
    });
    return { keys, tokens };
  }

  const figures: AlgorithmFigures[] = [];
  console.log(`signing and verifying ${tokenCount.toLocaleString('en-US')} tokens per algorithm`);
  {
    // The verifier before signing keys: HS256 over JWT_SECRET, with the same claims required.
    const sign = createSigner({
      key: secret,
      algorithm: 'HS256',
      iss: LEGACY_TOKEN_ISSUER,
      aud: TOKEN_AUDIENCE,
      expiresIn: TTL_SECONDS * 1000,
    });
    const verify = createVerifier({
      key: secret,
      algorithms: ['HS256'],
      allowedIss: LEGACY_TOKEN_ISSUER,
      allowedAud: TOKEN_AUDIENCE,
      requiredClaims: ['sub', 'sid', 'role', 'token_use', 'iss', 'aud', 'iat', 'exp'],
    });
    const subjects = Array.from({ length: tokenCount }, subject);
    let tokens: string[] = [];
    const signed = rate(subjects, (s) => tokens.push(sign(s)));
    figures.push({
      alg: 'HS256 (before)',
      signedPerSecond: signed,
      verifiedPerSecond: rate(tokens, (t) => verify(t)),
      cachedPerSecond: null,
      tokenBytes: tokens[0]?.length ?? 0,
      cacheMiB: null,
    });
    tokens = [];
  }
  const a = await instance();
  for (const alg of ['ES256', 'RS256', 'EdDSA'] as const) {
    if ((await a.keys.list()).every((k) => k.alg !== alg || k.status !== 'current')) {
      await a.keys.create(alg);
      await a.keys.rotate();
    }
    const subjects = Array.from({ length: tokenCount }, subject);
    const tokens: string[] = [];
    const signed = rate(subjects, (s) => tokens.push(a.tokens.sign(s)));
    const heapBefore = heapUsed();
    const verified = rate(tokens, (t) => a.tokens.verify(t));
    // The verified tokens fill the cache up to its cap: what it holds is the growth of the heap.
    const cacheBytes = heapUsed() - heapBefore;
    const one = tokens[0] as string;
    const cached = rate(
      Array.from({ length: CACHED_VERIFICATIONS }, () => one),
      (t) => a.tokens.verify(t),
    );
    figures.push({
      alg,
      signedPerSecond: signed,
      verifiedPerSecond: verified,
      cachedPerSecond: cached,
      tokenBytes: one.length,
      cacheMiB: Number((cacheBytes / 2 ** 20).toFixed(1)),
    });
    console.log(`  ${alg}: ${verified.toLocaleString('en-US')} verified/s, ${cached.toLocaleString('en-US')}/s cached`);
  }

  console.log(`${rotations} rotations on instance A, watched from instance B`);
  const b = await instance();
  const delays: number[] = [];
  for (let i = 0; i < rotations; i++) {
    const start = performance.now();
    const [current] = (await a.keys.rotate()).filter((k) => k.status === 'current');
    while (b.keys.current().kid !== current?.kid) {
      if (performance.now() - start > 10_000) throw new Error('B did not see the rotation within 10 s');
      await new Promise((resolve) => setImmediate(resolve));
    }
    delays.push(performance.now() - start);
  }
  delays.sort((x, y) => x - y);
  const at = (q: number) =>
    Number((delays[Math.min(delays.length - 1, Math.floor(q * delays.length))] ?? 0).toFixed(1));
  const rotation = { rounds: rotations, p50Ms: at(0.5), p95Ms: at(0.95), maxMs: at(1) };

  const hs = figures[0] as AlgorithmFigures;
  const n = (x: number) => x.toLocaleString('en-US');
  const md = [
    '# Access tokens',
    '',
    `${os.cpus().length} cores (${os.cpus()[0]?.model.trim() ?? 'unknown'}); Node ${process.version}; ${n(tokenCount)} tokens per algorithm, one core; ${new Date().toISOString()}`,
    '',
    'Verified: each token once (the verified-token cache misses). Cached: one token again and again (the',
    'cache answers, as for a client sending its token with every request). Ratios are to HS256, the',
    'verifier before signing keys, measured in the same run. Reproduce with `npm run bench:tokens`.',
    '',
    '| algorithm | signed/s | verified/s | ratio to HS256 | cached/s | token bytes | cache, full (MiB) |',
    '|---|---:|---:|---:|---:|---:|---:|',
    ...figures.map(
      (f) =>
        `| ${f.alg} | ${n(f.signedPerSecond)} | ${n(f.verifiedPerSecond)} | ${(f.verifiedPerSecond / hs.verifiedPerSecond).toFixed(2)} | ${f.cachedPerSecond === null ? '-' : n(f.cachedPerSecond)} | ${f.tokenBytes} | ${f.cacheMiB ?? '-'} |`,
    ),
    '',
    `Rotation on instance A to the new kid on instance B (PostgreSQL NOTIFY, ${rotation.rounds} rotations): p50 ${rotation.p50Ms} ms, p95 ${rotation.p95Ms} ms, max ${rotation.maxMs} ms.`,
    '',
  ].join('\n');
  const written = writeResults('access-tokens', md, { date: new Date().toISOString(), tokenCount, figures, rotation });
  console.log(md);
  console.log(`Written: ${written.join(', ')}`);
} finally {
  for (const listener of listeners) await listener.close();
  for (const handle of handles) await handle.close();
  await scratch.drop();
}
