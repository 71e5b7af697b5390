import fastifySwagger from '@fastify/swagger';
import fastifySwaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance } from 'fastify';
import openapiGlue from 'fastify-openapi-glue';
import { operations } from '../generated/contract.ts';
import { bearerAuth } from './auth/access-token.ts';
import type { AppContext } from './context.ts';
import { methodNotAllowedHandler } from './errors.ts';
import { createServiceHandlers } from './handlers/index.ts';
import { metricsTokenCheck } from './metrics/http.ts';
import { cspHeader, DOCS_CSP } from './security-headers.ts';
import { asyncapiYaml, specDocument, specYaml } from './spec.ts';

type SpecResponses = Record<string, { content?: Record<string, unknown> }>;

/** Keywords that only document: no validator or serialiser reads them. */
const ANNOTATIONS = new Set(['description', 'summary', 'title', 'example', 'examples']);

/**
 * A copy of a part of the spec without its annotations, except where a key names a property (a
 * schema may have a property called `description`). Glue hands every operation its own copy of the
 * schemas it uses, so the Error schema's documentation alone was held some 400 times over (about
 * 3 MB); the published document (specDocument) keeps everything.
 */
function withoutAnnotations(node: unknown, namesProperties = false): unknown {
  if (Array.isArray(node)) return node.map((item) => withoutAnnotations(item));
  if (node === null || typeof node !== 'object') return node;
  const copy: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(node)) {
    if (!namesProperties && ANNOTATIONS.has(key)) continue;
    copy[key] = withoutAnnotations(value, !namesProperties && (key === 'properties' || key === 'patternProperties'));
  }
  return copy;
}

/** A copy of the spec whose schemas (components.schemas and every `schema`) are withoutAnnotations. */
function schemasWithoutAnnotations(node: unknown, key?: string): unknown {
  if (key === 'schema') return withoutAnnotations(node);
  if (Array.isArray(node)) return node.map((item) => schemasWithoutAnnotations(item));
  if (node === null || typeof node !== 'object') return node;
  const copy: Record<string, unknown> = {};
  for (const [k, value] of Object.entries(node)) {
    copy[k] =
      k === 'schemas' && key === 'components'
        ? Object.fromEntries(
            Object.entries(value as object).map(([name, schema]) => [name, withoutAnnotations(schema)]),
          )
        : schemasWithoutAnnotations(value, k);
  }
  return copy;
}

/**
 * The spec as glue is given it: its schemas without annotations (schemasWithoutAnnotations), and without non-JSON
 * media types. Glue takes every media type it meets for one that requests may be sent in, and warns
 * at each start when no body parser handles it; the only non-JSON media type is a response's
 * (getMetrics' Prometheus text, sent as a string that no schema serialises).
 */
function specForGlue(): object {
  const spec = schemasWithoutAnnotations(specDocument) as {
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

/**
 * Binds every operation of openapi.yaml to its handler (fastify-openapi-glue); each route gets its
 * operation's rules from registerOperationRules as it is added.
 */
export async function registerContractRoutes(app: FastifyInstance, ctx: AppContext): Promise<void> {
  await app.register(openapiGlue, {
    specification: specForGlue(),
    serviceHandlers: createServiceHandlers(ctx),
    securityHandlers: { bearerAuth, metricsToken: metricsTokenCheck(ctx.config.metrics.token) },
    addCookieSchema: true,
  });
  // A concrete path answers 405 to the methods it does not take, even where a templated sibling
  // takes them (GET /api/auth/oauth/exchange is not GET /api/auth/oauth/{provider}).
  for (const { path, method } of shadowedMethods()) {
    app.route({ method, url: path, schema: { hide: true }, exposeHeadRoute: false, handler: methodNotAllowedHandler });
  }
}

const routedMethods = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;

/** The methods that a concrete path of the contract does not take but one of its templated siblings does. */
function shadowedMethods(): Array<{ path: string; method: (typeof routedMethods)[number] }> {
  const all = Object.values(operations);
  const takes = (path: string, method: string) =>
    all.some((op) => op.path === path && (op.method === method || (method === 'HEAD' && op.method === 'GET')));
  const shadowed: Array<{ path: string; method: (typeof routedMethods)[number] }> = [];
  for (const path of new Set(all.map((op) => op.path).filter((p) => !p.includes('{')))) {
    for (const method of routedMethods) {
      if (takes(path, method)) continue;
      const sibling = all.some(
        (op) =>
          op.path.includes('{') &&
          (op.method === method || (method === 'HEAD' && op.method === 'GET')) &&
          new RegExp(`^${op.path.replace(/\{[^}]+\}/g, '[^/]+')}$`).test(path),
      );
      if (sibling) shadowed.push({ path, method });
    }
  }
  return shadowed;
}

/**
 * The contract as Swagger UI shows it: the whole of it, but for info.description cut to its first
 * paragraph and a link to the rest (in /openapi.yaml), so that Authorize and the first operations
 * are on the first screen rather than below some 300 lines of conventions.
 */
function swaggerUiDocument(): unknown {
  const info = specDocument.info as { description?: string };
  const [first, ...rest] = (info.description ?? '').split(/\n\s*\n/);
  if (rest.length === 0) return specDocument;
  // A new `info` on the same paths and components: the spec itself is not copied.
  return {
    ...specDocument,
    info: {
      ...info,
      description: `${first}\n\nThe conventions every operation follows (bodies, validation, errors, authentication, limits) are the rest of this description, in [openapi.yaml](/openapi.yaml) (\`info.description\`) and [openapi.json](/openapi.json).`,
    },
  };
}

/**
 * The published contracts: Swagger UI at /docs (and / redirects there), the spec at /openapi.json and /openapi.yaml, the
 * realtime protocol at /asyncapi.yaml.
 */
export async function registerContractDocs(app: FastifyInstance): Promise<void> {
  await app.register(fastifySwagger, {
    mode: 'static',
    specification: { document: swaggerUiDocument() as never },
  });
  await app.register(fastifySwaggerUi, {
    routePrefix: '/docs',
    uiConfig: { deepLinking: true, tryItOutEnabled: true, persistAuthorization: true },
    // Its pages and assets get their own CSP (the app's default, for JSON, would block them all).
    staticCSP: cspHeader(DOCS_CSP),
  });
  // A person who opens the service's address in a browser lands on the docs.
  app.get('/', { schema: { hide: true } }, async (_request, reply) => reply.redirect('/docs', 302));
  app.get('/openapi.json', { schema: { hide: true } }, async () => specDocument);
  app.get('/openapi.yaml', { schema: { hide: true } }, async (_request, reply) =>
    reply.type('application/yaml; charset=utf-8').send(specYaml),
  );
  app.get('/asyncapi.yaml', { schema: { hide: true } }, async (_request, reply) =>
    reply.type('application/yaml; charset=utf-8').send(asyncapiYaml),
  );
}
