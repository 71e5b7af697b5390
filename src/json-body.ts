import type { FastifyInstance } from 'fastify';

/**
 * JSON bodies as Fastify parses them (secure-json-parse, prototype poisoning refused), except that
 * an empty body sent with `Content-Type: application/json` is no body: many clients send the header
 * on every request. An operation whose body is optional (refresh, logout) then gets none, and one
 * that requires a body answers that it is missing.
 */
export function acceptEmptyJsonBodies(app: FastifyInstance): void {
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    if (body === '') {
      done(null, undefined);
      return;
    }
    parseJson(request, body as string, done); // parseAs: string
  });
}
