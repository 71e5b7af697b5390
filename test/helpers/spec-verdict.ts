// The spec's verdict on a request: whether openapi.yaml accepts it, judged with Ajv against the
// operation's own parameter schemas and requestBody schema as written (test/helpers/spec-schema.ts),
// and when it does not, the fields that break it, named as the service names them in its
// INVALID_INPUT messages (`params.userId`, `query.limit`, `headers.x-csrf-token`, `body.input[3]`).
// One rule beyond JSON Schema, which the spec states in its description: a query parameter that
// the operation does not declare is refused (except where the query is chosen by someone else:
// the OAuth provider's callback). A query parameter given twice arrives as an array, which no
// parameter schema (all `type: string`) accepts.
import type { ErrorObject } from 'ajv';
import type { OperationId } from '../../generated/contract.ts';
import { type ParamEntry, wireParameterValue } from './fuzz-requests.ts';
import { type OperationModel, parameterStrings } from './spec-arbitraries.ts';
import { specValidator } from './spec-schema.ts';

/** Operations whose query string is not the caller's to choose: undeclared parameters are let through. */
export const OPEN_QUERY_OPERATIONS: ReadonlySet<OperationId> = new Set<OperationId>(['handleOAuthCallback']);

/** Where a refused value is, in the words of the service's messages. */
export type Location = 'params' | 'query' | 'headers' | 'cookies' | 'body';

export interface Refusal {
  location: Location;
  /** Names the message may use for the field (`query.limit`, `body.profile.x`...); any one will do. */
  fields: string[];
  /** What the spec says is wrong, for reports. */
  reason: string;
}

/** The body of a request as the spec sees it: none (no bytes at all, or an empty JSON body), or a JSON value. */
export type SentBody = { kind: 'none' } | { kind: 'json'; value: unknown };

export interface Verdict {
  /** true: the spec accepts the request; false: it refuses it; undefined: only the server's decoding can tell. */
  accepts: boolean | undefined;
  refusals: Refusal[];
}

const pointerSegments = (pointer: string) =>
  pointer
    .replace(/^#\//, '')
    .split('/')
    .map((p) => p.replaceAll('~1', '/').replaceAll('~0', '~'));

/** "/input/3/name" -> "input[3].name" after `base`, as src/errors.ts writes paths. */
function pathOf(base: string, instancePath: string): string {
  return (
    base +
    instancePath
      .split('/')
      .slice(1)
      .map((part) => part.replaceAll('~1', '/').replaceAll('~0', '~'))
      .map((part) => (/^\d+$/.test(part) ? `[${part}]` : `.${part}`))
      .join('')
  );
}

/** The fields an Ajv error is about: the value's own path, and the property it names (required, unknown, a bad name). */
function fieldsOf(base: string, error: ErrorObject): string[] {
  const at = pathOf(base, error.instancePath);
  const p = error.params as Record<string, unknown>;
  const named = p.missingProperty ?? p.additionalProperty ?? p.propertyName;
  return named === undefined ? [at] : [`${at}.${String(named)}`, at];
}

function describe(error: ErrorObject, base: string): string {
  return `${pathOf(base, error.instancePath)} ${error.message ?? error.keyword}${
    error.params && Object.keys(error.params).length > 0 ? ` ${JSON.stringify(error.params)}` : ''
  }`;
}

/** Validates `value` against the schema at `pointer` in openapi.yaml; the refusal when it fails. */
function check(pointer: string, value: unknown, location: Location, base: string): Refusal | undefined {
  const validate = specValidator(...pointerSegments(pointer));
  if (validate(value)) return undefined;
  const errors = validate.errors ?? [];
  // A oneOf that no branch matches is reported by the branches' own complaints (src/errors.ts picks
  // one of them): the oneOf's own error, on the whole value, names no field.
  const specific = errors.filter((e) => e.keyword !== 'oneOf' && e.keyword !== 'anyOf');
  return {
    location,
    fields: [...new Set((specific.length > 0 ? specific : errors).flatMap((e) => fieldsOf(base, e)))],
    reason: errors
      .slice(0, 4)
      .map((e) => describe(e, base))
      .join('; '),
  };
}

const LOCATION: Record<ParamEntry['in'], Location> = {
  path: 'params',
  query: 'query',
  header: 'headers',
  cookie: 'cookies',
};

/**
 * The spec's verdict on a request to `op` with these parameters (fixtures already resolved, values
 * as generated: the wire encoding is applied here) and this body. A body is only judged for an
 * operation that declares one.
 */
export function specVerdict(op: OperationModel, params: readonly ParamEntry[], body: SentBody): Verdict {
  const refusals: Refusal[] = [];
  let decidable = true;
  const declared = (entry: ParamEntry) =>
    op.parameters.some(
      (p) =>
        p.in === entry.in &&
        (p.in === 'header' ? p.name.toLowerCase() === entry.name.toLowerCase() : p.name === entry.name),
    );

  for (const param of op.parameters) {
    const location = LOCATION[param.in];
    const name = param.in === 'header' ? param.name.toLowerCase() : param.name;
    const base = `${location}.${name}`;
    const fields = param.in === 'header' ? [base, `${location}.${param.name}`] : [base];
    const given = params.filter(
      (e) => e.in === param.in && (param.in === 'header' ? e.name.toLowerCase() === name : e.name === param.name),
    );
    if (given.length === 0 && param.in === 'path') {
      // Left out of the URL, the template's `{name}` is sent as it is: that is the value.
      const refusal = check(param.pointer, `{${param.name}}`, location, base);
      if (refusal) refusals.push({ ...refusal, fields: [...new Set([...refusal.fields, ...fields])] });
      continue;
    }
    if (given.length === 0) {
      if (param.required) refusals.push({ location, fields, reason: `${base} is required` });
      continue;
    }
    const asSent = wireParameterValue(param.in);
    const all = given.flatMap((e) => e.values.flatMap((v) => parameterStrings(v).map(asSent)));
    // A path has one place for the value: the first one given fills it.
    const values = param.in === 'path' ? all.slice(0, 1) : all;
    if (given.some((e) => e.raw)) {
      decidable = false;
      continue;
    }
    if (values.length > 1) {
      if (param.in === 'query') {
        refusals.push({ location, fields, reason: `${base} given ${values.length} times (an array, not a string)` });
      } else decidable = false; // repeated headers and cookies: Node and the cookie parser pick or join
      continue;
    }
    const value = values[0] ?? '';
    if (param.in !== 'query' && param.in !== 'path' && /[^\u0020-\u007e]/.test(value)) {
      decidable = false; // header bytes beyond ASCII: Node reads them as Latin-1
      continue;
    }
    if (param.in === 'query' && !storable(value)) {
      refusals.push({ location, fields, reason: `${base} contains NUL or an unpaired surrogate` });
      continue;
    }
    const refusal = check(param.pointer, value, location, base);
    if (refusal) refusals.push({ ...refusal, fields: [...new Set([...refusal.fields, ...fields])] });
  }

  if (!OPEN_QUERY_OPERATIONS.has(op.id)) {
    for (const entry of params) {
      if (entry.in === 'query' && !declared(entry)) {
        refusals.push({
          location: 'query',
          fields: [`query.${entry.name}`],
          reason: `query.${entry.name} is not a parameter of ${op.id}`,
        });
      }
    }
  }

  if (op.body !== undefined) {
    if (body.kind === 'none') {
      if (op.body.required) refusals.push({ location: 'body', fields: ['body'], reason: 'body is required' });
    } else {
      const refusal = check(op.body.pointer, body.value, 'body', 'body');
      if (refusal) refusals.push(refusal);
      if (poisoned(body.value)) {
        // The message is "The body is not valid JSON": it names the body.
        refusals.push({ location: 'body', fields: ['body'], reason: 'a __proto__ key, or constructor.prototype' });
      }
      const unstorable = unstorableFields(body.value, 'body');
      if (unstorable.length > 0) {
        refusals.push({ location: 'body', fields: unstorable, reason: 'strings with NUL or an unpaired surrogate' });
      }
    }
  }

  return { accepts: refusals.length > 0 ? false : decidable ? true : undefined, refusals };
}

/**
 * The spec's rule on prototype poisoning (openapi.yaml, info.description): no object of a JSON body
 * has a key `__proto__`, nor a key `constructor` holding an object with a key `prototype`.
 */
function poisoned(value: unknown): boolean {
  const stack = [value];
  for (let next = stack.pop(); next !== undefined || stack.length > 0; next = stack.pop()) {
    if (next === null || typeof next !== 'object') continue;
    if (!Array.isArray(next)) {
      if (Object.hasOwn(next, '__proto__')) return true;
      const ctor = (next as Record<string, unknown>).constructor;
      if (
        Object.hasOwn(next, 'constructor') &&
        ctor !== null &&
        typeof ctor === 'object' &&
        Object.hasOwn(ctor, 'prototype')
      )
        return true;
    }
    stack.push(...Object.values(next));
  }
  return false;
}

/**
 * The spec's rule that JSON Schema does not state field by field (openapi.yaml, info.description): no
 * string, in a body or a query parameter, holds NUL or an unpaired UTF-16 surrogate.
 */
const storable = (s: string) => !s.includes('\u0000') && s.isWellFormed();

/** The paths (`body.a[2].b`) of the strings, and object keys, in `value` that break that rule. */
function unstorableFields(value: unknown, path: string): string[] {
  if (typeof value === 'string') return storable(value) ? [] : [path];
  if (Array.isArray(value)) return value.flatMap((item, i) => unstorableFields(item, `${path}[${i}]`));
  if (value === null || typeof value !== 'object') return [];
  return Object.entries(value).flatMap(([key, item]) =>
    storable(key) ? unstorableFields(item, `${path}.${key}`) : [`${path}.${key}`],
  );
}

/** Whether an INVALID_INPUT message names one of the fields of the refusals. */
export function namesAField(message: string, refusals: readonly Refusal[]): boolean {
  return refusals.some((r) => r.fields.some((field) => message.includes(field)));
}
