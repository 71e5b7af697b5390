import { Readable } from 'node:stream';
import fastifySwagger from '@fastify/swagger';
import fastifySwaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance, onRequestHookHandler, preParsingHookHandler, preValidationHookHandler } from 'fastify';
import openapiGlue from 'fastify-openapi-glue';
import { operations } from '../generated/contract.ts';
import { bearerAuth } from './auth/access-token.ts';
import type { AppContext } from './context.ts';
import { ApiError } from './errors.ts';
import { createServiceHandlers } from './handlers/index.ts';
import { describeJsonProblem, findJsonProblem } from './json-values.ts';
import { metricsTokenCheck } from './metrics/http.ts';
import { cspHeader, DOCS_CSP } from './security-headers.ts';
import { asyncapiYaml, specDocument, specYaml } from './spec.ts';

const requireBody: preValidationHookHandler = async (request) => {
  if (request.body === undefined) {
    throw new ApiError('INVALID_INPUT', 'body is required: send a JSON object with Content-Type application/json');
  }
};

/**
 * An optional body that is absent means the same as `{}`. Set so, because an empty body sent with
 * `Content-Type: application/json` is still validated, as null, against the body's schema.
 */
const absentBodyAsEmpty: preValidationHookHandler = async (request) => {
  if (request.body === undefined) request.body = {};
};

/** Strings PostgreSQL cannot store, anywhere in the query or a JSON body, and nesting past MAX_JSON_DEPTH in the body. */
const rejectUnacceptableJson: preValidationHookHandler = async (request) => {
  const problem = findJsonProblem(request.query, 'query') ?? findJsonProblem(request.body);
  if (problem !== undefined) throw new ApiError('INVALID_INPUT', describeJsonProblem(problem));
};

/**
 * An operation that declares no body ignores whatever is sent with it: Fastify would otherwise
 * parse a DELETE's body and answer 413 or 415, which such an operation does not declare.
 */
const ignoreBody: preParsingHookHandler = async (request) => {
  delete request.headers['content-type'];
  delete request.headers['transfer-encoding'];
  request.headers['content-length'] = '0';
  return Readable.from([]);
};

type SpecResponses = Record<string, { content?: Record<string, unknown> }>;

/**
 * The spec as glue is given it. Glue takes every media type it meets for one that requests may be
 * sent in, and warns at each start when no body parser handles it; the only non-JSON media type is
 * a response's (getMetrics' Prometheus text, sent as a string that no schema serialises), so it is
 * left out of glue's copy.
 */
function specForGlue(): object {
  const spec = structuredClone(specDocument) as {
    paths: Record<string, Record<string, { responses?: SpecResponses }>>;
  };
  for (const item of Object.values(spec.paths)) {
    for (const operation of Object.values(item)) {
      for (const response of Object.values(operation.responses ?? {})) {
        for (const mediaType of Object.keys(response.content ?? {})) {
          if (mediaType !== 'application/json') delete response.content?.[mediaType];
        }
      }
    }
  }
  return spec;
}

/** A query schema that admits only the declared parameters (an operation without any gets an empty one). */
function closeQuery(schema: { querystring?: object }): void {
  schema.querystring = { type: 'object', properties: {}, ...schema.querystring, additionalProperties: false };
}

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
    // Unknown query parameters are refused like unknown body fields, unless the spec leaves the query open.
    if (!operation.openQuery) closeQuery(route.schema as { querystring?: object });
    const hooks = [rejectUnacceptableJson];
    if (operation.bodyRequired) hooks.unshift(requireBody);
    else if (operation.bodyLimit !== null) hooks.unshift(absentBodyAsEmpty);
    route.preValidation = hooks;
    if (operation.bodyLimit === null && operation.method === 'DELETE') {
      route.preParsing = [...asArray(route.preParsing), ignoreBody] as preParsingHookHandler[];
    }
  });
  await app.register(openapiGlue, {
    specification: specForGlue(),
    serviceHandlers: createServiceHandlers(ctx),
    securityHandlers: { bearerAuth, metricsToken: metricsTokenCheck(ctx.config.metrics.token) },
    addCookieSchema: true,
  });
}

/**
 * The published contracts: Swagger UI at /docs, the spec at /openapi.json and /openapi.yaml, the
 * realtime protocol at /asyncapi.yaml.
 */
export async function registerContractDocs(app: FastifyInstance): Promise<void> {
  await app.register(fastifySwagger, {
    mode: 'static',
    specification: { document: structuredClone(specDocument) as never },
  });
  await app.register(fastifySwaggerUi, {
    routePrefix: '/docs',
    uiConfig: { deepLinking: true, tryItOutEnabled: true, persistAuthorization: true },
    // Its pages and assets get their own CSP (the app's default, for JSON, would block them all).
    staticCSP: cspHeader(DOCS_CSP),
  });
  app.get('/openapi.json', { schema: { hide: true } }, async () => specDocument);
  app.get('/openapi.yaml', { schema: { hide: true } }, async (_request, reply) =>
    reply.type('application/yaml; charset=utf-8').send(specYaml),
  );
  app.get('/asyncapi.yaml', { schema: { hide: true } }, async (_request, reply) =>
    reply.type('application/yaml; charset=utf-8').send(asyncapiYaml),
  );
}
