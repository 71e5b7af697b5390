import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import type { paths } from '../../generated/openapi.ts';
import { isContractChecked } from './contract-check.ts';

/**
 * `app.inject` typed by openapi.yaml (generated/openapi.ts): the path is one of the spec's paths for
 * that method, and its path parameters, query and JSON body are the operation's, so a wrong path,
 * a missing parameter or a misnamed body field fails `npm run typecheck`. The answer is the inject
 * response, with `json()` typed as the body the operation declares for its success statuses (or
 * for the status named: `res.json<409>()`). Requests go through `app.inject`, so the contract check
 * of the test apps (test/helpers/contract-check.ts) sees every one of them.
 *
 *   const api = typedInject(app);
 *   const res = await api.patch('/api/auth/users/{userId}', { params: { userId }, body: { disabled: true }, headers });
 *   res.json().disabledAt; // string | null
 *
 * Tests of invalid input name what they send outside the schema with `rawBody` (sent as given) and
 * `rawQuery` (query text appended as given).
 */

type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';

/** The spec's paths that have an operation for `M`. */
export type PathsFor<M extends Method> = {
  [P in keyof paths]: paths[P] extends { [K in M]: object } ? P : never;
}[keyof paths];

/** The operation (generated/openapi.ts `operations`) behind a method and path. */
export type OperationAt<P extends keyof paths, M extends Method> = paths[P] extends { [K in M]: infer O } ? O : never;

type JsonBody<T> = T extends { content: { 'application/json': infer B } } ? B : never;
type ParametersOf<O> = O extends { parameters: infer X } ? X : never;
type Responses<O> = O extends { responses: infer R } ? R : never;

type PathOption<O> =
  ParametersOf<O> extends { path: infer X extends object } ? { params: X } : { params?: Record<string, never> };

type QueryOption<O> =
  ParametersOf<O> extends { query: infer Q extends object }
    ? { query: Q }
    : ParametersOf<O> extends { query?: infer Q }
      ? [NonNullable<Q>] extends [never]
        ? { query?: Record<string, never> }
        : { query?: NonNullable<Q> }
      : { query?: Record<string, never> };

type BodyOption<O> = O extends { requestBody: infer RB }
  ? { body: JsonBody<RB>; rawBody?: never } | { body?: never; rawBody: unknown }
  : O extends { requestBody?: infer RB }
    ? [JsonBody<NonNullable<RB>>] extends [never]
      ? { body?: never; rawBody?: unknown }
      : { body?: JsonBody<NonNullable<RB>>; rawBody?: never } | { body?: never; rawBody: unknown }
    : { body?: never; rawBody?: unknown };

/** What every request may carry besides the operation's own inputs. */
export interface RequestExtras {
  headers?: Record<string, string>;
  cookies?: Record<string, string>;
  remoteAddress?: string;
  /** Query text appended as given (after the typed `query`), for values outside the schema. */
  rawQuery?: string;
}

export type RequestOptions<O> = PathOption<O> & QueryOption<O> & BodyOption<O> & RequestExtras;

/** The typed query of an operation (`QueryOf<'get', '/api/auth/users'>`). */
export type QueryOf<M extends Method, P extends PathsFor<M>> = NonNullable<RequestOptions<OperationAt<P, M>>['query']>;

// Distributive over O: a call whose path is a union of paths (`/api/auth/${'refresh' | 'logout'}`)
// answers with any of their bodies.
type Status<O> = O extends unknown ? keyof Responses<O> : never;
type SuccessStatus<O> = Extract<Status<O>, 200 | 201 | 202 | 204>;

/** The body types an operation declares for the statuses `S`. */
export type ResponseBody<O, S> = O extends unknown
  ? S extends keyof Responses<O>
    ? JsonBody<Responses<O>[S]>
    : never
  : never;

/** An inject response whose `json()` is typed by the operation's responses. */
export interface TypedResponse<O> extends Omit<LightMyRequestResponse, 'json'> {
  /** The body parsed as JSON: the success statuses' body type, or the one of status `S`. */
  json<S extends Status<O> = SuccessStatus<O>>(): ResponseBody<O, S>;
}

// The options argument may be left out when the operation needs none of its fields.
type OptionsArgument<O> =
  Record<never, never> extends RequestOptions<O> ? [options?: RequestOptions<O>] : [options: RequestOptions<O>];

type Call<M extends Method> = <P extends PathsFor<M>>(
  path: P,
  ...options: OptionsArgument<OperationAt<P, M>>
) => Promise<TypedResponse<OperationAt<P, M>>>;

export interface TypedInject {
  get: Call<'get'>;
  post: Call<'post'>;
  put: Call<'put'>;
  patch: Call<'patch'>;
  delete: Call<'delete'>;
}

/** A path with its `{name}` parameters filled in (encoded), and its query string. */
export function requestUrl(path: string, params: object | undefined, query: object | undefined, rawQuery = ''): string {
  const values = (params ?? {}) as Record<string, unknown>;
  const filled = path.replace(/\{([^}]+)\}/g, (_, name: string) => {
    if (!(name in values)) throw new Error(`${path}: no value for the path parameter ${name}`);
    return encodeURIComponent(String(values[name]));
  });
  const pairs: string[] = [];
  for (const [key, value] of Object.entries(query ?? {})) {
    for (const item of Array.isArray(value) ? value : [value]) {
      if (item !== undefined) pairs.push(`${encodeURIComponent(key)}=${encodeURIComponent(String(item))}`);
    }
  }
  const text = [pairs.join('&'), rawQuery.replace(/^[?&]/, '')].filter((part) => part !== '').join('&');
  return text === '' ? filled : `${filled}?${text}`;
}

interface UntypedOptions extends RequestExtras {
  params?: object;
  query?: object;
  body?: unknown;
  rawBody?: unknown;
}

/** The typed client over one app; the app must carry the contract check (every test app built by the helpers does). */
export function typedInject(app: FastifyInstance): TypedInject {
  if (!isContractChecked(app)) {
    throw new Error('typedInject: the app does not check its responses (checkResponsesAgainstContract)');
  }
  const call =
    (method: Method) =>
    (path: string, options: UntypedOptions = {}): Promise<LightMyRequestResponse> => {
      const payload = 'rawBody' in options ? options.rawBody : options.body;
      return app.inject({
        method: method.toUpperCase() as Uppercase<Method>,
        url: requestUrl(path, options.params, options.query, options.rawQuery),
        ...(options.headers ? { headers: options.headers } : {}),
        ...(options.cookies ? { cookies: options.cookies } : {}),
        ...(options.remoteAddress ? { remoteAddress: options.remoteAddress } : {}),
        ...(payload === undefined ? {} : { payload: payload as string | object | Buffer }),
      });
    };
  return {
    get: call('get'),
    post: call('post'),
    put: call('put'),
    patch: call('patch'),
    delete: call('delete'),
  } as unknown as TypedInject;
}
