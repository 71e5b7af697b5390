import AjvCompiler from '@fastify/ajv-compiler';
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler';
import type { FastifyServerOptions } from 'fastify';

// Fastify compiles every route's validators (Ajv) and response serializers (fast-json-stringify)
// when the app starts: for the contract's operations some 9 MB of code and schemas that an idle
// service, or one whose clients call a handful of operations, never runs. These are Fastify's own
// compilers, with the options it is given, each run at the first request that needs it instead.
// Every operation is called by the test suite (contract coverage), so a schema that does not
// compile still fails there, not in production.

/** What Fastify reads from a validator: its verdict, then `errors` when it said no. */
interface Validator {
  (data: unknown): boolean;
  errors?: unknown;
}

function compiledOnFirstUse(compile: () => Validator): Validator {
  let compiled: Validator | undefined;
  let failed: unknown;
  const validate: Validator = (data) => {
    // A schema that does not compile refuses every request (500), compiled once: not again each time.
    if (failed !== undefined) throw failed;
    try {
      compiled ??= compile();
    } catch (err) {
      failed = err;
      throw err;
    }
    const valid = compiled(data);
    validate.errors = compiled.errors;
    return valid;
  };
  validate.errors = null;
  return validate;
}

/** What Fastify hands a validator compiler for one part of one route. */
interface RouteSchema {
  schema: unknown;
  httpPart?: string;
}

interface HeadersSchema {
  properties?: Record<string, unknown>;
  required?: unknown;
}

/** What a headers schema may hold: names only under `properties` and `required`. */
const FLAT_HEADER_KEYWORDS = new Set(['type', 'properties', 'required', 'additionalProperties', '$schema']);

/** A headers schema with its property names and `required` entries in lower case (as Fastify's own compiler gets it). */
function lowerCaseHeaderNames(schema: unknown): unknown {
  if (schema === null || typeof schema !== 'object' || Object.getPrototypeOf(schema) !== Object.prototype)
    return schema;
  // Only the top level is lower-cased (Fastify's own goes into allOf and the like too): a headers
  // schema that would hold names anywhere else stops the start rather than go unchecked.
  const nested = Object.keys(schema).filter((key) => !FLAT_HEADER_KEYWORDS.has(key));
  if (nested.length > 0) {
    throw new Error(
      `a headers schema may only use ${[...FLAT_HEADER_KEYWORDS].join(', ')}; it has ${nested.join(', ')}`,
    );
  }
  const headers = schema as HeadersSchema;
  return {
    ...headers,
    ...(Array.isArray(headers.required)
      ? { required: headers.required.map((name) => (typeof name === 'string' ? name.toLowerCase() : name)) }
      : {}),
    ...(headers.properties
      ? {
          properties: Object.fromEntries(
            Object.entries(headers.properties).map(([name, value]) => [name.toLowerCase(), value]),
          ),
        }
      : {}),
  };
}

type CompilersFactory = NonNullable<NonNullable<FastifyServerOptions['schemaController']>['compilersFactory']>;
type BuildValidator = NonNullable<CompilersFactory['buildValidator']>;
type BuildSerializer = NonNullable<CompilersFactory['buildSerializer']>;

/** The `schemaController` option: Fastify's compilers, each compiling at the first use. */
export function compilersOnFirstUse(): NonNullable<FastifyServerOptions['schemaController']> {
  const validators = AjvCompiler() as unknown as BuildValidator;
  const serializers = SerializerSelector() as unknown as BuildSerializer;
  return {
    compilersFactory: {
      buildValidator: ((externalSchemas: never, options: never) => {
        const compiler = validators(externalSchemas, options) as unknown as (route: RouteSchema) => Validator;
        return (route: RouteSchema) => {
          // A compiler of its own makes Fastify hand over header schemas as written (it would lower-case
          // their names for its own): lower-cased here as Fastify does, since Node lower-cases headers.
          const schema = route.httpPart === 'headers' ? lowerCaseHeaderNames(route.schema) : route.schema;
          return compiledOnFirstUse(() => compiler({ ...route, schema }));
        };
      }) as unknown as BuildValidator,
      buildSerializer: (externalSchemas, options) => {
        const compiler = serializers(externalSchemas, options);
        return (route) => {
          let serialize: ((data: unknown) => string) | undefined;
          return (data: unknown) => {
            serialize ??= compiler(route) as (data: unknown) => string;
            return serialize(data);
          };
        };
      },
    },
  };
}
