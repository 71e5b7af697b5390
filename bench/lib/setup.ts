import { createHash } from 'node:crypto';
import { freePort, type RunningService, startService, waitFor200 } from '../../scripts/lib/service-process.ts';

/** Starts the ceiling, a bare Fastify JSON route, in its own process; returns its URL. */
export async function startCeiling(started: RunningService[]): Promise<string> {
  const port = await freePort();
  started.push(startService({ PORT: String(port) }, 'bench/bare-server.ts'));
  const url = `http://127.0.0.1:${port}/bare`;
  await waitFor200(url, 30_000);
  return url;
}

export const ceilingTitle = 'bare Fastify JSON route (ceiling)';

/** Starts the loopback OpenAI-compatible fake (bench/fake-upstream-server.ts); returns its API root (…/v1). */
export async function startFakeUpstreamProcess(started: RunningService[]): Promise<string> {
  const port = await freePort();
  started.push(startService({ PORT: String(port) }, 'bench/fake-upstream-server.ts'));
  const root = `http://127.0.0.1:${port}/v1`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    const up = await fetch(`${root}/embeddings`, {
      method: 'POST',
      body: JSON.stringify({ model: 'm', input: 'x' }),
    }).then(
      (r) => r.ok,
      () => false,
    );
    if (up) return root;
    if (Date.now() > deadline) throw new Error(`the fake upstream on port ${port} did not come up`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Environment for a benchmarked service that keeps an administrator account (see adminAccessToken). */
export const benchAdminEnv = {
  ADMIN_EMAIL: 'bench-admin@example.com',
  ADMIN_PASSWORD: 'bench-admin-password',
};

/** Signs in as the administrator of benchAdminEnv (mobile client) and returns the access token. */
export async function adminAccessToken(base: string): Promise<string> {
  const res = await fetch(`${base}/api/auth/sessions?client_type=mobile`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email: benchAdminEnv.ADMIN_EMAIL, password: benchAdminEnv.ADMIN_PASSWORD }),
  });
  if (res.status !== 200) throw new Error(`administrator sign-in failed: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { accessToken: string }).accessToken;
}

/**
 * Environment of a benchmarked service: production mode, warnings only in the log, a fixed
 * signing key, mail that is never sent, and the administrator of adminAccessToken.
 */
export const benchServiceEnv = {
  NODE_ENV: 'production',
  // Production refuses weak secrets. One for every run and process (the suite, then the soak, on the
  // same kept database): the signing keys are sealed under it.
  JWT_SECRET: createHash('sha512').update('accounts-service benchmark databases, on loopback only').digest('base64'),
  SMTP_URL: 'smtp://127.0.0.1:9',
  LOG_LEVEL: 'warn',
  ...benchAdminEnv,
};

/** Stops every process a benchmark started and waits for them to exit. */
export async function stopAll(started: RunningService[]): Promise<void> {
  for (const s of started) s.child.kill('SIGTERM');
  await Promise.all(started.map((s) => s.exited));
}

/**
 * Per-IP and per-user limits out of the way: every benchmark request comes from 127.0.0.1, and one
 * administrator sends every embeddings request. The password-hashing queue stays as it is, except
 * that one network may fill it (the default leaves a network a quarter of it, fewer places than
 * a case has connections).
 */
export const raisedLimits = {
  ...Object.fromEntries(
    [
      'EMBEDDINGS_RATE_LIMIT',
      'EMBEDDINGS_TOKENS_PER_MINUTE',
      'RATE_LIMIT_VERIFY',
      'RATE_LIMIT_SIGN_IN',
      'RATE_LIMIT_SIGN_UP',
      'RATE_LIMIT_SEND_VERIFICATION',
      'RATE_LIMIT_REFRESH',
      'REALTIME_PUBLISH_RATE',
    ].map((name) => [name, '1000000000']),
  ),
  PASSWORD_HASH_QUEUE_PER_NETWORK: '32',
};

/**
 * Starts one instance of the service as `npm start` runs it (the flags of package.json's `start`
 * script, `src/server.ts`, no build step; see startService) with benchServiceEnv, limits raised and
 * `env` on top, on a free loopback port, and waits for its health check. The database must be
 * prepared (or empty: the service migrates it at start); start instances that share a database one
 * after the other.
 */
export async function startServiceInstance(started: RunningService[], env: Record<string, string>) {
  const port = await freePort();
  const service = startService({ ...benchServiceEnv, ...raisedLimits, PORT: String(port), ...env });
  started.push(service);
  const base = `http://127.0.0.1:${port}`;
  try {
    await waitFor200(`${base}/api/health`, 120_000);
  } catch (err) {
    throw new Error(`${(err as Error).message}; its output:\n${service.output().slice(-3000)}`);
  }
  return { service, pid: service.child.pid as number, port, base };
}

/**
 * Starts the fake upstream (its API root is returned as `upstream`) and the service (as `npm start`
 * runs it) on the prepared database (limits raised, the upstream configured, `env` on top), waits
 * for its health check and signs in its administrator.
 */
export async function startBenchService(started: RunningService[], env: Record<string, string>) {
  const upstream = await startFakeUpstreamProcess(started);
  const { service, pid, base } = await startServiceInstance(started, {
    EMBEDDINGS_BASE_URL: upstream,
    EMBEDDINGS_API_KEY: 'bench-upstream-key',
    ...env,
  });
  return { service, pid, base, upstream, adminToken: await adminAccessToken(base) };
}
