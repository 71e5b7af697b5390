import fastifyRateLimit from '@fastify/rate-limit';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Redis } from 'ioredis';
import { type OperationId, operations, type RateLimitName } from '../generated/contract.ts';
import { addressNetworks } from './client-address.ts';
import type { Config } from './config.ts';
import { errorBody } from './errors.ts';
import { redisStoreWithFallback } from './rate-limit-store.ts';
import { redisFallback } from './redis-fallback.ts';

/**
 * The size of each named limit that operations declare in openapi.yaml (`x-rate-limit`): a name
 * the contract uses and this table lacks fails the type check. Per client network over
 * RATE_LIMIT_WINDOW_SECONDS, or per user per minute, as the declaration's `by` says.
 */
function limitSizes(config: Readonly<Config>): Record<RateLimitName, { max: number; timeWindow: number }> {
  const l = config.rateLimits;
  const timeWindow = l.windowSeconds * 1000;
  return {
    signIn: { max: l.signIn, timeWindow },
    signUp: { max: l.signUp, timeWindow },
    verify: { max: l.verify, timeWindow },
    sendVerification: { max: l.sendVerification, timeWindow },
    refresh: { max: l.refresh, timeWindow },
    embeddings: { max: config.embeddings.rateLimitPerMinute, timeWindow: 60_000 },
    realtimePublish: { max: config.realtime.httpPublishRate, timeWindow: 60_000 },
  };
}

/**
 * The plugin's per-route setting (`config.rateLimit`) for an operation's declared limit, or
 * undefined when it declares none. A limit by user counts after authentication: its hook runs in
 * onRequest, after the security handler that the contract's routes move there.
 */
export function routeRateLimit(config: Readonly<Config>, operationId: OperationId): object | undefined {
  const declared = operations[operationId].rateLimits[0];
  if (declared === undefined) return undefined;
  const size = limitSizes(config)[declared.name];
  if (declared.by === 'ip') return size;
  return {
    ...size,
    hook: 'onRequest',
    keyGenerator: (request: FastifyRequest) => `user:${operationId}:${request.user.sub}`,
  };
}

/** Told of each request refused for its limit: the operation, and what the limit counts by. */
export type OnRateLimited = (operationId: OperationId, limit: 'ip' | 'user') => void;

/**
 * @fastify/rate-limit, counting per client network by default (X-Forwarded-For only with
 * TRUST_PROXY; IPv6 grouped by RATE_LIMIT_IPV6_PREFIX), in memory or, given the Redis client
 * (connectRedis, which also closes it), in Redis so that every instance shares the counts. It
 * limits the routes whose `config.rateLimit` is set (routeRateLimit) when they are added, so it is
 * registered after the hook that sets it (registerOperationRules) and before the contract's routes.
 */
export async function registerRateLimits(
  app: FastifyInstance,
  config: Readonly<Config>,
  redis: Redis | undefined,
  onLimited?: OnRateLimited,
): Promise<void> {
  await app.register(fastifyRateLimit, {
    global: false,
    // An IPv6 client by its network (RATE_LIMIT_IPV6_PREFIX, a /56 by default), not by the address it picked in it.
    keyGenerator: (request: FastifyRequest) => addressNetworks(request.ip, config.rateLimits.ipv6Prefix).network,
    ...(redis
      ? {
          store: redisStoreWithFallback(
            redis,
            `${config.redisKeyPrefix}rate-limit:`,
            redisFallback({ redis, log: app.log, counts: 'rate limits' }),
          ),
        }
      : {}),
    // The stores do not fail (Redis falls back to counting in memory); should one, let the request through.
    skipOnError: true,
    onExceeded: (request: FastifyRequest) => {
      const operationId = (request.routeOptions.schema as { operationId?: string } | undefined)?.operationId;
      const declared = operationId === undefined ? undefined : operations[operationId as OperationId]?.rateLimits[0];
      if (declared !== undefined) onLimited?.(operationId as OperationId, declared.by);
    },
    errorResponseBuilder: (_request, context) =>
      errorBody('RATE_LIMITED', `Too many requests; try again in ${Math.ceil(context.ttl / 1000)} s`),
  });
}
