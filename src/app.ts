import { randomUUID } from 'node:crypto';
import fastifyCookie from '@fastify/cookie';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest, LogController } from 'fastify';
import type { LoggerOptions } from 'pino';
import { type AuditTrail, createAuditTrail } from './audit/audit-trail.ts';
import { WEBHOOK_EVENT_TYPES } from './audit/event-types.ts';
import { type AccessTokenClaims, AccessTokens } from './auth/access-token.ts';
import { createAuthService } from './auth/auth-service.ts';
import { deriveKeys } from './auth/crypto.ts';
import { startAuthHousekeeping } from './auth/housekeeping.ts';
import { registerPasswordHashing } from './auth/password-hashing.ts';
import { registerResetPasswordPage } from './auth/reset-password-page.ts';
import { resolveJwtSecret, resolveTokenIssuer } from './auth/service-secret.ts';
import { createSessionRevocations } from './auth/session-revocations.ts';
import { createSignInThrottle } from './auth/sign-in-throttle.ts';
import { SigningKeys } from './auth/signing-keys.ts';
import { registerVerifyEmailPage } from './auth/verify-email-page.ts';
import { type Clock, systemClock } from './clock.ts';
import type { Config } from './config.ts';
import type { AppContext } from './context.ts';
import { registerContractDocs, registerContractRoutes } from './contract-routes.ts';
import { corsHeaders, registerCors } from './cors.ts';
import type { DatabaseHandle } from './db/database.ts';
import { NotificationListener } from './db/notification-listener.ts';
import { legacyTokensSince } from './db/repositories/signing-keys.ts';
import { createEmbeddingsService } from './embeddings/embeddings-service.ts';
import { errorHandler, notFoundHandler, toErrorResponse } from './errors.ts';
import { clientErrorHandler, serverFactory } from './http-server.ts';
import { acceptEmptyJsonBodies } from './json-body.ts';
import { compilersOnFirstUse } from './lazy-compilers.ts';
import { registerDevInbox } from './mail/dev-inbox.ts';
import { createMailer } from './mail/mailer.ts';
import { observeRequests } from './metrics/http.ts';
import { createMetrics } from './metrics/metrics.ts';
import { registerOperationRules, withoutBody } from './operation-rules.ts';
import { registerRateLimits } from './rate-limits.ts';
import { PolicyCache } from './realtime/policy-cache.ts';
import { startRetention } from './realtime/retention.ts';
import { startRealtimeServer } from './realtime/socket-server.ts';
import { closeRedis, connectRedis } from './redis.ts';
import { applySecurityHeaders, registerSecurityHeaders } from './security-headers.ts';
import { WebhookDelivery, type WebhookTuning } from './webhooks/delivery.ts';

export interface AppDeps {
  database: DatabaseHandle;
  /** The source of "now" (tests move it); the system clock by default. */
  clock?: Clock;
  /** Overrides for Fastify's logger (tests pass false, or a stream to read what was logged). */
  logger?: boolean | (LoggerOptions & { stream?: NodeJS.WritableStream });
  /**
   * The audit trail, instead of the one writing to the audit log and the webhook outbox: only for
   * benchmarks and tests (bench/audit-cost.ts compares with NO_AUDIT_TRAIL).
   */
  audit?: AuditTrail;
  /** Overrides for the webhook delivery's retry horizon, backoff and polling (tests shrink them). */
  webhookTuning?: Partial<WebhookTuning>;
  /**
   * `false`: no hourly housekeeping (its first run comes 5 s after the start), for tests that record
   * every statement the database sees while a request runs.
   */
  housekeeping?: false;
}

function loggerOptions(config: Readonly<Config>): LoggerOptions {
  return {
    level: config.logLevel,
    redact: [
      'req.headers.authorization',
      'req.headers.cookie',
      'req.headers["x-csrf-token"]',
      'res.headers["set-cookie"]',
    ],
    serializers: {
      // Verification links carry their token in the query string, and providers' returns their
      // code and state: never write them to the log.
      req: (req: { method: string; url: string; hostname?: string; ip?: string; id?: string }) => ({
        method: req.method,
        url: req.url.replace(/([?&](?:token|code|state|insforge_code)=)[^&]*/gi, '$1[redacted]'),
        host: req.hostname,
        remoteAddress: req.ip,
      }),
    },
    ...(process.stdout.isTTY && config.nodeEnv !== 'production'
      ? { transport: { target: 'pino-pretty', options: { translateTime: 'HH:MM:ss.l', ignore: 'pid,hostname' } } }
      : {}),
  };
}

/**
 * Fastify's request log lines, one per request: the request (its secrets redacted by the `req`
 * serializer), the status and the time taken, written once it is answered. The others (errors of
 * the default handlers, streams, serializers) stay as Fastify writes them.
 */
class OneLinePerRequest extends LogController {
  override incomingRequest(): void {}

  override requestCompleted(error: Error | null, request: FastifyRequest, reply: FastifyReply): void {
    const line = { req: request, res: reply, responseTime: reply.elapsedTime };
    if (error) reply.log.error({ ...line, err: error }, 'request errored');
    else reply.log.info(line, 'request completed');
  }
}

/** Builds the whole app on an open database, without listening. */
export async function buildApp(config: Readonly<Config>, deps: AppDeps): Promise<FastifyInstance> {
  const app = Fastify({
    // Redaction and serializers apply whatever the caller adds (level, stream).
    logger: deps.logger === false ? false : { ...loggerOptions(config), ...(deps.logger === true ? {} : deps.logger) },
    // One line per request, written when it is answered, instead of two.
    logController: new OneLinePerRequest(),
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && /^[\w.-]{1,128}$/.test(given) ? given : randomUUID();
    },
    // Operations set their own limits (x-body-limit in openapi.yaml); other routes take no body.
    bodyLimit: 16 * 1024,
    // Path parameters are checked by their schemas (400), however long: the HTTP layer bounds the
    // request line. Fastify's default (100) would answer an undeclared 414 first.
    routerOptions: { maxParamLength: 1024 * 1024 },
    serverFactory: serverFactory(config),
    // A path that cannot be decoded (a stray `%`) is refused before routing: in the Error shape too.
    frameworkErrors: (err, request, reply: FastifyReply) => {
      applySecurityHeaders(request, reply);
      reply.headers(corsHeaders(config, request.headers.origin));
      const { body, headers } = toErrorResponse(err);
      void reply.code(body.statusCode).headers(headers).send(body);
    },
    clientErrorHandler,
    trustProxy:
      typeof config.trustProxy === 'number'
        ? (_address: string, hop: number) => hop < (config.trustProxy as number)
        : config.trustProxy,
    // Validators and serializers compiled at the first request that needs them (lazy-compilers.ts).
    schemaController: compilersOnFirstUse(),
    ajv: {
      customOptions: {
        // Reject what the spec does not allow instead of quietly changing it.
        removeAdditional: false,
        coerceTypes: false,
        useDefaults: true,
        allErrors: false,
        // Each issue carries the failing value: which branch of a oneOf a body meant depends on it.
        verbose: true,
        strict: false,
      },
    },
  });

  // Only application/json is declared in the spec: anything else is 415, never an unvalidated body.
  app.removeContentTypeParser('text/plain');
  acceptEmptyJsonBodies(app);
  app.setErrorHandler(errorHandler);
  app.setNotFoundHandler(notFoundHandler);
  // An unknown path (or a method its path does not take) is 404 or 405 whatever its body: never
  // 413 or 415 for a body nobody will read.
  // A callback, not an async function: this runs for every request, and a promise per request cost
  // the fastest route (GET /api/realtime/permissions) about 40% of its throughput.
  app.addHook('preParsing', (request, _reply, payload, done) => {
    done(null, request.is404 ? withoutBody(request) : payload);
  });
  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id);
  });
  // Before any plugin: hooks reach only the plugins registered after them.
  registerSecurityHeaders(app, config);
  // An app-wide hook: every answer of every route (429s and 404s included) gets the CORS headers.
  await registerCors(app, config);
  // Metrics only when they are served somewhere (METRICS_TOKEN or METRICS_PORT).
  const metrics = config.metrics.token !== undefined || config.metrics.port !== undefined ? createMetrics() : null;
  app.decorate('metrics', metrics);
  if (metrics !== null) observeRequests(app, metrics);

  const db = deps.database.db;
  const clock = deps.clock ?? systemClock;
  const secret = await resolveJwtSecret(config, db);
  const keys = deriveKeys(secret);
  await app.register(fastifyCookie);
  // Set by bearerAuth on the requests of operations that need a session.
  app.decorateRequest('user', null as unknown as AccessTokenClaims);

  // The process's one LISTEN connection (PostgreSQL), for the session revocations and the realtime
  // policies, and its one fallback poll while it cannot listen. Its subscribers come in before it starts.
  const notifications = new NotificationListener({
    url: config.database.kind === 'postgres' ? config.database.url : undefined,
    name: 'notification listener',
    log: app.log,
  });
  app.addHook('onClose', () => notifications.close());
  // Access tokens expire by the system clock (the JWT library's), so revocations are kept by it too.
  const revocations = createSessionRevocations({
    db,
    database: config.database,
    notifications,
    accessTokenTtlSeconds: config.accessTokenTtlSeconds,
    log: app.log,
  });
  app.decorate('sessionRevocations', revocations);
  app.addHook('onClose', () => revocations.close());
  const realtimePolicies = new PolicyCache(db, notifications, app.log);
  app.addHook('onClose', () => realtimePolicies.close());
  const signingKeys = new SigningKeys({
    db,
    issuer: await resolveTokenIssuer(config, db),
    sealingKey: keys.signingKeys,
    notifications,
    log: app.log,
    now: () => clock.now(),
  });
  app.addHook('onClose', () => signingKeys.close());
  // The webhook outbox's delivery (WEBHOOK_URL), subscribed before the listener starts; started below.
  const webhooks =
    config.webhooks.url === undefined || config.webhooks.secret === undefined
      ? undefined
      : new WebhookDelivery({
          db,
          url: config.webhooks.url,
          secret: config.webhooks.secret,
          timeoutMs: config.webhooks.timeoutMs,
          retentionDays: config.webhooks.retentionDays,
          notifications,
          log: app.log,
          events: metrics?.webhooks,
          now: () => clock.now(),
          tuning: deps.webhookTuning,
        });
  if (webhooks !== undefined) app.addHook('onClose', () => webhooks.close());
  await notifications.start();
  await revocations.start();
  await realtimePolicies.start();
  await signingKeys.start();
  const legacySince = await legacyTokensSince(db);
  const accessTokens = new AccessTokens({
    keys: signingKeys,
    ttlSeconds: config.accessTokenTtlSeconds,
    legacy: {
      secret,
      acceptedUntil:
        legacySince === undefined ? undefined : legacySince.getTime() + config.accessTokenTtlSeconds * 1000,
    },
    now: () => clock.now().getTime(),
  });
  app.decorate('accessTokens', accessTokens);
  app.decorate('signingKeys', signingKeys);

  const redis = await connectRedis(config, app.log);
  if (redis !== undefined) app.addHook('onClose', () => closeRedis(redis));
  const mailer = createMailer(config, app.log);
  // (tokenIssuer is PUBLIC_URL when it is set.)
  if (config.nodeEnv === 'production' && config.tokenIssuer === undefined) {
    app.log.warn(
      `PUBLIC_URL is not set: emailed links point at ${config.publicUrl} (from HOST and PORT), which people's browsers cannot reach from elsewhere; set PUBLIC_URL to the address they use (https://auth.example.com)`,
    );
  }
  const audit =
    deps.audit ??
    createAuditTrail({
      clock,
      webhookEvents: new Set(config.webhooks.url === undefined ? [] : (config.webhooks.events ?? WEBHOOK_EVENT_TYPES)),
    });
  const auth = createAuthService({
    db,
    read: deps.database.read,
    config,
    clock,
    mailer,
    keys,
    signAccessToken: (claims) => accessTokens.sign(claims),
    revocations,
    signInThrottle: createSignInThrottle({
      redis,
      redisKeyPrefix: config.redisKeyPrefix,
      log: app.log,
      now: () => clock.now().getTime(),
    }),
    log: app.log,
    events: metrics?.auth,
    audit,
  });
  app.addHook('onClose', async () => {
    await auth.drainMail();
    mailer.close();
  });
  await auth.ensureAdmin();
  const embeddings = createEmbeddingsService({
    config,
    db,
    clock,
    log: app.log,
    events: metrics?.embeddings,
    endUserKey: keys.endUser,
    redis,
  });
  app.addHook('onClose', () => embeddings.close());
  const realtime = startRealtimeServer(app, {
    config,
    db,
    now: () => clock.now(),
    revocations,
    signingKeys,
    policies: realtimePolicies,
    redis,
    events: metrics?.realtime,
  });
  // Sockets first: an open WebSocket would keep the HTTP server from closing.
  app.addHook('preClose', () => realtime.close());
  const stopRetention = startRetention(db, config.realtime.retentionDays, () => clock.now(), app.log);
  app.addHook('onClose', () => stopRetention());
  if (config.signingKeyRotationDays !== undefined) {
    const stopRotation = signingKeys.startAutomaticRotation(
      config.signingKeyRotationDays,
      config.accessTokenTtlSeconds,
    );
    app.addHook('onClose', () => stopRotation());
  }
  if (deps.housekeeping !== false) {
    const stopHousekeeping = startAuthHousekeeping(db, () => clock.now(), app.log, {
      auditRetentionDays: config.audit.retentionDays,
    });
    app.addHook('onClose', () => stopHousekeeping());
  }
  webhooks?.start();
  const ctx: AppContext = {
    config,
    db,
    read: deps.database.read,
    replicaStatus: deps.database.replicaStatus,
    databaseKind: deps.database.kind,
    clock,
    auth,
    audit,
    embeddings,
    realtimePolicies,
    realtime,
    signingKeys,
    redis,
    metrics,
    startedAt: Date.now(),
  };

  // Each operation's rules from openapi.yaml, set on its route as it is added; the rate-limit
  // plugin, registered next, reads the limit they set.
  registerOperationRules(app, config);
  await registerRateLimits(
    app,
    config,
    redis,
    metrics ? (operation, limit) => metrics.rateLimited(operation, limit) : undefined,
  );

  // Before the routes that hash passwords, whose hashes it queues.
  const hashQueue = registerPasswordHashing(app, config, metrics ? (reason) => metrics.hashRefused(reason) : undefined);
  metrics?.readAtScrape({
    databasePool: () => deps.database.poolStats(),
    ...(deps.database.replicaStatus === undefined ? {} : { replica: deps.database.replicaStatus }),
    embeddingsBreaker: () => embeddings.breakerState(),
    tokenCounting: () => embeddings.tokenCounting(),
    realtime: () => realtime.stats(),
    passwordHashing: () => hashQueue.stats(),
    ...(webhooks === undefined ? {} : { webhooksPending: () => webhooks.pending() }),
  });

  await registerContractDocs(app);
  await registerVerifyEmailPage(app, { auth, config });
  await registerResetPasswordPage(app, { auth, config });
  if (mailer.inbox !== undefined) registerDevInbox(app, mailer.inbox, config.appName);
  await registerContractRoutes(app, ctx);

  return app;
}
