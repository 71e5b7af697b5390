import fastifyRateLimit from '@fastify/rate-limit';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Redis } from 'ioredis';
import { addressNetworks } from './client-address.ts';
import type { Config } from './config.ts';
import { redisStoreWithFallback } from './rate-limit-store.ts';

/** Per-IP limits by operationId (createEmbeddings and publishRealtimeMessage are limited per user, below). */
function limitsByOperation(config: Readonly<Config>): Record<string, number> {
  const l = config.rateLimits;
  return {
    verifyEmail: l.verify,
    createSession: l.signIn,
    createUser: l.signUp,
    sendVerificationEmail: l.sendVerification,
    refreshSession: l.refresh,
    // Logging out revokes a session: counted on its own, with the refresh limit.
    logout: l.refresh,
    // Emails and code checks of passwordless sign-in and password reset, each counted on its own.
    sendOtpEmail: l.sendVerification,
    sendResetPasswordEmail: l.sendVerification,
    exchangeResetPasswordToken: l.verify,
    resetPassword: l.verify,
    // OAuth: each start stores a pending sign-in; the exchange and ID tokens open sessions.
    getOAuthAuthorizationUrl: l.signIn,
    getCustomOAuthAuthorizationUrl: l.signIn,
    handleOAuthCallback: l.signIn,
    exchangeOAuthCode: l.verify,
    signInWithIdToken: l.signIn,
  };
}

/** Told of each request refused for its limit: the operation, and what the limit counts by. */
export type OnRateLimited = (operationId: string, limit: 'ip' | 'user') => void;

/**
 * @fastify/rate-limit on the auth operations, per client IP (X-Forwarded-For only with TRUST_PROXY;
 * IPv6 grouped by RATE_LIMIT_IPV6_PREFIX),
 * in memory or, given the Redis client (connectRedis, which also closes it), in Redis so that every
 * instance shares the counts. Must be called before the contract's routes are registered.
 */
export async function registerRateLimits(
  app: FastifyInstance,
  config: Readonly<Config>,
  redis: Redis | undefined,
  onLimited?: OnRateLimited,
): Promise<void> {
  const limits = limitsByOperation(config);
  /** Operations limited per user, per minute. */
  const perUserPerMinute: Record<string, number> = {
    createEmbeddings: config.embeddings.rateLimitPerMinute,
    publishRealtimeMessage: config.realtime.httpPublishRate,
  };
  const timeWindow = config.rateLimits.windowSeconds * 1000;
  // Runs before the plugin's own onRoute hook, which reads config.rateLimit.
  app.addHook('onRoute', (route) => {
    const operationId = (route.schema as { operationId?: string } | undefined)?.operationId;
    const max = operationId === undefined ? undefined : limits[operationId];
    if (max !== undefined) route.config = { ...(route.config as object), rateLimit: { max, timeWindow } } as never;
    const perMinute = operationId === undefined ? undefined : perUserPerMinute[operationId];
    if (perMinute !== undefined) {
      // Per user, so after authentication (preHandler hooks of secured routes run after the token check).
      const perUser = {
        max: perMinute,
        timeWindow: 60_000,
        hook: 'preHandler',
        keyGenerator: (request: FastifyRequest) => `user:${operationId}:${request.user.sub}`,
      };
      route.config = { ...(route.config as object), rateLimit: perUser } as never;
    }
  });
  let warnedAt = 0;
  const onFallback = (err: Error) => {
    if (Date.now() - warnedAt < 10_000) return;
    warnedAt = Date.now();
    app.log.warn({ err: { message: err.message } }, 'redis unavailable: rate limits counted per instance');
  };
  await app.register(fastifyRateLimit, {
    global: false,
    // An IPv6 client by its network (RATE_LIMIT_IPV6_PREFIX, a /56 by default), not by the address it picked in it.
    keyGenerator: (request: FastifyRequest) => addressNetworks(request.ip, config.rateLimits.ipv6Prefix).network,
    ...(redis ? { store: redisStoreWithFallback(redis, `${config.redisKeyPrefix}rate-limit:`, onFallback) } : {}),
    // The stores do not fail (Redis falls back to counting in memory); should one, let the request through.
    skipOnError: true,
    onExceeded: (request: FastifyRequest) => {
      const operationId = (request.routeOptions.schema as { operationId?: string } | undefined)?.operationId;
      if (operationId !== undefined) onLimited?.(operationId, operationId in perUserPerMinute ? 'user' : 'ip');
    },
    errorResponseBuilder: (_request, context) => ({
      statusCode: 429,
      error: 'RATE_LIMITED',
      message: `Too many requests; try again in ${Math.ceil(context.ttl / 1000)} s`,
    }),
  });
}
