import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ApiError } from '../errors.ts';
import { OUTSIDE_CONTRACT, type ServiceMetrics, UNMATCHED } from './metrics.ts';

/** The operationId a request was answered by, or one of two fixed labels: the label set stays bounded. */
function operationOf(request: FastifyRequest): string {
  const operationId = (request.routeOptions.schema as { operationId?: string } | undefined)?.operationId;
  if (operationId !== undefined) return operationId;
  return request.is404 || request.routeOptions.url === undefined ? UNMATCHED : OUTSIDE_CONTRACT;
}

/**
 * Times every answer of the app into the request histogram. Registered before the plugins and
 * routes, so that it reaches all of them, 404s and the HTTP layer's refusals included.
 */
export function observeRequests(app: FastifyInstance, metrics: ServiceMetrics): void {
  app.addHook('onResponse', async (request, reply) => {
    metrics.observeRequest(operationOf(request), reply.statusCode, reply.elapsedTime / 1000);
  });
}

const digest = (value: string) => createHash('sha256').update(value).digest();

/**
 * The security handler of the `metricsToken` scheme (GET /metrics on the service's port). Without
 * METRICS_TOKEN the operation does not exist here: 404, as for any unknown route. With it, the
 * request needs `Authorization: Bearer <token>`, compared in constant time (as digests, so that
 * not even the length is told): 401 otherwise.
 */
export function metricsTokenCheck(token: string | undefined): (request: FastifyRequest) => Promise<void> {
  const expected = token === undefined ? undefined : digest(token);
  return async (request) => {
    if (expected === undefined) {
      throw new ApiError('NOT_FOUND', `No route for ${request.method} ${request.url.split('?')[0] ?? '/'}`);
    }
    const header = request.headers.authorization ?? '';
    const given = /^Bearer [^\s]+$/i.test(header) ? header.slice('Bearer '.length) : '';
    if (!timingSafeEqual(digest(given), expected)) {
      throw new ApiError('UNAUTHORIZED', 'A valid metrics token is required: Authorization: Bearer <METRICS_TOKEN>');
    }
  };
}
