import { randomUUID } from 'node:crypto';
import fastifyCookie from '@fastify/cookie';
import fastifyJwt from '@fastify/jwt';
import Fastify, { type FastifyInstance } from 'fastify';
import type { LoggerOptions } from 'pino';
import { jwtOptions } from './auth/access-token.ts';
import { resolveJwtSecret } from './auth/signing-key.ts';
import type { Config } from './config.ts';
import type { AppContext } from './context.ts';
import { registerContractDocs, registerContractRoutes } from './contract-routes.ts';
import type { DatabaseHandle } from './db/database.ts';
import { errorHandler, notFoundHandler } from './errors.ts';

export interface AppDeps {
  database: DatabaseHandle;
  /** Overrides for Fastify's logger (tests pass false, or a stream to read what was logged). */
  logger?: boolean | (LoggerOptions & { stream?: NodeJS.WritableStream });
}

const ACCESS_TOKEN_TTL_SECONDS = 15 * 60;

function loggerOptions(config: Readonly<Config>): LoggerOptions {
  return {
    level: config.logLevel,
    redact: [
      'req.headers.authorization',
      'req.headers.cookie',
      'req.headers["x-csrf-token"]',
      'res.headers["set-cookie"]',
    ],
    ...(process.stdout.isTTY && config.nodeEnv !== 'production'
      ? { transport: { target: 'pino-pretty', options: { translateTime: 'HH:MM:ss.l', ignore: 'pid,hostname' } } }
      : {}),
  };
}

/** Builds the whole app on an open database, without listening. */
export async function buildApp(config: Readonly<Config>, deps: AppDeps): Promise<FastifyInstance> {
  const app = Fastify({
    logger: deps.logger ?? loggerOptions(config),
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && /^[\w.-]{1,128}$/.test(given) ? given : randomUUID();
    },
    bodyLimit: 1024 * 1024,
    ajv: {
      customOptions: {
        // Reject what the spec does not allow instead of quietly changing it.
        removeAdditional: false,
        coerceTypes: false,
        useDefaults: true,
        allErrors: false,
        strict: false,
      },
    },
  });

  const ctx: AppContext = {
    config,
    db: deps.database.db,
    databaseKind: deps.database.kind,
    startedAt: Date.now(),
  };

  // Only application/json is declared in the spec: anything else is 415, never an unvalidated body.
  app.removeContentTypeParser('text/plain');
  app.setErrorHandler(errorHandler);
  app.setNotFoundHandler(notFoundHandler);
  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id);
  });

  await app.register(fastifyCookie);
  await app.register(fastifyJwt, jwtOptions(await resolveJwtSecret(config, ctx.db), ACCESS_TOKEN_TTL_SECONDS));

  await registerContractDocs(app);
  await registerContractRoutes(app, ctx);

  return app;
}
