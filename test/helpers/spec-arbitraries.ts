// fast-check arbitraries derived from openapi.yaml at run time: a small JSON Schema -> arbitrary
// converter for what the spec uses, the places in a generated value that a mutation can target,
// the schema-directed mutations themselves, and a model of each operation (method, path,
// parameters, body, security, body limit) read from the spec and cross-checked against
// generated/contract.ts. Nothing here knows about a particular operation: a new operation, field
// or constraint in openapi.yaml is generated from as soon as it is written; a schema keyword this
// converter does not know fails loudly (UnsupportedSchemaError) instead of being ignored. Where a
// keyword cannot be generated from directly (a general `not`, a pattern's lookahead), values are
// generated from the rest of the schema and filtered with Ajv, the validator the service uses.
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { fullFormats } from 'ajv-formats/dist/formats.js';
import fc from 'fast-check';
import { type OperationId, operations } from '../../generated/contract.ts';
import { specDocument } from '../../src/spec.ts';

export type JsonSchema = Record<string, unknown>;
export type JsonType = 'string' | 'integer' | 'number' | 'boolean' | 'null' | 'object' | 'array';
const JSON_TYPES: readonly JsonType[] = ['string', 'integer', 'number', 'boolean', 'null', 'object', 'array'];

/** A schema construct the converter has no generator for: the operation using it cannot be fuzzed. */
export class UnsupportedSchemaError extends Error {
  override name = 'UnsupportedSchemaError';
}

// Keywords that only describe; they never constrain a value.
const ANNOTATIONS = new Set([
  'description',
  'title',
  'examples',
  'example',
  'default',
  'deprecated',
  'readOnly',
  'writeOnly',
  // What a string carries (a JWT's claims): an annotation, no constraint on the string.
  'contentSchema',
  'contentEncoding',
  'contentMediaType',
  '$comment',
]);
// Keywords the converter generates from (and mutates against).
const HANDLED = new Set([
  '$ref',
  'type',
  'enum',
  'const',
  'format',
  'pattern',
  'minLength',
  'maxLength',
  'minimum',
  'maximum',
  'exclusiveMinimum',
  'exclusiveMaximum',
  'items',
  'minItems',
  'maxItems',
  'uniqueItems',
  'properties',
  'required',
  'additionalProperties',
  'minProperties',
  'maxProperties',
  'propertyNames',
  'not',
  'oneOf',
  'anyOf',
]);

/** The value at a JSON pointer ("#/components/schemas/User") of openapi.yaml. */
export function specAt(pointer: string): unknown {
  if (!pointer.startsWith('#/')) throw new UnsupportedSchemaError(`only local $refs are supported (got ${pointer})`);
  let node: unknown = specDocument;
  for (const raw of pointer.slice(2).split('/')) {
    const part = raw.replaceAll('~1', '/').replaceAll('~0', '~');
    if (node === null || typeof node !== 'object' || !(part in node)) {
      throw new UnsupportedSchemaError(`$ref ${pointer} does not resolve in openapi.yaml`);
    }
    node = (node as Record<string, unknown>)[part];
  }
  return node;
}

const isAnnotation = (key: string) => ANNOTATIONS.has(key) || key.startsWith('x-');

// The whole spec under the id "spec", so that a schema taken out of it compiles with its $refs.
const ajv = new Ajv2020({ strict: false });
addFormats.default(ajv);
ajv.addSchema({ ...specDocument, $id: 'spec' });
const validators = new Map<string, ValidateFunction>();

/** A schema with its local $refs ("#/components/...") pointing into the spec added to Ajv. */
function rebased(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(rebased);
  if (node === null || typeof node !== 'object') return node;
  return Object.fromEntries(
    Object.entries(node).map(([k, v]) => [
      k,
      k === '$ref' && typeof v === 'string' && v.startsWith('#') ? `spec${v}` : rebased(v),
    ]),
  );
}

/** Ajv's verdict (the service validates with Ajv too) on values against a schema of openapi.yaml. */
export function schemaValidator(schema: JsonSchema): ValidateFunction {
  const key = JSON.stringify(schema);
  let validate = validators.get(key);
  if (validate === undefined) {
    validate = ajv.compile(rebased(schema) as JsonSchema);
    validators.set(key, validate);
  }
  return validate;
}

/** Structural equality of JSON values (what `enum` and `const` compare by). */
function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  return (
    ka.length === kb.length &&
    ka.every(
      (k) => Object.hasOwn(b, k) && jsonEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]),
    )
  );
}

/**
 * A schema with its $ref followed (a ref's siblings may only be annotations, as in the spec), and the
 * component name when it came from #/components/schemas/<name>.
 */
export function deref(schema: JsonSchema, where: string): { schema: JsonSchema; component: string | undefined } {
  let current = schema;
  let component: string | undefined;
  for (let hops = 0; typeof current.$ref === 'string'; hops++) {
    if (hops > 32) throw new UnsupportedSchemaError(`${where}: $ref chain too long (a cycle?)`);
    const ref: string = current.$ref;
    const siblings = Object.keys(current).filter((k) => k !== '$ref' && !isAnnotation(k));
    if (siblings.length > 0) {
      throw new UnsupportedSchemaError(`${where}: $ref with constraining siblings (${siblings.join(', ')})`);
    }
    const match = /^#\/components\/schemas\/([^/]+)$/.exec(ref);
    if (match) component = match[1];
    current = specAt(ref) as JsonSchema;
  }
  for (const key of Object.keys(current)) {
    if (!HANDLED.has(key) && !isAnnotation(key)) {
      throw new UnsupportedSchemaError(`${where}: keyword "${key}" has no generator`);
    }
  }
  return { schema: current, component };
}

/** The JSON type of a value, telling integers from other numbers. */
export function jsonTypeOf(value: unknown): JsonType {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number';
  if (typeof value === 'string' || typeof value === 'boolean' || typeof value === 'object')
    return typeof value as JsonType;
  throw new Error(`not a JSON value: ${typeof value}`);
}

/** The JSON types a schema admits (integer is admitted wherever number is). */
export function allowedTypes(schema: JsonSchema, where = '#'): Set<JsonType> {
  const { schema: s } = deref(schema, where);
  const out = new Set<JsonType>();
  const add = (t: JsonType) => {
    out.add(t);
    if (t === 'number') out.add('integer');
  };
  if (s.const !== undefined) add(jsonTypeOf(s.const));
  else if (Array.isArray(s.enum)) for (const v of s.enum) add(jsonTypeOf(v));
  else if (Array.isArray(s.oneOf) || Array.isArray(s.anyOf)) {
    for (const branch of (s.oneOf ?? s.anyOf) as JsonSchema[]) for (const t of allowedTypes(branch, where)) add(t);
  } else if (typeof s.type === 'string') add(s.type as JsonType);
  else if (Array.isArray(s.type)) for (const t of s.type as JsonType[]) add(t);
  else if (s.properties !== undefined) add('object');
  else if (s.items !== undefined) add('array');
  else for (const t of JSON_TYPES) add(t);
  return out;
}

/** The schema narrowed to one type of its `type` list (the other keywords kept). */
function withType(schema: JsonSchema, type: JsonType): JsonSchema {
  return { ...schema, type };
}

/** A oneOf/anyOf branch merged with the keywords beside the oneOf. */
function branches(schema: JsonSchema): JsonSchema[] | undefined {
  const list = (schema.oneOf ?? schema.anyOf) as JsonSchema[] | undefined;
  if (list === undefined) return undefined;
  const { oneOf: _o, anyOf: _a, ...rest } = schema;
  const constraining = Object.keys(rest).filter((k) => !isAnnotation(k));
  return list.map((branch) => (constraining.length === 0 ? branch : { ...rest, ...branch }));
}

/** The branch of a oneOf/anyOf that a value belongs to (by type), or undefined. */
export function branchFor(schema: JsonSchema, value: unknown, where = '#'): JsonSchema | undefined {
  const list = branches(schema);
  if (list === undefined) return undefined;
  const type = jsonTypeOf(value);
  return list.find((b) => allowedTypes(b, where).has(type));
}

/** Length in code points, as JSON Schema (and Ajv) count minLength and maxLength. */
export const codePoints = (s: string) => [...s].length;

/** One character a valid string is made of: mostly printable ASCII, some controls, some of the rest of Unicode. */
export const validChar: fc.Arbitrary<string> = fc.oneof(
  { weight: 12, arbitrary: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)) },
  { weight: 1, arbitrary: fc.integer({ min: 0x01, max: 0x1f }).map((c) => String.fromCharCode(c)) },
  {
    weight: 3,
    arbitrary: fc
      .integer({ min: 0xa0, max: 0x10ffff })
      .filter((c) => c < 0xd800 || c > 0xdfff)
      .map((c) => String.fromCodePoint(c)),
  },
);

const emailRegex = fullFormats.email as RegExp;
const plainWord = fc.stringMatching(/^[a-z0-9]{1,12}$/);

/** Strings of a `format`; each generator's values are checked against Ajv's own definition of the format. */
function formatArbitrary(format: string, where: string): fc.Arbitrary<string> {
  switch (format) {
    case 'email':
      return fc
        .oneof(
          { weight: 3, arbitrary: fc.tuple(plainWord, plainWord).map(([a, b]) => `${a}@${b}.example.com`) },
          { weight: 2, arbitrary: fc.emailAddress() },
          {
            weight: 1,
            arbitrary: fc.tuple(plainWord, plainWord).map(([a, b]) => `${a.toUpperCase()}@${b}.EXAMPLE.org`),
          },
        )
        .filter((s) => emailRegex.test(s));
    case 'uuid':
      return fc.uuid();
    case 'date-time':
      return fc
        .date({ min: new Date('1970-01-01T00:00:00Z'), max: new Date('2999-12-31T23:59:59Z'), noInvalidDate: true })
        .map((d) => d.toISOString());
    case 'uri':
      return fc.webUrl();
    default:
      throw new UnsupportedSchemaError(`${where}: format "${format}" has no generator`);
  }
}

/** Values offered for a property or a component besides the schema's own (they must be valid too). */
export interface Hints {
  /** By property name, wherever the property appears. */
  properties?: Record<string, fc.Arbitrary<unknown>>;
  /** By component name (#/components/schemas/<name>), for values whose fields belong together. */
  components?: Record<string, fc.Arbitrary<unknown>>;
}

const mixIn = (own: fc.Arbitrary<unknown>, hint: fc.Arbitrary<unknown> | undefined) =>
  hint === undefined ? own : fc.oneof({ weight: 2, arbitrary: own }, { weight: 1, arbitrary: hint });

/** An arbitrary of values valid against `schema` (a schema of openapi.yaml, $refs as written). */
export function valueArbitrary(schema: JsonSchema, hints: Hints = {}, where = '#'): fc.Arbitrary<unknown> {
  const { schema: s, component } = deref(schema, where);
  if (component === undefined) return ownValueArbitrary(s, hints, where);
  // A schema that refers to itself (RealtimePayloadValue) is unrolled a few levels, then ends in
  // scalars, which such a schema (no `type`) accepts.
  const depth = unrolling.get(component) ?? 0;
  if (depth >= MAX_UNROLL) {
    if (s.type !== undefined) throw new UnsupportedSchemaError(`${where}: a recursive schema with a type`);
    return fc.oneof(fc.constant(null), fc.boolean(), fc.integer(), fc.string({ maxLength: 4 }));
  }
  unrolling.set(component, depth + 1);
  try {
    return mixIn(ownValueArbitrary(s, hints, where), hints.components?.[component]);
  } finally {
    unrolling.set(component, depth);
  }
}

/** How deep each component is being unrolled by valueArbitrary right now (schemas that refer to themselves). */
const unrolling = new Map<string, number>();
const MAX_UNROLL = 1;

/**
 * The values a `not` schema excludes, when it lists them (`not: {enum: [...]}`, `not: {const: x}`);
 * undefined for any other `not`. Checks the `not` schema's keywords either way.
 */
export function excludedValues(notSchema: JsonSchema, where: string): unknown[] | undefined {
  // Every keyword of the excluded schema must be known too (and a mutation generates from it).
  valueArbitrary(notSchema, {}, where);
  const { schema: n } = deref(notSchema, where);
  const constraining = Object.keys(n).filter((k) => !isAnnotation(k));
  if (constraining.length === 1 && constraining[0] === 'const') return [n.const];
  if (constraining.length === 1 && constraining[0] === 'enum' && Array.isArray(n.enum)) return n.enum as unknown[];
  return undefined;
}

/**
 * Values of `rest` that `notSchema` does not accept. Excluded values that are listed are taken out
 * of an enum before generating, or else filtered out (a listed few are rarely hit); any other `not`
 * filters what `rest` generates with Ajv.
 */
function excluding(rest: JsonSchema, notSchema: JsonSchema, hints: Hints, where: string): fc.Arbitrary<unknown> {
  const excluded = excludedValues(notSchema, `${where}/not`);
  if (excluded === undefined) {
    const matchesNot = schemaValidator(notSchema);
    return ownValueArbitrary(rest, hints, where).filter((v) => !matchesNot(v));
  }
  const allowed = (v: unknown) => !excluded.some((x) => jsonEqual(x, v));
  if (rest.const !== undefined || Array.isArray(rest.enum)) {
    const { const: _c, enum: _e, ...others } = rest;
    const left = (rest.const !== undefined ? [rest.const] : (rest.enum as unknown[])).filter(allowed);
    if (left.length === 0) throw new UnsupportedSchemaError(`${where}: "not" excludes every value of the enum`);
    return ownValueArbitrary({ ...others, enum: left }, hints, where);
  }
  return ownValueArbitrary(rest, hints, where).filter(allowed);
}

function ownValueArbitrary(s: JsonSchema, hints: Hints, where: string): fc.Arbitrary<unknown> {
  if (s.not !== undefined) {
    const { not, ...rest } = s;
    return excluding(rest, not as JsonSchema, hints, where);
  }
  if (s.const !== undefined) return fc.constant(s.const);
  if (Array.isArray(s.enum)) {
    if (s.enum.length === 0) throw new UnsupportedSchemaError(`${where}: empty enum`);
    return fc.constantFrom(...(s.enum as unknown[]));
  }
  const alternatives = branches(s);
  if (alternatives !== undefined) {
    return fc.oneof(...alternatives.map((b, i) => valueArbitrary(b, hints, `${where}/oneOf/${i}`)));
  }
  if (Array.isArray(s.type)) {
    return fc.oneof(...(s.type as JsonType[]).map((t) => ownValueArbitrary(withType(s, t), hints, where)));
  }
  const type = (s.type as JsonType | undefined) ?? [...allowedTypes(s, where)][0];
  if (s.type === undefined && s.properties === undefined && s.items === undefined) {
    // No type: any JSON value, held to whatever else the schema says (minProperties, say).
    const any = fc.jsonValue({ maxDepth: 2 });
    if (!Object.keys(s).some((k) => !isAnnotation(k))) return any;
    const validate = schemaValidator(s);
    return any.filter((v) => validate(v));
  }
  switch (type) {
    case 'string':
      return stringArbitrary(s, where);
    case 'integer': {
      const min = Math.ceil(bound(s, 'minimum', 'exclusiveMinimum', 1, -(2 ** 31)));
      const max = Math.floor(bound(s, 'maximum', 'exclusiveMaximum', -1, 2 ** 31 - 1));
      // In a wide range (no maximum, say), mostly values near the minimum (sizes, counts), sometimes any.
      return max - min <= 1024
        ? fc.integer({ min, max })
        : fc.oneof(
            { weight: 3, arbitrary: fc.integer({ min, max: min + 1024 }) },
            { weight: 1, arbitrary: fc.integer({ min, max }) },
          );
    }
    case 'number': {
      const min = bound(s, 'minimum', 'exclusiveMinimum', Number.EPSILON, -1e9);
      const max = bound(s, 'maximum', 'exclusiveMaximum', -Number.EPSILON, 1e9);
      return fc.double({ min, max, noNaN: true, noDefaultInfinity: true });
    }
    case 'boolean':
      return fc.boolean();
    case 'null':
      return fc.constant(null);
    case 'array': {
      const items = (s.items as JsonSchema | undefined) ?? {};
      const item = valueArbitrary(items, hints, `${where}/items`);
      const constraints = {
        minLength: (s.minItems as number | undefined) ?? 0,
        ...(s.maxItems === undefined ? {} : { maxLength: s.maxItems as number }),
      };
      return s.uniqueItems === true
        ? fc.uniqueArray(item, { ...constraints, selector: (v) => JSON.stringify(v) })
        : fc.array(item, constraints);
    }
    case 'object':
      return objectArbitrary(s, hints, where);
    default:
      throw new UnsupportedSchemaError(`${where}: type "${String(type)}" has no generator`);
  }
}

function bound(s: JsonSchema, inclusive: string, exclusive: string, step: number, fallback: number): number {
  if (typeof s[exclusive] === 'number') return (s[exclusive] as number) + step;
  if (typeof s[inclusive] === 'number') return s[inclusive] as number;
  return fallback;
}

function stringArbitrary(s: JsonSchema, where: string): fc.Arbitrary<string> {
  const minLength = (s.minLength as number | undefined) ?? 0;
  const maxLength = s.maxLength as number | undefined;
  const fitsLength = (v: string) => {
    const n = codePoints(v);
    return n >= minLength && (maxLength === undefined || n <= maxLength);
  };
  if (typeof s.format === 'string') {
    const base = formatArbitrary(s.format, where);
    const pattern = typeof s.pattern === 'string' ? new RegExp(s.pattern, 'u') : undefined;
    return base.filter((v) => fitsLength(v) && (pattern === undefined || pattern.test(v)));
  }
  if (typeof s.pattern === 'string') {
    return patternArbitrary(s.pattern).filter(fitsLength);
  }
  return fc.string({ unit: validChar, minLength, ...(maxLength === undefined ? {} : { maxLength }) });
}

/**
 * The lookaround groups of a regular expression ((?=...), (?!...), (?<=...), (?<!...)): their
 * source text and where they are. fast-check generates no lookaround.
 */
function lookarounds(source: string): Array<{ start: number; end: number; negative: boolean; body: string }> {
  const found: Array<{ start: number; end: number; negative: boolean; body: string }> = [];
  const opens: Array<{ start: number; kind: 'lookaround' | 'group'; negative: boolean; bodyStart: number }> = [];
  let inClass = false;
  for (let i = 0; i < source.length; i++) {
    const ch = source[i];
    if (ch === '\\') {
      i++;
      continue;
    }
    if (inClass) {
      if (ch === ']') inClass = false;
      continue;
    }
    if (ch === '[') inClass = true;
    else if (ch === '(') {
      const head = /^\(\?<?[=!]/.exec(source.slice(i));
      if (head) {
        opens.push({ start: i, kind: 'lookaround', negative: head[0].endsWith('!'), bodyStart: i + head[0].length });
        i += head[0].length - 1;
      } else opens.push({ start: i, kind: 'group', negative: false, bodyStart: i + 1 });
    } else if (ch === ')') {
      const open = opens.pop();
      if (open?.kind === 'lookaround' && !opens.some((o) => o.kind === 'lookaround')) {
        found.push({
          start: open.start,
          end: i + 1,
          negative: open.negative,
          body: source.slice(open.bodyStart, i),
        });
      }
    }
  }
  return found;
}

/**
 * Strings matching `pattern`. A pattern with lookarounds is generated without them (which only
 * widens it: they are assertions) and the strings filtered with the whole pattern.
 */
function patternArbitrary(pattern: string): fc.Arbitrary<string> {
  const groups = lookarounds(pattern);
  if (groups.length === 0) return fc.stringMatching(new RegExp(pattern));
  let widened = '';
  let at = 0;
  for (const g of groups) {
    widened += pattern.slice(at, g.start);
    at = g.end;
  }
  widened += pattern.slice(at);
  const whole = new RegExp(pattern, 'u');
  return fc.stringMatching(new RegExp(widened)).filter((v) => whole.test(v));
}

/**
 * Strings that a pattern's leading negative lookahead refuses (`^(?!realtime:|presence:)...` gives
 * `realtime:<current>`), for the literal alternatives of such a lookahead.
 */
function lookaheadViolations(pattern: string, current: string): string[] {
  return lookarounds(pattern)
    .filter((g) => g.negative && (g.start === 0 || (g.start === 1 && pattern.startsWith('^'))))
    .flatMap((g) => g.body.split('|'))
    .filter((alternative) => /^(?:[A-Za-z0-9 _:,;\-/@#]|\\[^A-Za-z0-9])*$/.test(alternative))
    .map((alternative) => `${alternative.replace(/\\(.)/g, '$1')}${current}`);
}

/** Whether a property name is allowed by the object schema's `propertyNames` (any is, without one). */
export function propertyNameAllowed(s: JsonSchema, name: string): boolean {
  return s.propertyNames === undefined || schemaValidator(s.propertyNames as JsonSchema)(name) === true;
}

/** Names for undeclared properties: short strings, held to `propertyNames` when there is one. */
function propertyNameArbitrary(s: JsonSchema, where: string): fc.Arbitrary<string> {
  if (s.propertyNames === undefined) return fc.string({ minLength: 1, maxLength: 12 });
  const { schema: names } = deref(s.propertyNames as JsonSchema, `${where}/propertyNames`);
  // A name is a string whatever the schema says; short unless the schema wants longer ones.
  const minLength = (names.minLength as number | undefined) ?? 1;
  const maxLength = (names.maxLength as number | undefined) ?? Math.max(12, minLength);
  const arbitrary = ownValueArbitrary(
    { ...names, minLength, maxLength, type: 'string' },
    {},
    `${where}/propertyNames`,
  ) as fc.Arbitrary<string>;
  return arbitrary.filter((name) => propertyNameAllowed(s, name));
}

function objectArbitrary(s: JsonSchema, hints: Hints, where: string): fc.Arbitrary<Record<string, unknown>> {
  const properties = (s.properties as Record<string, JsonSchema> | undefined) ?? {};
  const required = (s.required as string[] | undefined) ?? [];
  for (const name of required) {
    if (!(name in properties) && s.additionalProperties === false) {
      throw new UnsupportedSchemaError(`${where}: required "${name}" is not among the properties`);
    }
    if (!propertyNameAllowed(s, name)) {
      throw new UnsupportedSchemaError(`${where}: required "${name}" is not allowed by propertyNames`);
    }
  }
  const model: Record<string, fc.Arbitrary<unknown>> = {};
  for (const [name, propertySchema] of Object.entries(properties)) {
    // A declared property whose name propertyNames refuses can never be present.
    if (!propertyNameAllowed(s, name)) continue;
    model[name] = mixIn(valueArbitrary(propertySchema, hints, `${where}/properties/${name}`), hints.properties?.[name]);
  }
  const requiredKeys = required.filter((name) => name in model);
  const extraValue =
    typeof s.additionalProperties === 'object'
      ? valueArbitrary(s.additionalProperties as JsonSchema, hints, `${where}/additionalProperties`)
      : fc.jsonValue({ maxDepth: 1 });
  const extraKey = propertyNameArbitrary(s, where).filter((k) => !(k in properties) && k !== '__proto__');
  if (s.minProperties === undefined && s.maxProperties === undefined) {
    const declared = fc.record(model, { requiredKeys });
    if (s.additionalProperties === false) return declared;
    return fc
      .tuple(declared, fc.dictionary(extraKey, extraValue, { maxKeys: 3 }))
      .map(([own, extra]) => ({ ...extra, ...own }));
  }

  // minProperties / maxProperties: which optional properties are present is chosen up front (as
  // many as the counts need), and undeclared ones make up the rest where they are allowed.
  const minProperties = (s.minProperties as number | undefined) ?? 0;
  const maxProperties = (s.maxProperties as number | undefined) ?? Number.POSITIVE_INFINITY;
  const optional = Object.keys(model).filter((name) => !requiredKeys.includes(name));
  const extrasAllowed = s.additionalProperties !== false;
  const room = Math.min(optional.length, maxProperties - requiredKeys.length);
  const least = extrasAllowed ? 0 : Math.max(0, minProperties - requiredKeys.length);
  if (requiredKeys.length > maxProperties || least > room || minProperties > maxProperties) {
    throw new UnsupportedSchemaError(
      `${where}: minProperties ${minProperties} / maxProperties ${s.maxProperties ?? 'none'} cannot be met`,
    );
  }
  const declared = fc
    .tuple(fc.subarray(optional, { minLength: least, maxLength: room }), fc.record(model))
    .map(([chosen, all]) =>
      Object.fromEntries([...requiredKeys, ...chosen].map((name) => [name, (all as Record<string, unknown>)[name]])),
    );
  if (!extrasAllowed) return declared;
  return declared.chain((own) => {
    const count = Object.keys(own).length;
    const minKeys = Math.max(0, minProperties - count);
    const maxKeys = Math.max(minKeys, Math.min(3, maxProperties - count));
    return fc.dictionary(extraKey, extraValue, { minKeys, maxKeys }).map((extra) => ({ ...extra, ...own }));
  });
}

// ---------------------------------------------------------------------------------------------
// Sites: the places in a generated value that a mutation can aim at, each with its schema.

export type Path = ReadonlyArray<string | number>;

export interface Site {
  path: Path;
  /** The schema the value at `path` must satisfy, $refs followed and a oneOf narrowed to the value's branch. */
  schema: JsonSchema;
  /** Every JSON type the schema at `path` admits (all branches of a oneOf). */
  types: Set<JsonType>;
  /** Set when `path` is a property of an object: whether removing it breaks `required`. */
  required: boolean;
}

/** Every site of `value` (itself included), walking the schema alongside. */
export function sitesOf(value: unknown, schema: JsonSchema, path: Path = [], required = true): Site[] {
  const where = `#/${path.join('/')}`;
  const { schema: resolved } = deref(schema, where);
  const types = allowedTypes(resolved, where);
  const narrowed = branchFor(resolved, value, where) ?? resolved;
  const effective = deref(narrowed, where).schema;
  const sites: Site[] = [{ path, schema: effective, types, required }];
  if (Array.isArray(value) && effective.items !== undefined) {
    value.forEach((item, i) => {
      sites.push(...sitesOf(item, effective.items as JsonSchema, [...path, i], true));
    });
  } else if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    const properties = (effective.properties as Record<string, JsonSchema> | undefined) ?? {};
    const requiredNames = new Set((effective.required as string[] | undefined) ?? []);
    for (const [key, item] of Object.entries(value)) {
      const propertySchema = properties[key];
      if (propertySchema !== undefined) {
        sites.push(...sitesOf(item, propertySchema, [...path, key], requiredNames.has(key)));
      }
    }
  }
  return sites;
}

/** A deep copy of a JSON value with the value at `path` replaced (or removed with `remove`). */
export function setAt(root: unknown, path: Path, replacement: unknown, remove = false): unknown {
  if (path.length === 0) return replacement;
  const [head, ...rest] = path as [string | number, ...Array<string | number>];
  if (Array.isArray(root)) {
    const copy = [...root];
    if (rest.length === 0 && remove) copy.splice(Number(head), 1);
    else copy[Number(head)] = setAt(copy[Number(head)], rest, replacement, remove);
    return copy;
  }
  const copy = { ...(root as Record<string, unknown>) };
  if (rest.length === 0 && remove) delete copy[String(head)];
  else copy[String(head)] = setAt(copy[String(head)], rest, replacement, remove);
  return copy;
}

export function getAt(root: unknown, path: Path): unknown {
  let node = root;
  for (const part of path) node = (node as Record<string | number, unknown>)[part];
  return node;
}

// ---------------------------------------------------------------------------------------------
// Schema-directed mutations of a valid value.

/** Values of each JSON type, for replacing a value with one of a type its schema does not admit. */
export interface TypedValues {
  string: string;
  integer: number;
  number: number;
  boolean: boolean;
  null: null;
  object: Record<string, unknown>;
  array: unknown[];
}

export const typedValuesArbitrary: fc.Arbitrary<TypedValues> = fc.record({
  string: fc.oneof(fc.string({ maxLength: 8 }), fc.constantFrom('', '0', 'true', 'null', '[]', '{}')),
  integer: fc.oneof(
    fc.integer(),
    fc.constantFrom(0, -1, 2 ** 31, 2 ** 53, -(2 ** 53), Number.MAX_SAFE_INTEGER + 2, 1e21, 1e300),
  ),
  number: fc.oneof(
    fc.double({ noNaN: true, noDefaultInfinity: true }).filter((n) => !Number.isInteger(n)),
    fc.constantFrom(0.5, -0.5, 1e-300, 1.5e300),
  ),
  boolean: fc.boolean(),
  null: fc.constant(null),
  object: fc.oneof(
    fc.constant<Record<string, unknown>>({}),
    fc.dictionary(fc.string({ maxLength: 6 }), fc.jsonValue({ maxDepth: 1 }), { maxKeys: 3 }),
  ),
  array: fc.oneof(fc.constant<unknown[]>([]), fc.array<unknown>(fc.jsonValue({ maxDepth: 1 }), { maxLength: 4 })),
});

/** Characters and sequences that break naive string handling. */
export const oddUnicodeArbitrary: fc.Arbitrary<string> = fc
  .array(
    fc.oneof(
      fc.constantFrom(
        '\ud800', // lone high surrogate
        '\udfff', // lone low surrogate
        '\udc00\ud800', // surrogates in the wrong order
        '\u0000', // NUL
        '\u202e', // right-to-left override
        '\u200f', // right-to-left mark
        '\u200b', // zero-width space
        '\u200d', // zero-width joiner
        '\ufeff', // byte-order mark
        '\uffff', // noncharacter
        '\ufffd', // replacement character
        '\u2028', // line separator
        '\u0301\u0301\u0301', // combining marks with nothing to combine with
        'e\u0301', // e + combining acute
        '\ud83d\ude00', // emoji
        '\ud83d\udc69\u200d\ud83d\udc69\u200d\ud83d\udc67', // family (ZWJ sequence)
        '\ud83c\uddfa\ud83c\uddf8', // flag
        '\uff10\uff11\uff12\uff13\uff14\uff15', // fullwidth digits
        '\u0660\u0661\u0662\u0663\u0664\u0665', // Arabic-Indic digits
        '\u0130', // dotted capital I (lower-cases to two code points)
        '\u212a', // Kelvin sign (lower-cases to k)
        '\u00df', // sharp s (upper-cases to SS)
        '\u0085', // next line
        '\u001b[31m', // ANSI escape
        '\r\n',
        '\t',
        '\\',
        '"',
        '%00',
        // biome-ignore lint/suspicious/noTemplateCurlyInString: a template placeholder sent as text is the point
        '${x}',
        "'; drop table users; --",
      ),
      fc.string({ unit: 'binary', maxLength: 4 }),
      fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c)),
    ),
    { minLength: 1, maxLength: 6 },
  )
  .map((parts) => parts.join(''));

/** What a mutation did, for labels and oracles. */
export interface MutationOutcome {
  value: unknown;
  label: string;
  /** A string to grow at send time to a target body size. */
  fill?: { path: Path; unit: string; targetBytes: number };
  /** An array to grow at send time to `count` copies of its first item. */
  repeat?: { path: Path; count: number };
}

export type Mutation =
  | { op: 'wrongType'; site: number; pick: number; values: TypedValues }
  | { op: 'removeRequired'; site: number; pick: number }
  | { op: 'addUnknown'; site: number; key: string; value: unknown }
  | { op: 'violate'; site: number; pick: number; junk: string }
  | { op: 'boundary'; site: number; pick: number; filler: string }
  | { op: 'oddUnicode'; site: number; text: string; position: number; replace: boolean }
  | { op: 'hugeString'; site: number; unit: string; targetBytes: number };

/** Mutations of a value, chosen by fast-check; `bodyLimit` sizes the huge strings (up to and over it). */
export function mutationArbitrary(bodyLimit: number): fc.Arbitrary<Mutation> {
  const site = fc.nat();
  const pick = fc.nat();
  const around = (n: number) =>
    fc.oneof(
      fc.constantFrom(n - 1, n, n + 1),
      fc.integer({ min: Math.max(0, n - 64), max: n + 64 }),
      fc.integer({ min: Math.floor(n / 2), max: n * 2 }),
    );
  return fc.oneof(
    {
      weight: 3,
      arbitrary: fc.record({ op: fc.constant('wrongType' as const), site, pick, values: typedValuesArbitrary }),
    },
    { weight: 2, arbitrary: fc.record({ op: fc.constant('removeRequired' as const), site, pick }) },
    {
      weight: 2,
      arbitrary: fc.record({
        op: fc.constant('addUnknown' as const),
        site,
        key: fc.oneof(fc.string({ maxLength: 10 }), fc.constantFrom('role', 'admin', 'isAdmin', 'id', 'emailVerified')),
        value: fc.jsonValue({ maxDepth: 2 }),
      }),
    },
    {
      weight: 3,
      arbitrary: fc.record({ op: fc.constant('violate' as const), site, pick, junk: fc.string({ maxLength: 8 }) }),
    },
    {
      weight: 1,
      arbitrary: fc.record({ op: fc.constant('boundary' as const), site, pick, filler: validChar }),
    },
    {
      weight: 3,
      arbitrary: fc.record({
        op: fc.constant('oddUnicode' as const),
        site,
        text: oddUnicodeArbitrary,
        position: fc.nat(),
        replace: fc.boolean(),
      }),
    },
    {
      weight: 2,
      arbitrary: fc.record({
        op: fc.constant('hugeString' as const),
        site,
        unit: fc.oneof(
          { weight: 3, arbitrary: fc.constant('a') },
          { weight: 1, arbitrary: fc.constantFrom('\u00e9', '\ud83d\ude00', '\\', '"', ' ', 'word ') },
        ),
        targetBytes: around(bodyLimit),
      }),
    },
  );
}

const pickFrom = <T>(list: readonly T[], index: number): T | undefined =>
  list.length === 0 ? undefined : list[index % list.length];

/** A value of a type that `site` does not admit, from `values`. */
function wrongTypedValue(
  site: Site,
  values: TypedValues,
  pick: number,
): { value: unknown; type: JsonType } | undefined {
  const candidates = JSON_TYPES.filter((t) => !site.types.has(t));
  const type = pickFrom(candidates, pick);
  return type === undefined ? undefined : { value: values[type], type };
}

/**
 * The value at a site broken against one of its constraints (length, range, pattern and its
 * lookahead, format, enum, items, property counts, property names, `not`).
 */
function violation(
  site: Site,
  current: unknown,
  pick: number,
  junk: string,
): { value: unknown; label: string; repeat?: number } | undefined {
  const s = site.schema;
  const options: Array<{ value: unknown; label: string; repeat?: number }> = [];
  if (typeof current === 'string') {
    if (typeof s.minLength === 'number' && s.minLength > 0) {
      options.push({ value: [...current].slice(0, s.minLength - 1).join(''), label: 'shorter than minLength' });
    }
    if (typeof s.maxLength === 'number') {
      options.push({ value: current + 'x'.repeat(s.maxLength + 1), label: 'longer than maxLength' });
    }
    if (typeof s.pattern === 'string') {
      const re = new RegExp(s.pattern, 'u');
      const candidates = [junk, `${current} `, ` ${current}`, `${current}\n`, `${current}0`, current.slice(1), 'x'];
      const bad = candidates.find((c) => !re.test(c));
      if (bad !== undefined) options.push({ value: bad, label: 'not matching the pattern' });
      const refused = lookaheadViolations(s.pattern, current).filter((c) => !re.test(c));
      if (refused.length > 0) {
        options.push({ value: pickFrom(refused, pick), label: "refused by the pattern's lookahead" });
      }
    }
    if (s.format === 'uuid') {
      const bad = [
        '',
        'not-a-uuid',
        current.slice(0, -1),
        `${current}0`,
        `{${current}}`,
        current.replace(/[0-9a-f]/i, 'g'),
        current.replaceAll('-', '_'),
      ];
      options.push({ value: pickFrom(bad, pick) ?? 'x', label: 'not a UUID' });
    }
    if (s.format === 'email') {
      const bad = [
        '',
        'plainaddress',
        'a@',
        '@example.com',
        'a b@example.com',
        'a@b..com',
        `${current}\n`,
        `<${current}>`,
      ];
      options.push({ value: pickFrom(bad, pick) ?? 'x', label: 'not an email address' });
    }
    if (Array.isArray(s.enum)) {
      const allowed = s.enum as unknown[];
      const bad = [junk, current.toUpperCase(), ` ${current}`, `${current}\u0000`].filter((v) => !allowed.includes(v));
      options.push({ value: pickFrom(bad, pick) ?? `${current}x`, label: 'not in the enum' });
    }
  }
  if (typeof current === 'number') {
    if (typeof s.minimum === 'number') options.push({ value: s.minimum - 1, label: 'below minimum' });
    if (typeof s.maximum === 'number') options.push({ value: s.maximum + 1, label: 'above maximum' });
    if (s.type === 'integer') options.push({ value: current + 0.5, label: 'not an integer' });
  }
  if (Array.isArray(current)) {
    if (typeof s.minItems === 'number' && s.minItems > 0) {
      options.push({ value: current.slice(0, s.minItems - 1), label: 'fewer than minItems' });
    }
    if (typeof s.maxItems === 'number') {
      // Grown to maxItems + 1 copies of its first item when the request is sent.
      options.push({ value: current, label: 'more than maxItems', repeat: s.maxItems + 1 });
    }
  }
  if (current !== null && typeof current === 'object' && !Array.isArray(current)) {
    const entries = Object.entries(current);
    if (typeof s.minProperties === 'number' && s.minProperties > 0) {
      options.push({
        value: Object.fromEntries(entries.slice(0, s.minProperties - 1)),
        label: 'fewer properties than minProperties',
      });
    }
    if (typeof s.maxProperties === 'number') {
      // Absent declared properties first (they keep additionalProperties: false satisfied), then new names.
      const declared = Object.keys((s.properties as Record<string, unknown> | undefined) ?? {});
      const names = [...declared, ...Array.from({ length: s.maxProperties + 1 }, (_, i) => `${junk}${i}`)].filter(
        (name) => !(name in current) && name !== '__proto__',
      );
      const added = names.slice(0, Math.max(0, s.maxProperties + 1 - entries.length)).map((name) => [name, junk]);
      options.push({
        value: { ...current, ...Object.fromEntries(added) },
        label: 'more properties than maxProperties',
      });
    }
    if (s.propertyNames !== undefined) {
      const names = s.propertyNames as JsonSchema;
      const listed = deref(names, '#/propertyNames').schema.not;
      const excluded = listed === undefined ? [] : (excludedValues(listed as JsonSchema, '#/propertyNames/not') ?? []);
      const candidates = [...excluded.filter((v) => typeof v === 'string'), junk, '', ' ', `${junk}\u0000`];
      const bad = candidates.filter((name) => name !== '__proto__' && !propertyNameAllowed(s, name));
      const name = pickFrom(bad, pick);
      if (name !== undefined) {
        options.push({
          value: { ...current, [name]: junk },
          label: `with a property ${JSON.stringify(name)} (propertyNames)`,
        });
      }
    }
  }
  if (s.not !== undefined) {
    const notSchema = s.not as JsonSchema;
    const excluded = excludedValues(notSchema, '#/not');
    // A value the `not` schema accepts: one it lists, or one generated from it.
    const value =
      excluded !== undefined
        ? pickFrom(excluded, pick)
        : fc.sample(valueArbitrary(notSchema), { seed: pick, numRuns: 1 })[0];
    options.push({ value, label: 'one that "not" excludes' });
  }
  if (s.const !== undefined) options.push({ value: junk, label: 'not the const' });
  return pickFrom(options, pick);
}

/** Values at the edges of a site's constraints that are still valid (exact min/max lengths, bounds and counts). */
function boundaryValue(
  site: Site,
  current: unknown,
  pick: number,
  filler: string,
): { value: unknown; repeat?: number } | undefined {
  const s = site.schema;
  if (typeof current === 'string' && s.pattern === undefined && s.format === undefined && s.enum === undefined) {
    const lengths = [s.minLength, s.maxLength].filter((n): n is number => typeof n === 'number');
    const length = pickFrom(lengths, pick);
    if (length !== undefined) return { value: filler.repeat(length) };
  }
  if (typeof current === 'number') {
    const bounds = [s.minimum, s.maximum].filter((n): n is number => typeof n === 'number');
    const edge = pickFrom(bounds, pick);
    if (edge !== undefined) return { value: edge };
  }
  if (Array.isArray(current) && current.length > 0) {
    const counts = [s.minItems, s.maxItems].filter((n): n is number => typeof n === 'number' && n > 0);
    const count = pickFrom(counts, pick);
    if (count !== undefined) return { value: current, repeat: count };
  }
  if (
    current !== null &&
    typeof current === 'object' &&
    !Array.isArray(current) &&
    typeof s.minProperties === 'number'
  ) {
    // Exactly minProperties properties: the required ones, then others as they come.
    const required = new Set((s.required as string[] | undefined) ?? []);
    const entries = Object.entries(current).sort(([a], [b]) => Number(required.has(b)) - Number(required.has(a)));
    if (required.size <= s.minProperties && entries.length >= s.minProperties) {
      return { value: Object.fromEntries(entries.slice(0, s.minProperties)) };
    }
  }
  return undefined;
}

/**
 * Applies a mutation to a valid value of `schema`. Returns undefined when the mutation has no
 * target in this value (no required property to remove, no string to grow...): the caller then
 * uses another one.
 */
export function applyMutation(value: unknown, schema: JsonSchema, m: Mutation): MutationOutcome | undefined {
  const sites = sitesOf(value, schema);
  const at = (filter: (s: Site) => boolean) => pickFrom(sites.filter(filter), m.site);
  const describe = (site: Site) => (site.path.length === 0 ? 'body' : `body.${site.path.join('.')}`);
  switch (m.op) {
    case 'wrongType': {
      const site = at(() => true);
      if (site === undefined) return undefined;
      const wrong = wrongTypedValue(site, m.values, m.pick);
      if (wrong === undefined) return undefined;
      return {
        value: setAt(value, site.path, wrong.value),
        label: `${describe(site)} as ${wrong.type}`,
      };
    }
    case 'removeRequired': {
      const site = at((s) => s.path.length > 0 && s.required);
      if (site === undefined) return undefined;
      return { value: setAt(value, site.path, undefined, true), label: `${describe(site)} removed` };
    }
    case 'addUnknown': {
      const site = at((s) => jsonTypeOf(getAt(value, s.path)) === 'object' && s.schema.additionalProperties === false);
      if (site === undefined) return undefined;
      const properties = (site.schema.properties as Record<string, unknown> | undefined) ?? {};
      const key = m.key in properties || m.key === '__proto__' ? `${m.key}_unknown` : m.key;
      const target = { ...(getAt(value, site.path) as object), [key]: m.value };
      return { value: setAt(value, site.path, target), label: `unknown ${describe(site)}.${key}` };
    }
    case 'violate': {
      const candidates = sites.flatMap((site) => {
        const v = violation(site, getAt(value, site.path), m.pick, m.junk);
        return v === undefined ? [] : [{ site, v }];
      });
      const chosen = pickFrom(candidates, m.site);
      if (chosen === undefined) return undefined;
      return {
        value: setAt(value, chosen.site.path, chosen.v.value),
        label: `${describe(chosen.site)} ${chosen.v.label}`,
        ...(chosen.v.repeat === undefined ? {} : { repeat: { path: chosen.site.path, count: chosen.v.repeat } }),
      };
    }
    case 'boundary': {
      const candidates = sites.flatMap((site) => {
        const v = boundaryValue(site, getAt(value, site.path), m.pick, m.filler);
        return v === undefined ? [] : [{ site, v }];
      });
      const chosen = pickFrom(candidates, m.site);
      if (chosen === undefined) return undefined;
      return {
        value: setAt(value, chosen.site.path, chosen.v.value),
        label: `${describe(chosen.site)} at a bound`,
        ...(chosen.v.repeat === undefined ? {} : { repeat: { path: chosen.site.path, count: chosen.v.repeat } }),
      };
    }
    case 'oddUnicode': {
      const site = at((s) => typeof getAt(value, s.path) === 'string');
      if (site === undefined) return undefined;
      const current = getAt(value, site.path) as string;
      const position = m.position % (current.length + 1);
      const next = m.replace ? m.text : current.slice(0, position) + m.text + current.slice(position);
      return { value: setAt(value, site.path, next), label: `${describe(site)} with odd Unicode` };
    }
    case 'hugeString': {
      const site = at((s) => typeof getAt(value, s.path) === 'string');
      if (site === undefined) return undefined;
      return {
        value: setAt(value, site.path, ''),
        label: `${describe(site)} grown to a ${m.targetBytes}-byte body`,
        fill: { path: site.path, unit: m.unit, targetBytes: m.targetBytes },
      };
    }
  }
}

/**
 * The JSON text of `value` with `fill.path` grown (from the unit, then ASCII padding) so that the
 * whole text is `fill.targetBytes` bytes of UTF-8, or as close above as the rest of the value allows.
 */
export function jsonWithFill(
  value: unknown,
  fill: MutationOutcome['fill'],
  repeat?: MutationOutcome['repeat'],
): string {
  let v = value;
  if (repeat !== undefined) {
    const list = getAt(v, repeat.path) as unknown[];
    v = setAt(
      v,
      repeat.path,
      Array.from({ length: repeat.count }, () => list[0] ?? 'x'),
    );
  }
  if (fill === undefined) return JSON.stringify(v);
  const base = Buffer.byteLength(JSON.stringify(setAt(v, fill.path, '')));
  const unitBytes = Buffer.byteLength(JSON.stringify(fill.unit)) - 2;
  const need = Math.max(0, fill.targetBytes - base);
  const units = Math.floor(need / unitBytes);
  const filler = fill.unit.repeat(units) + 'a'.repeat(need - units * unitBytes);
  return JSON.stringify(setAt(v, fill.path, filler));
}

// ---------------------------------------------------------------------------------------------
// Operations.

export interface ParameterModel {
  name: string;
  in: 'query' | 'header' | 'cookie' | 'path';
  required: boolean;
  schema: JsonSchema;
  /** Where the parameter's schema is in openapi.yaml (for validating generated values). */
  pointer: string;
}

export interface OperationModel {
  id: OperationId;
  method: string;
  /** The path as written in openapi.yaml (`/api/users/{id}`). */
  specPath: string;
  /** The path as Fastify registers it (`/api/users/:id`), as contract-check reports routes. */
  routePath: string;
  /** A credential is required (declared, without an anonymous alternative). */
  secured: boolean;
  /** An access token is optional (`[{bearerAuth: []}, {}]`), and one that is sent must verify. */
  optionalToken: boolean;
  parameters: ParameterModel[];
  body: { required: boolean; schema: JsonSchema; pointer: string } | undefined;
  /** x-body-limit, or undefined for an operation without a body. */
  bodyLimit: number | undefined;
  /** The statuses the operation declares. */
  statuses: number[];
}

const escapePointer = (s: string) => s.replaceAll('~', '~0').replaceAll('/', '~1');

/**
 * An operation of generated/contract.ts as openapi.yaml describes it. Throws (the operation has
 * no generator) when the spec and the generated list disagree or the operation uses something the
 * converter cannot generate: a request content type other than application/json, an object-valued
 * parameter, or an unsupported schema keyword.
 */
export function operationModel(id: OperationId): OperationModel {
  const entry = operations[id];
  const method = entry.method.toLowerCase();
  const opPointer = `#/paths/${escapePointer(entry.path)}/${method}`;
  const op = specAt(opPointer) as Record<string, unknown>;
  if (op.operationId !== id) throw new UnsupportedSchemaError(`${opPointer} is ${String(op.operationId)}, not ${id}`);

  const pathItem = specAt(`#/paths/${escapePointer(entry.path)}`) as Record<string, unknown>;
  const rawParameters = [
    ...((pathItem.parameters as JsonSchema[] | undefined) ?? []).map((p, i) => ({
      p,
      at: `#/paths/${escapePointer(entry.path)}/parameters/${i}`,
    })),
    ...((op.parameters as JsonSchema[] | undefined) ?? []).map((p, i) => ({ p, at: `${opPointer}/parameters/${i}` })),
  ];
  const parameters: ParameterModel[] = rawParameters.map(({ p, at }) => {
    const pointer = typeof p.$ref === 'string' ? p.$ref : at;
    const param = (typeof p.$ref === 'string' ? specAt(p.$ref) : p) as Record<string, unknown>;
    const location = param.in as ParameterModel['in'];
    if (!['query', 'header', 'cookie', 'path'].includes(location)) {
      throw new UnsupportedSchemaError(`${pointer}: parameters in "${String(location)}" have no generator`);
    }
    if (param.schema === undefined) throw new UnsupportedSchemaError(`${pointer}: a parameter without a schema`);
    const schema = param.schema as JsonSchema;
    if (allowedTypes(schema, pointer).has('object')) {
      throw new UnsupportedSchemaError(`${pointer}: object-valued parameters have no generator`);
    }
    // Checks every keyword of the schema now, so that an unsupported one fails here.
    valueArbitrary(schema, {}, `${pointer}/schema`);
    return {
      name: String(param.name),
      in: location,
      required: param.required === true || location === 'path',
      schema,
      pointer: `${pointer}/schema`,
    };
  });

  let body: OperationModel['body'];
  if (op.requestBody !== undefined) {
    const requestBody = op.requestBody as Record<string, unknown>;
    const at = typeof requestBody.$ref === 'string' ? requestBody.$ref : `${opPointer}/requestBody`;
    const rb = (typeof requestBody.$ref === 'string' ? specAt(requestBody.$ref) : requestBody) as Record<
      string,
      unknown
    >;
    const content = (rb.content as Record<string, { schema?: JsonSchema }> | undefined) ?? {};
    const types = Object.keys(content);
    if (types.length !== 1 || types[0] !== 'application/json' || content['application/json']?.schema === undefined) {
      throw new UnsupportedSchemaError(
        `${at}: only an application/json body with a schema has a generator (got ${types.join(', ')})`,
      );
    }
    const schema = content['application/json'].schema;
    valueArbitrary(schema, {}, `${at}/content/application~1json/schema`);
    body = { required: rb.required === true, schema, pointer: `${at}/content/application~1json/schema` };
  }

  const security = (op.security ?? specDocument.security ?? []) as Array<Record<string, unknown>>;
  const secured = security.length > 0 && !security.some((requirement) => Object.keys(requirement).length === 0);
  const optionalToken =
    !secured &&
    security.some((requirement) => 'bearerAuth' in requirement) &&
    security.some((requirement) => Object.keys(requirement).length === 0);
  const bodyLimit = typeof op['x-body-limit'] === 'number' ? op['x-body-limit'] : undefined;
  const mismatches = [
    secured !== entry.secured && `secured: spec ${secured}, contract ${entry.secured}`,
    (body?.required ?? false) !== entry.bodyRequired &&
      `bodyRequired: spec ${body?.required}, contract ${entry.bodyRequired}`,
    (bodyLimit ?? null) !== entry.bodyLimit && `bodyLimit: spec ${bodyLimit}, contract ${entry.bodyLimit}`,
    body !== undefined && bodyLimit === undefined && 'an operation with a body has no x-body-limit',
  ].filter(Boolean);
  if (mismatches.length > 0) {
    throw new UnsupportedSchemaError(
      `${id}: openapi.yaml and generated/contract.ts disagree (${mismatches.join('; ')}); run npm run generate`,
    );
  }
  return {
    id,
    method: entry.method,
    specPath: entry.path,
    routePath: entry.path.replace(/\{([^}]+)\}/g, ':$1'),
    secured,
    optionalToken,
    parameters,
    body,
    bodyLimit,
    statuses: Object.keys(op.responses as object).map(Number),
  };
}

/** A parameter value as it travels: strings as they are, numbers and booleans written out, arrays repeated. */
export function parameterStrings(value: unknown): string[] {
  if (Array.isArray(value)) return value.flatMap(parameterStrings);
  if (value === null) return ['null'];
  return [String(value)];
}
