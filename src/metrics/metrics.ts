import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { AuthEvents } from '../auth/auth-context.ts';
import type { HashQueueStats, HashRefusal } from '../auth/password-hashing.ts';
import type { PoolStats } from '../db/database.ts';
import type { ReplicaStatus } from '../db/read-replica.ts';
import type { EmbeddingsEvents } from '../embeddings/embeddings-service.ts';
import type { TokenCounterStats } from '../embeddings/token-counter.ts';
import type { BreakerState } from '../embeddings/upstream-breaker.ts';
import type { RealtimeEvents, RealtimeStats } from '../realtime/socket-server.ts';
import { createWebhookMetrics } from './webhooks.ts';

/**
 * What a rate limit counts by: the client's address, the signed-in user's requests, the address
 * signing in, or the signed-in user's embeddings tokens.
 */
export type RateLimitKey = 'ip' | 'user' | 'address' | 'tokens';

/** The `operation` label of requests no route of the service matched (404, 405): one value, whatever the path. */
export const UNMATCHED = 'unmatched';
/** The `operation` label of routes outside the contract (docs, the verification page). */
export const OUTSIDE_CONTRACT = 'other';

/** What is read at each scrape rather than counted as it happens; given once the parts that hold it exist. */
export interface ScrapeSources {
  databasePool(): PoolStats;
  /** With DATABASE_READ_URL: the replica's state and lag. */
  replica?(): ReplicaStatus;
  /** undefined when no embeddings provider is configured. */
  embeddingsBreaker(): BreakerState | undefined;
  /** The embeddings token-counting threads. */
  tokenCounting(): TokenCounterStats;
  realtime(): RealtimeStats;
  passwordHashing(): HashQueueStats;
  /** The webhook events waiting for delivery; absent while webhooks are off. */
  webhooksPending?(): Promise<number>;
}

const BREAKER_STATES: readonly BreakerState[] = ['closed', 'open', 'half-open'];

/** Seconds, from 5 ms (a cached token check) to 10 s (past the database's 2 s pool wait). */
const REQUEST_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
/** Seconds, from 10 ms (a provider on the same network) to 60 s (a long timeout). */
const UPSTREAM_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/**
 * The service's Prometheus metrics, in a registry of their own (one per app: never prom-client's
 * global one), with the recording hooks the parts of the service are given.
 */
export function createMetrics() {
  const registry = new Registry();
  const registers = [registry];
  collectDefaultMetrics({ register: registry });
  let sources: ScrapeSources | undefined;

  const requestDuration = new Histogram({
    name: 'http_request_duration_seconds',
    help: `Time to answer an HTTP request, by operationId ("${UNMATCHED}": no route; "${OUTSIDE_CONTRACT}": docs and pages) and status code`,
    labelNames: ['operation', 'status_code'] as const,
    buckets: REQUEST_BUCKETS,
    registers,
  });
  const rateLimited = new Counter({
    name: 'http_rate_limited_requests_total',
    help: 'Requests refused with 429 by a rate limit, by operationId and what the limit counts by (ip, user, address, tokens)',
    labelNames: ['operation', 'limit'] as const,
    registers,
  });
  const signIns = new Counter({
    name: 'auth_sign_ins_total',
    help: 'Password sign-ins, by result (ok: a session was opened; failed: wrong credentials or an unverified address)',
    labelNames: ['result'] as const,
    registers,
  });
  const verifications = new Counter({
    name: 'auth_email_verifications_total',
    help: 'Email verifications by code or link, by result (ok: a session was opened; failed: INVALID_OTP)',
    labelNames: ['result'] as const,
    registers,
  });
  for (const result of ['ok', 'failed']) {
    signIns.inc({ result }, 0);
    verifications.inc({ result }, 0);
  }
  const refreshReuse = new Counter({
    name: 'auth_refresh_token_reuse_total',
    help: 'Rotated refresh tokens presented again (each ended its session)',
    registers,
  });
  const upstreamDuration = new Histogram({
    name: 'embeddings_upstream_request_duration_seconds',
    help: 'Time of each HTTP exchange with the embeddings provider (each retry is one), by outcome (ok or the error code)',
    labelNames: ['outcome'] as const,
    buckets: UPSTREAM_BUCKETS,
    registers,
  });
  new Gauge({
    name: 'embeddings_breaker_state',
    help: "The embeddings provider's circuit breaker: 1 for its current state, 0 for the others (no series without a provider)",
    labelNames: ['state'] as const,
    registers,
    collect() {
      this.reset();
      const current = sources?.embeddingsBreaker();
      if (current === undefined) return;
      for (const state of BREAKER_STATES) this.set({ state }, state === current ? 1 : 0);
    },
  });
  // The pool's own running total, turned into increments at each scrape.
  let countedAtScrape = 0;
  new Counter({
    name: 'embeddings_token_counting_requests_total',
    help: 'Embeddings requests whose tokens were counted in the worker threads (never on the event loop)',
    registers,
    collect() {
      const completed = sources?.tokenCounting().completed ?? 0;
      this.inc(completed - countedAtScrape);
      countedAtScrape = completed;
    },
  });
  new Gauge({
    name: 'embeddings_token_counting_queued_requests',
    help: 'Embeddings requests waiting for a token-counting thread',
    registers,
    collect() {
      if (sources) this.set(sources.tokenCounting().queued);
    },
  });
  new Gauge({
    name: 'embeddings_token_counting_peak_requests_per_user',
    help: 'The most embeddings requests one user has had being counted at once since the start (at most 2)',
    registers,
    collect() {
      if (sources) this.set(sources.tokenCounting().peakPerUser);
    },
  });
  new Gauge({
    name: 'db_pool_connections',
    help: 'Database connections open in the pool (the embedded database has one)',
    registers,
    collect() {
      if (sources) this.set(sources.databasePool().total);
    },
  });
  new Gauge({
    name: 'db_pool_idle_connections',
    help: 'Database connections open and not lent to a request',
    registers,
    collect() {
      if (sources) this.set(sources.databasePool().idle);
    },
  });
  new Gauge({
    name: 'db_pool_waiting_requests',
    help: 'Requests waiting for a database connection',
    registers,
    collect() {
      if (sources) this.set(sources.databasePool().waiting);
    },
  });
  new Gauge({
    name: 'db_replica_lag_seconds',
    help: 'Replay lag of the read replica (DATABASE_READ_URL) at its last measurement; absent without one, -1 while it does not answer',
    registers,
    collect() {
      const replica = sources?.replica?.();
      if (replica !== undefined) this.set(replica.lagMs === null ? -1 : replica.lagMs / 1000);
    },
  });
  new Gauge({
    name: 'db_replica_serving_reads',
    help: 'Whether the read replica (DATABASE_READ_URL) serves the lag-tolerant reads now (1), or the primary does (0)',
    registers,
    collect() {
      const replica = sources?.replica?.();
      if (replica !== undefined) this.set(replica.state === 'replica' ? 1 : 0);
    },
  });
  new Gauge({
    name: 'realtime_connected_sockets',
    help: 'Realtime sockets connected to this instance',
    registers,
    collect() {
      if (sources) this.set(sources.realtime().sockets);
    },
  });
  new Gauge({
    name: 'realtime_subscriptions',
    help: "Channel subscriptions of this instance's sockets",
    registers,
    collect() {
      if (sources) this.set(sources.realtime().subscriptions);
    },
  });
  // Counted in a plain number on the delivery path (tens of thousands a second) and added at each scrape.
  let deliveredSinceScrape = 0;
  new Counter({
    name: 'realtime_deliveries_total',
    help: "Messages handed to this instance's sockets (one per receiving socket)",
    registers,
    collect() {
      this.inc(deliveredSinceScrape);
      deliveredSinceScrape = 0;
    },
  });
  const slowConsumers = new Counter({
    name: 'realtime_slow_consumer_disconnects_total',
    help: 'Sockets disconnected for not reading their messages fast enough',
    registers,
  });

  new Gauge({
    name: 'password_hash_queue_waiting',
    help: 'Password hashes (sign-up, sign-in, reset, change) waiting for a turn',
    registers,
    collect() {
      if (sources) this.set(sources.passwordHashing().waiting);
    },
  });
  new Gauge({
    name: 'password_hash_running',
    help: 'Password hashes running now (at most PASSWORD_HASH_CONCURRENCY)',
    registers,
    collect() {
      if (sources) this.set(sources.passwordHashing().running);
    },
  });
  const hashRefused = new Counter({
    name: 'password_hash_refused_total',
    help: "Requests answered 503 because the password-hash queue had no place (queue_full) or held the network's share (network_share)",
    labelNames: ['reason'] as const,
    registers,
  });
  for (const reason of ['queue_full', 'network_share']) hashRefused.inc({ reason }, 0);

  const recheckDuration = new Histogram({
    name: 'realtime_recheck_duration_seconds',
    help: 'How long one pass of the re-check of every live subscription took',
    buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10],
    registers,
  });
  const recheckEnded = new Counter({
    name: 'realtime_recheck_ended_subscriptions_total',
    help: 'Subscriptions ended because the policies no longer allow them',
    registers,
  });

  const webhooks = createWebhookMetrics(registers, () => sources?.webhooksPending?.());

  const auth: AuthEvents = {
    signIn: (result) => signIns.inc({ result }),
    emailVerification: (result) => verifications.inc({ result }),
    refreshTokenReused: () => refreshReuse.inc(),
    signInThrottled: () => rateLimited.inc({ operation: 'createSession', limit: 'address' }),
  };
  const embeddings: EmbeddingsEvents = {
    upstreamAttempt: (seconds, outcome) => upstreamDuration.observe({ outcome }, seconds),
    tokensLimited: () => rateLimited.inc({ operation: 'createEmbeddings', limit: 'tokens' }),
  };
  const realtime: RealtimeEvents = {
    delivered: () => {
      deliveredSinceScrape++;
    },
    slowConsumerDisconnected: () => slowConsumers.inc(),
    rechecked: (pass) => {
      recheckDuration.observe(pass.ms / 1000);
      recheckEnded.inc(pass.ended);
    },
  };

  return {
    /** The exposition's Content-Type (text format 0.0.4). */
    contentType: registry.contentType,
    /** Every series, in Prometheus' text format. */
    render: (): Promise<string> => registry.metrics(),
    /** Gives the gauges read at scrape time their sources. */
    readAtScrape(given: ScrapeSources): void {
      sources = given;
    },
    observeRequest(operation: string, statusCode: number, seconds: number): void {
      requestDuration.observe({ operation, status_code: String(statusCode) }, seconds);
    },
    rateLimited(operation: string, limit: RateLimitKey): void {
      rateLimited.inc({ operation, limit });
    },
    hashRefused(reason: HashRefusal): void {
      hashRefused.inc({ reason });
    },
    auth,
    embeddings,
    realtime,
    webhooks,
  };
}

export type ServiceMetrics = ReturnType<typeof createMetrics>;

declare module 'fastify' {
  interface FastifyInstance {
    /** The app's metrics; null when they are off (neither METRICS_TOKEN nor METRICS_PORT). */
    metrics: ServiceMetrics | null;
  }
}
