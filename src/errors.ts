import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { type ErrorCode, errorCatalogue, operations } from '../generated/contract.ts';
import { databaseErrorAnswer } from './db/errors.ts';
import { type AjvIssue, describeValidationIssue, pickValidationIssue } from './validation-messages.ts';

export type { ErrorCode };

/** The body of every error response: components.schemas.Error in openapi.yaml. */
export interface ErrorBody {
  error: ErrorCode;
  message: string;
  statusCode: number;
}

/**
 * The one error type that handlers and services throw. Its code is one of the spec's ErrorCode
 * values, and the code decides the status (the catalogue in ErrorCode's description, generated
 * into errorCatalogue); the message defaults to the code's meaning there.
 */
export class ApiError extends Error {
  override name = 'ApiError';
  readonly statusCode: number;
  readonly code: ErrorCode;
  /** Extra response headers, such as Retry-After. */
  readonly headers: Readonly<Record<string, string>>;

  constructor(code: ErrorCode, message?: string, headers: Readonly<Record<string, string>> = {}) {
    super(message ?? errorCatalogue[code].message);
    this.statusCode = errorCatalogue[code].status;
    this.code = code;
    this.headers = headers;
  }
}

/** The Error body for a code: its status from the catalogue, its message given or the code's meaning. */
export function errorBody(code: ErrorCode, message?: string): ErrorBody {
  return { error: code, message: message ?? errorCatalogue[code].message, statusCode: errorCatalogue[code].status };
}

const codeForStatus: Record<number, ErrorCode> = {
  400: 'INVALID_INPUT',
  401: 'UNAUTHORIZED',
  403: 'FORBIDDEN',
  404: 'NOT_FOUND',
  405: 'METHOD_NOT_ALLOWED',
  413: 'PAYLOAD_TOO_LARGE',
  415: 'UNSUPPORTED_MEDIA_TYPE',
  429: 'RATE_LIMITED',
  503: 'SERVICE_UNAVAILABLE',
};

/** Maps anything thrown during a request to a status, an Error body and headers. */
export function toErrorResponse(err: unknown): { body: ErrorBody; headers: Record<string, string> } {
  if (err instanceof ApiError) {
    return { body: errorBody(err.code, err.message), headers: { ...err.headers } };
  }
  const e = err as Partial<FastifyError> & { errors?: unknown[]; validation?: AjvIssue[] };
  // Security handlers' failures arrive wrapped, with the handlers' own errors in `errors`.
  if (e.name === 'Unauthorized' && Array.isArray(e.errors)) {
    const inner = e.errors.find((x): x is ApiError => x instanceof ApiError);
    return toErrorResponse(inner ?? new ApiError('UNAUTHORIZED', 'A valid Bearer access token is required'));
  }
  if (Array.isArray(e.validation) && e.validation.length > 0) {
    const message = describeValidationIssue(e.validationContext ?? 'request', pickValidationIssue(e.validation));
    return toErrorResponse(new ApiError('INVALID_INPUT', message));
  }
  // The client's own connection broke while its body was being read (Node's "aborted"): nobody
  // will read this answer, but it is the client's failure, not the database's.
  if (e.code === 'ECONNRESET' && e.message === 'aborted') {
    return toErrorResponse(new ApiError('INVALID_INPUT', 'The request body was not received completely'));
  }
  const database = databaseErrorAnswer(err);
  if (database !== undefined) {
    const headers =
      database.retryAfterSeconds === undefined ? {} : { 'retry-after': String(database.retryAfterSeconds) };
    return toErrorResponse(new ApiError(database.code, database.message, headers));
  }
  const status = e.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    const code = codeForStatus[status] ?? 'INVALID_INPUT';
    return { body: { error: code, message: clientErrorMessage(e, err), statusCode: status }, headers: {} };
  }
  return { body: errorBody('INTERNAL_ERROR', 'Internal server error'), headers: {} };
}

// Fastify's own 4xx errors carry safe messages; a few get plainer words.
function clientErrorMessage(e: Partial<FastifyError>, err: unknown): string {
  switch (e.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return 'Unsupported Content-Type: send application/json';
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return 'The request body is larger than this operation accepts';
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return 'The body is not valid JSON';
    default:
      return err instanceof SyntaxError ? 'The body is not valid JSON' : (e.message ?? 'Bad request');
  }
}

/** The app's single error handler: client errors are explained, server errors are logged and masked. */
export function errorHandler(err: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  const { body, headers } = toErrorResponse(err);
  if (body.statusCode === 503) {
    // Expected while a dependency is away (one line per request, no stack): the cause is enough.
    const cause = (err as { code?: unknown }).code ?? err.message;
    request.log.warn(
      { code: body.error, cause: String(cause).slice(0, 200) },
      'request failed: dependency unavailable',
    );
  } else if (body.statusCode >= 500) request.log.error({ err }, 'request failed');
  else request.log.info({ code: body.error, message: body.message }, 'request rejected');
  void reply.code(body.statusCode).headers(headers).send(body);
}

// Each path of the contract as a pattern, with the methods it accepts (for 405 and its Allow
// header); concrete paths first, so that a templated sibling does not answer for them. A path with
// a trailing slash is not the contract's (the router does not take it either): 404.
const methodsByPath = [
  ...Object.values(operations).reduce((byPath, op) => {
    byPath.set(op.path, [...(byPath.get(op.path) ?? []), op.method].sort());
    return byPath;
  }, new Map<string, string[]>()),
]
  .sort(([a], [b]) => Number(a.includes('{')) - Number(b.includes('{')))
  .map(([path, methods]) => ({ pattern: new RegExp(`^${path.replace(/\{[^}]+\}/g, '[^/]+')}$`), methods }));

/** The methods the contract accepts on a path, or undefined when no path of the contract matches it. */
function methodsAt(path: string): string[] | undefined {
  return methodsByPath.find(({ pattern }) => pattern.test(path))?.methods;
}

/** 405 METHOD_NOT_ALLOWED with Allow, for a request to a path of the contract with a method it does not take. */
export function methodNotAllowedHandler(request: FastifyRequest, reply: FastifyReply): void {
  const path = request.url.split('?')[0] ?? '/';
  const methods = methodsAt(path) ?? [];
  void reply
    .code(405)
    .header('allow', methods.join(', '))
    .send(errorBody('METHOD_NOT_ALLOWED', `${request.method} is not allowed on ${path}; use ${methods.join(' or ')}`));
}

/** Unknown routes: 405 with Allow when the path exists under other methods, otherwise 404; both in the Error schema. */
export function notFoundHandler(request: FastifyRequest, reply: FastifyReply): void {
  const path = request.url.split('?')[0] ?? '/';
  if (methodsAt(path) !== undefined) methodNotAllowedHandler(request, reply);
  else void reply.code(404).send(errorBody('NOT_FOUND', `No route for ${request.method} ${path}`));
}
