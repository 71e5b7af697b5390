import fastifySwagger from '@fastify/swagger';
import fastifySwaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance, onRequestHookHandler, preValidationHookHandler } from 'fastify';
import openapiGlue from 'fastify-openapi-glue';
import { operations } from '../generated/contract.ts';
import { bearerAuth } from './auth/access-token.ts';
import type { AppContext } from './context.ts';
import { ApiError } from './errors.ts';
import { createServiceHandlers } from './handlers/index.ts';
import { specDocument, specYaml } from './spec.ts';

const requireBody: preValidationHookHandler = async (request) => {
  if (request.body === undefined) {
    throw new ApiError(400, 'INVALID_INPUT', 'body is required: send a JSON object with Content-Type application/json');
  }
};

/** The path of the first string in a JSON value that PostgreSQL cannot store (NUL, or an unpaired surrogate). */
export function findUnstorableString(value: unknown, path = 'body'): string | undefined {
  if (typeof value === 'string') return value.includes('\u0000') || !value.isWellFormed() ? path : undefined;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = findUnstorableString(value[i], `${path}[${i}]`);
      if (found) return found;
    }
  } else if (value !== null && typeof value === 'object') {
    for (const [key, item] of Object.entries(value)) {
      const found = findUnstorableString(item, `${path}.${key}`);
      if (found) return found;
    }
  }
  return undefined;
}

const rejectUnstorableStrings: preValidationHookHandler = async (request) => {
  const path = findUnstorableString(request.body);
  if (path !== undefined) {
    throw new ApiError(400, 'INVALID_INPUT', `${path} contains a NUL character or an unpaired UTF-16 surrogate`);
  }
};

const asArray = <T>(value: T | T[] | undefined): T[] =>
  value === undefined ? [] : Array.isArray(value) ? value : [value];

/**
 * Binds every operation of openapi.yaml to its handler (fastify-openapi-glue), and closes the
 * gaps the plugin leaves: authentication runs before the body is read, and a declared-required
 * body that is missing is a 400 rather than undefined input.
 */
export async function registerContractRoutes(app: FastifyInstance, ctx: AppContext): Promise<void> {
  app.addHook('onRoute', (route) => {
    const operationId = (route.schema as { operationId?: string } | undefined)?.operationId;
    if (operationId === undefined || !(operationId in operations)) return;
    // Glue runs security handlers as a preHandler, after parsing and validating the body. They
    // (and a per-user rate limit placed after them) move to the end of onRequest.
    if (route.preHandler !== undefined) {
      route.onRequest = [...asArray(route.onRequest), ...asArray(route.preHandler)] as onRequestHookHandler[];
      delete route.preHandler;
    }
    const operation = operations[operationId as keyof typeof operations];
    // Each operation's own limit, from x-body-limit in openapi.yaml (413 above it).
    if (operation.bodyLimit !== null) route.bodyLimit = operation.bodyLimit;
    const hooks = [rejectUnstorableStrings];
    if (operation.bodyRequired) hooks.unshift(requireBody);
    route.preValidation = hooks;
  });
  await app.register(openapiGlue, {
    specification: structuredClone(specDocument),
    serviceHandlers: createServiceHandlers(ctx),
    securityHandlers: { bearerAuth },
    addCookieSchema: true,
  });
}

/** The published contract: Swagger UI at /docs, the spec at /openapi.json and /openapi.yaml. */
export async function registerContractDocs(app: FastifyInstance): Promise<void> {
  await app.register(fastifySwagger, {
    mode: 'static',
    specification: { document: structuredClone(specDocument) as never },
  });
  await app.register(fastifySwaggerUi, {
    routePrefix: '/docs',
    uiConfig: { deepLinking: true, tryItOutEnabled: true, persistAuthorization: true },
  });
  app.get('/openapi.json', { schema: { hide: true } }, async () => specDocument);
  app.get('/openapi.yaml', { schema: { hide: true } }, async (_request, reply) =>
    reply.type('application/yaml; charset=utf-8').send(specYaml),
  );
}
