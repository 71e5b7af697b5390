import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { specDocument } from '../../src/spec.ts';
import { specValidator } from './spec-schema.ts';

/**
 * Every response an app under test sends is checked against openapi.yaml: its status is declared
 * for the operation, its content type is declared, and its body validates against the declared
 * schema. A violation replaces the response with a 500 whose message names operation, status and
 * the failing path, so the test that caused it fails on it; the process also exits non-zero.
 * The (operation, status) pairs seen are written for the suite's coverage report.
 */

interface ResponseSpec {
  /** JSON pointer segments of the response object (after following a $ref to components). */
  segments: string[];
  contentTypes: string[];
}

type Operation = { operationId: string; responses: Record<string, { $ref?: string; content?: object }> };
const paths = specDocument.paths as Record<string, Record<string, Operation>>;
const components = specDocument.components as { responses: Record<string, { content?: object }> };

function responseSpec(routePath: string, method: string, status: string): ResponseSpec | undefined {
  const declared = paths[routePath]?.[method]?.responses[status];
  if (declared === undefined) return undefined;
  const segments = declared.$ref
    ? ['components', 'responses', declared.$ref.split('/').pop() as string]
    : ['paths', routePath, method, 'responses', status];
  const target = declared.$ref ? components.responses[segments[2] as string] : declared;
  return { segments, contentTypes: Object.keys(target?.content ?? {}) };
}

/** Operation id by "METHOD /openapi/path", for the routes glue registered from the spec. */
const operations = new Map<string, { id: string; specPath: string; method: string }>();
for (const [specPath, methods] of Object.entries(paths)) {
  for (const [method, op] of Object.entries(methods)) {
    const fastifyPath = specPath.replace(/\{([^}]+)\}/g, ':$1');
    operations.set(`${method.toUpperCase()} ${fastifyPath}`, { id: op.operationId, specPath, method });
  }
}

export const violations: string[] = [];
export const exercised = new Map<string, Set<number>>();

/** One response as the checker sees it. */
export interface SentResponse {
  method: string;
  /** The route's path as registered (`/api/auth/users`), not the request URL. */
  routePath: string | undefined;
  status: number;
  contentType: string;
  body: string | undefined;
}

const mediaTypeParts = (value: string) => value.split(';').map((part) => part.trim().toLowerCase());

/** A Content-Type matches a declared media type of the same type that carries its parameters too (`text/plain; version=0.0.4`). */
function matchesDeclared(contentType: string, declared: string): boolean {
  const [type, ...parameters] = mediaTypeParts(declared);
  const [sent, ...sentParameters] = mediaTypeParts(contentType);
  return type === sent && parameters.every((p) => sentParameters.includes(p));
}

/** What is wrong with a response by openapi.yaml, or undefined. */
export function contractProblem(r: SentResponse): string | undefined {
  const op = operations.get(`${r.method} ${r.routePath}`);
  if (op === undefined) return undefined; // docs, the verify page, unknown paths: not operations
  const where = `${op.id} ${r.status}`;
  const spec = responseSpec(op.specPath, op.method, String(r.status));
  if (spec === undefined) return `${where}: status not declared for the operation`;
  const mediaType = r.contentType.split(';')[0]?.trim() ?? '';
  if (spec.contentTypes.length === 0) {
    return r.body ? `${where}: a body was sent where the spec declares none` : undefined;
  }
  if (!spec.contentTypes.some((declared) => matchesDeclared(r.contentType, declared))) {
    return `${where}: content type "${mediaType}" not declared (${spec.contentTypes.join(', ')})`;
  }
  if (mediaType !== 'application/json') return undefined;
  if (r.body === undefined) return `${where}: a JSON response without a body`;
  const validate = specValidator(...spec.segments, 'content', 'application/json', 'schema');
  if (!validate(JSON.parse(r.body))) {
    const e = validate.errors?.[0];
    return `${where}: body${e?.instancePath ?? ''} ${e?.message ?? 'is invalid'} (${e?.schemaPath ?? ''})`;
  }
  return undefined;
}

function check(request: FastifyRequest, reply: FastifyReply, payload: unknown): string | undefined {
  const op = operations.get(`${request.method} ${request.routeOptions.url}`);
  if (op !== undefined) {
    const statuses = exercised.get(op.id) ?? new Set<number>();
    statuses.add(reply.statusCode);
    exercised.set(op.id, statuses);
  }
  return contractProblem({
    method: request.method,
    routePath: request.routeOptions.url,
    status: reply.statusCode,
    contentType: String(reply.getHeader('content-type') ?? ''),
    body: typeof payload === 'string' ? payload : Buffer.isBuffer(payload) ? payload.toString('utf8') : undefined,
  });
}

const checkedApps = new WeakSet<FastifyInstance>();

/** Whether an app carries the checking hook (test/helpers/typed-inject.ts asks). */
export const isContractChecked = (app: FastifyInstance): boolean => checkedApps.has(app);

/** Adds the checking hook to an app under test (before it is ready). */
export function checkResponsesAgainstContract(app: FastifyInstance): void {
  checkedApps.add(app);
  app.addHook('onSend', async (request, reply, payload) => {
    const problem = check(request, reply, payload);
    if (problem === undefined) return payload;
    violations.push(problem);
    reply.code(500).header('content-type', 'application/json; charset=utf-8');
    return JSON.stringify({ error: 'INTERNAL_ERROR', message: `contract violation: ${problem}`, statusCode: 500 });
  });
}

/** Where each test process leaves the (operation, status) pairs it exercised. */
export const coverageDir = path.resolve(import.meta.dirname, '..', '..', '.tap', 'contract-coverage');

process.on('exit', () => {
  if (exercised.size > 0) {
    mkdirSync(coverageDir, { recursive: true });
    const data = Object.fromEntries([...exercised].map(([id, s]) => [id, [...s]]));
    writeFileSync(path.join(coverageDir, `${process.pid}.json`), JSON.stringify(data));
  }
  if (violations.length > 0) {
    process.stderr.write(`contract violations:\n${violations.map((v) => `  ${v}`).join('\n')}\n`);
    process.exitCode = 1;
  }
});
