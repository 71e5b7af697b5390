import type { Redis } from 'ioredis';
import type { Kysely } from 'kysely';
import type { AuditTrail } from './audit/audit-trail.ts';
import type { AuthService } from './auth/auth-service.ts';
import type { SigningKeys } from './auth/signing-keys.ts';
import type { Clock } from './clock.ts';
import type { Config } from './config.ts';
import type { DatabaseHandle, DatabaseKind } from './db/database.ts';
import type { Database } from './db/schema.ts';
import type { EmbeddingsService } from './embeddings/embeddings-service.ts';
import type { ServiceMetrics } from './metrics/metrics.ts';
import type { PolicyCache } from './realtime/policy-cache.ts';
import type { RealtimeServer } from './realtime/socket-server.ts';

/** What handlers are given: configuration, the open database, the clock and the domain services. */
export interface AppContext {
  config: Readonly<Config>;
  db: Kysely<Database>;
  /** Reads that tolerate a little lag: on the replica while it is close enough (DatabaseHandle.read). */
  read: DatabaseHandle['read'];
  /** With DATABASE_READ_URL: the replica's state and lag. */
  replicaStatus: DatabaseHandle['replicaStatus'];
  databaseKind: DatabaseKind;
  clock: Clock;
  auth: AuthService;
  /** The audit log and the webhook outbox (src/audit/audit-trail.ts). */
  audit: AuditTrail;
  embeddings: EmbeddingsService;
  realtimePolicies: PolicyCache;
  realtime: RealtimeServer;
  /** The keys that sign access tokens. */
  signingKeys: SigningKeys;
  /** The shared Redis client (rate limits, sign-in throttle); undefined without REDIS_URL. */
  redis: Redis | undefined;
  /** null when metrics are off. */
  metrics: ServiceMetrics | null;
  startedAt: number;
}
