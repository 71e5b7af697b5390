import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { type ErrorCode, errorCatalogue, operations } from '../generated/contract.ts';
import { PROFILE_NAME_PATTERN } from './auth/profile-name.ts';
import { isDatabaseUnavailable } from './db/errors.ts';

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

// Friendlier words for the patterns used in openapi.yaml than Ajv's "must match pattern ...".
const patternMeaning: Record<string, string> = {
  '^(0|[1-9][0-9]{0,14})$': 'must be an integer from 0 to 999999999999999, without leading zeros',
  '^(0|[1-9][0-9]{0,2}|1000)$': 'must be an integer from 0 to 1000, without leading zeros',
  '^([1-9][0-9]{0,2}|1000)$': 'must be an integer from 1 to 1000, without leading zeros',
  '^https?://': 'must be an http:// or https:// URL',
  '^[^#]*$': 'must not have a fragment (#…)',
  '^[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+$': 'must be a signed JWT (three base64url parts joined by dots)',
  '^(?!(custom|exchange)$)[a-z0-9_-]{1,64}$':
    'must be a provider name: 1 to 64 lower-case letters, digits, - and _ (not custom or exchange)',
  '^[0-9]{6}$': 'must be a 6-digit code',
  '^[^\\u0000\\uD800-\\uDFFF]*$': 'must not contain NUL (U+0000) or an unpaired UTF-16 surrogate',
  '^[0-9a-fA-F]{64}$': 'must be a 64-character hexadecimal token',
  // The verify body's two forms, when `otp` fits neither.
  '^[0-9]{6}$|^[0-9a-fA-F]{64}$': 'must be a 6-digit code or a 64-character hexadecimal token',
  [PROFILE_NAME_PATTERN]:
    'must not contain control characters, line separators, bidirectional controls (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069) or invisible format characters (such as U+200B, U+2060, U+FEFF)',
};

interface AjvIssue {
  keyword: string;
  instancePath: string;
  message?: string;
  params: Record<string, unknown>;
  /** Where the rule is in the schema (`#/oneOf/1/required`). */
  schemaPath?: string;
  /** The value that failed, and the schema holding the rule (with Ajv's `verbose` option). */
  data?: unknown;
  parentSchema?: unknown;
}

/** "/input/3/name" -> "input[3].name" */
function jsonPointerToPath(pointer: string): string {
  return pointer
    .split('/')
    .slice(1)
    .map((part) => part.replaceAll('~1', '/').replaceAll('~0', '~'))
    .map((part) => (/^\d+$/.test(part) ? `[${part}]` : `.${part}`))
    .join('');
}

/**
 * The issue worth reporting. Where a value fails every branch of a oneOf, Ajv lists each branch's
 * complaints, one or more per branch: the complaint of the branch the body meant is the one to report (see
 * meantBranch); when no branch can be told apart, a branch whose type matched has the real one
 * ("must have at most 2048 items"), and when none matched the types are merged ("must be string
 * or array").
 */
export function pickValidationIssue(issues: readonly AjvIssue[]): AjvIssue {
  // A field name refused by propertyNames: the name is what to report, not the rule it broke.
  const name = issues.find((i) => i.keyword === 'propertyNames');
  if (name !== undefined) return name;
  const oneOf = issues.findIndex((i) => i.keyword === 'oneOf');
  const first = issues[0] as AjvIssue;
  if (oneOf <= 0) return first;
  const byBranch = issues.slice(0, oneOf);
  const meant = meantBranch(issues[oneOf] as AjvIssue, byBranch);
  if (meant !== undefined) return meant;
  const specific = byBranch.find((i) => i.keyword !== 'type');
  if (specific) return specific;
  const types = [...new Set(byBranch.map((i) => String(i.params.type)))].join(',');
  return { ...first, params: { type: types } };
}

interface BranchSchema {
  required?: string[];
  properties?: Record<string, { const?: unknown; pattern?: string }>;
}

/**
 * The branches of a oneOf of objects are told apart by the properties that every branch pins down
 * with a `const` or a `pattern` (createSession's `method`, verifyEmail's `otp`: a code or a link
 * token). The branch whose pins the body's values fit (a pin it requires must be there) is the one
 * the body meant: its complaint is returned. When the values fit no branch, that property is the
 * complaint ("must be one of: otp, password"). Undefined when the branches cannot be told apart.
 * Reads the failing value and the schema from the issues (Ajv's `verbose` option).
 */
function meantBranch(oneOf: AjvIssue, issues: readonly AjvIssue[]): AjvIssue | undefined {
  const branches = (oneOf.parentSchema as { oneOf?: BranchSchema[] } | undefined)?.oneOf;
  const body = oneOf.data;
  if (branches === undefined || typeof body !== 'object' || body === null) return undefined;
  // A branch may report more than one issue (a wrong type, then its const): the first of each counts.
  const byBranch = branches.map((_, i) =>
    issues.find((issue) => issue.schemaPath?.startsWith(`${oneOf.schemaPath}/${i}/`)),
  );
  const values = body as Record<string, unknown>;
  const pins = Object.keys(branches[0]?.properties ?? {}).filter((p) =>
    branches.every((b) => b.properties?.[p]?.const !== undefined || b.properties?.[p]?.pattern !== undefined),
  );
  if (pins.length === 0) return undefined;
  const fits = (b: BranchSchema, p: string) => {
    const rule = b.properties?.[p] ?? {};
    if (!(p in values)) return !(b.required ?? []).includes(p);
    if (rule.const !== undefined) return values[p] === rule.const;
    return typeof values[p] === 'string' && new RegExp(rule.pattern as string).test(values[p]);
  };
  const index = branches.findIndex((b) => pins.every((p) => fits(b, p)));
  if (index >= 0) return byBranch[index] ?? undefined;
  const pin = pins.find((p) => branches.every((b) => !fits(b, p))) as string;
  const at = `${oneOf.instancePath}/${pin}`;
  if (!(pin in values)) return { ...oneOf, keyword: 'required', params: { missingProperty: pin } };
  const rules = branches.map((b) => b.properties?.[pin] ?? {});
  if (rules.every((r) => r.const !== undefined)) {
    return { ...oneOf, keyword: 'enum', instancePath: at, params: { allowedValues: rules.map((r) => r.const) } };
  }
  return { ...oneOf, keyword: 'pattern', instancePath: at, params: { pattern: rules.map((r) => r.pattern).join('|') } };
}

/** One sentence that names the failing field and says what it must be. */
export function describeValidationIssue(context: string, issue: AjvIssue): string {
  const where = `${context === 'querystring' ? 'query' : context}${jsonPointerToPath(issue.instancePath)}`;
  const p = issue.params;
  switch (issue.keyword) {
    case 'required':
      return `${where}.${String(p.missingProperty)} is required`;
    case 'additionalProperties':
      return context === 'querystring'
        ? `${where}.${String(p.additionalProperty)} is not a parameter of this operation`
        : `${where}.${String(p.additionalProperty)} is not an accepted field`;
    case 'enum':
      return `${where} must be one of: ${(p.allowedValues as unknown[]).map(String).join(', ')}`;
    case 'const':
      return `${where} must be ${JSON.stringify(p.allowedValue)}`;
    case 'format':
      return `${where} must be a valid ${String(p.format)}`;
    case 'pattern':
      return `${where} ${patternMeaning[String(p.pattern)] ?? issue.message ?? 'has the wrong form'}`;
    case 'type':
      // A query value is always a string, unless the parameter was repeated (an array).
      if (context === 'querystring') return `${where} must be given once`;
      return `${where} must be ${String(p.type).replaceAll(',', ' or ')}`;
    case 'minLength':
      return p.limit === 1 ? `${where} must not be empty` : `${where} must have at least ${String(p.limit)} characters`;
    case 'maxLength':
      return `${where} must have at most ${String(p.limit)} characters`;
    case 'minimum':
      return `${where} must be at least ${String(p.limit)}`;
    case 'maximum':
      return `${where} must be at most ${String(p.limit)}`;
    case 'minItems':
      return `${where} must have at least ${String(p.limit)} item${p.limit === 1 ? '' : 's'}`;
    case 'maxItems':
      return `${where} must have at most ${String(p.limit)} items`;
    case 'maxProperties':
      return `${where} must have at most ${String(p.limit)} fields`;
    case 'minProperties':
      return `${where} must have at least ${String(p.limit)} field${p.limit === 1 ? '' : 's'}`;
    case 'propertyNames':
      return `${where}.${String(p.propertyName)} is not an accepted field name (1 to 64 letters, digits and _, starting with a letter; not an account field)`;
    default:
      return `${where} ${issue.message ?? 'is invalid'}`;
  }
}

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
  // SQLSTATE class 22 (data exception): a value the database refuses, which only input can cause.
  if (typeof e.code === 'string' && /^22[0-9A-Z]{3}$/.test(e.code)) {
    return toErrorResponse(new ApiError('INVALID_INPUT', 'A value in the request cannot be stored'));
  }
  // Class 40 (a deadlock or serialization failure), or a lock not obtained within lock_timeout
  // (55P03): the transaction was rolled back and may be retried.
  if (typeof e.code === 'string' && /^(40[0-9A-Z]{3}|55P03)$/.test(e.code)) {
    return toErrorResponse(
      new ApiError('SERVICE_UNAVAILABLE', 'The request conflicted with a concurrent one; try again', {
        'retry-after': '1',
      }),
    );
  }
  // The client's own connection broke while its body was being read (Node's "aborted"): nobody
  // will read this answer, but it is the client's failure, not the database's.
  if (e.code === 'ECONNRESET' && e.message === 'aborted') {
    return toErrorResponse(new ApiError('INVALID_INPUT', 'The request body was not received completely'));
  }
  if (isDatabaseUnavailable(err)) {
    return toErrorResponse(
      new ApiError('SERVICE_UNAVAILABLE', 'The database is not answering; try again shortly', {
        'retry-after': '5',
      }),
    );
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
// header); concrete paths first, so that a templated sibling does not answer for them.
const methodsByPath = [
  ...Object.values(operations).reduce((byPath, op) => {
    byPath.set(op.path, [...(byPath.get(op.path) ?? []), op.method].sort());
    return byPath;
  }, new Map<string, string[]>()),
]
  .sort(([a], [b]) => Number(a.includes('{')) - Number(b.includes('{')))
  .map(([path, methods]) => ({ pattern: new RegExp(`^${path.replace(/\{[^}]+\}/g, '[^/]+')}/?$`), methods }));

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
