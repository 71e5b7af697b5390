import { Readable } from 'node:stream';
import type {
  FastifyInstance,
  FastifyRequest,
  onRequestHookHandler,
  preHandlerHookHandler,
  preParsingHookHandler,
  preValidationHookHandler,
} from 'fastify';
import { type OperationId, operations, type Role } from '../generated/contract.ts';
import { bearerAuth } from './auth/access-token.ts';
import type { Config } from './config.ts';
import { ApiError, methodNotAllowedHandler } from './errors.ts';
import { describeJsonProblem, findJsonProblem } from './json-values.ts';
import { routeRateLimit } from './rate-limits.ts';

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
 * parse the body of a DELETE or a POST (rotateSigningKeys) and answer 413 or 415, which such an
 * operation does not declare.
 */
const ignoreBody: preParsingHookHandler = async (request) => withoutBody(request);

/** The request as if it had no body: its body headers removed, an empty stream to parse instead. */
export function withoutBody(request: FastifyRequest): Readable {
  delete request.headers['content-type'];
  delete request.headers['transfer-encoding'];
  request.headers['content-length'] = '0';
  return Readable.from([]);
}

/** x-roles: the access token's role must be one of them (a role change ends the account's sessions, so the claim is current). */
function requireRole(roles: readonly Role[]): preHandlerHookHandler {
  return async (request) => {
    if (!roles.includes(request.user.role)) {
      throw new ApiError('FORBIDDEN', `This operation needs the ${roles.join(' or ')} role`);
    }
  };
}

/**
 * The assurance level an operation needs (x-aal in openapi.yaml): a session that owes a second step
 * (the account has a verified factor this session has not proven) may call only the operations
 * marked `x-aal: aal1`; with MFA_REQUIRED_FOR_ADMINS, x-roles [admin] operations need aal2 whatever
 * the account.
 */
export function requireAssurance(
  operation: (typeof operations)[OperationId],
  config: Pick<Config, 'mfa'>,
): preHandlerHookHandler {
  const adminsNeedAal2 = config.mfa.requiredForAdmins && operation.roles?.includes('admin') === true;
  const callableBeforeSecondStep = operation.aal === 'aal1';
  // A callback, not an async function: it runs on every authenticated request, and an async hook
  // costs a promise and a tick each time.
  return (request, _reply, done) => {
    const claims = request.user;
    if (!callableBeforeSecondStep && claims.next_aal === 'aal2') {
      return done(
        new ApiError('MFA_REQUIRED', 'This session has not proven its second factor: use POST /api/auth/mfa/verify'),
      );
    }
    if (adminsNeedAal2 && claims.aal !== 'aal2') {
      return done(new ApiError('MFA_REQUIRED', 'Administrator operations need a session with a second factor (aal2)'));
    }
    done();
  };
}

/**
 * An operation whose access token is optional (`security: [{bearerAuth: []}, {}]`): the security
 * handlers let a request through when the token fails, as if none was sent. A token that was sent
 * must verify: the same check again answers its 401.
 */
const tokenWhenSent: onRequestHookHandler = async (request) => {
  if (request.headers.authorization !== undefined && request.user === null) await bearerAuth(request);
};

/** A query schema that admits only the declared parameters (an operation without any gets an empty one). */
function closeQuery(schema: { querystring?: object }): void {
  schema.querystring = { type: 'object', properties: {}, ...schema.querystring, additionalProperties: false };
}

const asArray = <T>(value: T | T[] | undefined): T[] =>
  value === undefined ? [] : Array.isArray(value) ? value : [value];

/**
 * The one place where each operation's rules from openapi.yaml are applied to its route, as the
 * route is added: authentication (the security handlers, which fastify-openapi-glue runs as a
 * preHandler, after the body is read) moves to the end of onRequest, where an x-rate-limit by user
 * follows it; x-body-limit; the closed query; the required or absent body; the x-roles check, once
 * the input is valid; and the per-route setting that @fastify/rate-limit reads. Must be registered before the rate-limit
 * plugin (registerRateLimits), whose own onRoute hook reads that setting.
 */
export function registerOperationRules(app: FastifyInstance, config: Readonly<Config>): void {
  app.addHook('onRoute', (route) => {
    const operationId = (route.schema as { operationId?: string } | undefined)?.operationId;
    if (operationId === undefined || !(operationId in operations)) return;
    const operation = operations[operationId as OperationId];
    if (route.method === 'HEAD' && operation.method === 'GET' && operation.rateLimits.length > 0) {
      // Fastify's own HEAD for a limited GET would run the operation under a count of its own,
      // doubling the limit: it answers 405 instead, doing nothing.
      route.schema = { hide: true };
      route.handler = methodNotAllowedHandler;
      return;
    }
    if (route.preHandler !== undefined) {
      route.onRequest = [...asArray(route.onRequest), ...asArray(route.preHandler)] as onRequestHookHandler[];
      delete route.preHandler;
    }
    if (operation.optionalBearer) {
      route.onRequest = [...asArray(route.onRequest), tokenWhenSent] as onRequestHookHandler[];
    }
    // After the input is validated, as the handler would: a malformed request is a 400 for anyone.
    if (operation.bearer) {
      route.preHandler = [requireAssurance(operation, config)];
      if (operation.roles !== null) route.preHandler.push(requireRole(operation.roles));
    }
    const rateLimit = routeRateLimit(config, operationId as OperationId);
    if (rateLimit !== undefined) route.config = { ...(route.config as object), rateLimit } as never;
    // Each operation's own limit, from x-body-limit in openapi.yaml (413 above it).
    if (operation.bodyLimit !== null) route.bodyLimit = operation.bodyLimit;
    // Unknown query parameters are refused like unknown body fields, unless the spec leaves the query open.
    if (!operation.openQuery) closeQuery(route.schema as { querystring?: object });
    const hooks = [rejectUnacceptableJson];
    if (operation.bodyRequired) hooks.unshift(requireBody);
    else if (operation.bodyLimit !== null) hooks.unshift(absentBodyAsEmpty);
    route.preValidation = hooks;
    if (operation.bodyLimit === null && operation.method !== 'GET') {
      route.preParsing = [...asArray(route.preParsing), ignoreBody] as preParsingHookHandler[];
    }
  });
}
