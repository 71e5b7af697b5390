// What the property tests driven by the spec share (test/fuzz.test.ts, test/spec-conformance.test.ts):
// their run settings from the environment, the outside parts an app with every operation needs (an
// embeddings provider, an OpenID Provider, GitHub), and the settings that wire an app to them.
import type { Env } from '../../src/config.ts';
import { startFakeUpstream } from './fake-embeddings-upstream.ts';
import { startGithubFake } from './github-fake.ts';
import { SERVICE_CLIENT, startOidcProvider } from './oidc-provider.ts';

interface Teardown {
  teardown(fn: () => unknown): void;
}

const positive = (name: string, fallback: number) => {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < 1) throw new Error(`${name} must be a positive integer (got ${raw})`);
  return n;
};

/**
 * `<PREFIX>_RUNS` cases per operation, `<PREFIX>_SEED` (printed, to replay a run), `<PREFIX>_ONLY`
 * (some operations only) and `<PREFIX>_PATH` (with the seed: fast-check's counterexample path).
 */
export function propertyRunSettings(prefix: string, defaultRuns: number) {
  const seed = process.env[`${prefix}_SEED`];
  return {
    runs: positive(`${prefix}_RUNS`, defaultRuns),
    seed: seed ? Number(seed) : Date.now() % 2 ** 31,
    only: (process.env[`${prefix}_ONLY`] ?? '').split(',').filter(Boolean),
    replayPath: process.env[`${prefix}_PATH`] || undefined,
  };
}

/** The models the apps allow: the local one and upstream ones the fake answers for (and whose sizes the service knows). */
export const PROPERTY_MODELS = [
  'local/lexical-v1',
  'text-embedding-3-small',
  'text-embedding-3-large',
  'text-embedding-ada-002',
  'openai/text-embedding-3-small',
];

/** The outside parts: a fake embeddings provider, a real OpenID Provider and GitHub's fake, closed with `t`. */
export async function startOutsideParts(t: Teardown) {
  const upstream = await startFakeUpstream();
  t.teardown(() => upstream.close());
  const idp = await startOidcProvider();
  t.teardown(() => idp.close());
  const github = await startGithubFake();
  t.teardown(() => github.close());
  return { upstream, idp, github };
}

export type OutsideParts = Awaited<ReturnType<typeof startOutsideParts>>;

/**
 * An app's settings for those parts, with every per-IP and per-user limit out of the way (thousands
 * of requests come from 127.0.0.1): the models above, `google` and the custom provider `custom`
 * served by the OpenID Provider, and GitHub.
 */
export function propertyAppEnv(parts: Pick<OutsideParts, 'idp' | 'github'>, upstreamUrl: string, custom: string): Env {
  const prefix = `OAUTH_${custom.toUpperCase()}_`;
  return {
    COOKIE_SECURE: 'false',
    EMBEDDINGS_BASE_URL: upstreamUrl,
    EMBEDDINGS_API_KEY: 'sk-property-tests',
    EMBEDDINGS_MODELS: PROPERTY_MODELS.join(','),
    EMBEDDINGS_RETRY_BASE_MS: '5',
    EMBEDDINGS_TIMEOUT_MS: '5000',
    EMBEDDINGS_RATE_LIMIT: '1000000',
    REALTIME_HTTP_PUBLISH_RATE: '1000000',
    RATE_LIMIT_VERIFY: '1000000',
    RATE_LIMIT_SIGN_IN: '1000000',
    RATE_LIMIT_SIGN_UP: '1000000',
    RATE_LIMIT_SEND_VERIFICATION: '1000000',
    RATE_LIMIT_REFRESH: '1000000',
    AUTH_REDIRECT_ALLOWLIST: 'https://app.example.com',
    OAUTH_PROVIDERS: ['google', custom, 'github'].join(','),
    OAUTH_GOOGLE_CLIENT_ID: SERVICE_CLIENT.clientId,
    OAUTH_GOOGLE_CLIENT_SECRET: SERVICE_CLIENT.clientSecret,
    OAUTH_GOOGLE_ISSUER: parts.idp.issuer,
    [`${prefix}CLIENT_ID`]: SERVICE_CLIENT.clientId,
    [`${prefix}CLIENT_SECRET`]: SERVICE_CLIENT.clientSecret,
    [`${prefix}ISSUER`]: parts.idp.issuer,
    OAUTH_GITHUB_CLIENT_ID: parts.github.clientId,
    OAUTH_GITHUB_CLIENT_SECRET: parts.github.clientSecret,
    OAUTH_GITHUB_BASE_URL: parts.github.url,
    OAUTH_GITHUB_API_URL: parts.github.url,
  };
}
