// The requests of the fuzz test: a compact description of one case (what fast-check generates,
// shrinks and prints), the arbitraries that produce valid and mutated parameters, bodies, headers
// and raw-socket variants for an operation of openapi.yaml, and the bytes each case puts on the wire.
// Large things (huge strings, long arrays, deep nesting, oversized headers) are described by their
// size and only built when the request is sent, so that counterexamples stay readable.
import fc from 'fast-check';
import { MAX_HEADER_BYTES, MAX_HEADER_LINES } from '../../src/http-server.ts';
import type { AuthSpec } from './fuzz-auth.ts';
import {
  applyMutation,
  type Hints,
  jsonWithFill,
  type MutationOutcome,
  mutationArbitrary,
  type OperationModel,
  oddUnicodeArbitrary,
  type ParameterModel,
  type Path,
  parameterStrings,
  setAt,
  sitesOf,
  typedValuesArbitrary,
  valueArbitrary,
} from './spec-arbitraries.ts';

/** The second Authorization header of a duplicateAuthorization case whose second spec is "none". */
export const SECOND_AUTHORIZATION_FALLBACK = 'Bearer x';

/** A value taken from the app's state when the request is sent (a real address, token, code...). */
export class Fixture {
  readonly kind: FixtureKind;
  constructor(kind: FixtureKind) {
    this.kind = kind;
  }
  [fc.toStringMethod]() {
    return `fixture(${this.kind})`;
  }
  toJSON() {
    return `fixture(${this.kind})`;
  }
}
export type FixtureKind =
  | 'idToken'
  | 'email'
  | 'refreshToken'
  | 'webCookie'
  | 'webCsrf'
  | 'otpCode'
  | 'otpEmail'
  | 'otpToken'
  /** The id of a realtime channel the app has (or had: it may have been deleted since). */
  | 'channelId'
  /** A channel a message was published on, and that message's id (of the same message, for one case). */
  | 'messageChannel'
  | 'messageId'
  /** The user id (sub) of the case's own Bearer token. */
  | 'callerId';
export type FixtureResolver = (kind: FixtureKind) => string;

/** `value` with every Fixture replaced by what `resolve` gives for it. */
export function resolveFixtures(value: unknown, resolve: FixtureResolver): unknown {
  if (value instanceof Fixture) return resolve(value.kind);
  if (Array.isArray(value)) return value.map((v) => resolveFixtures(v, resolve));
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, resolveFixtures(v, resolve)]));
  }
  return value;
}

export type BodySpec =
  | { kind: 'none' }
  | { kind: 'json'; value: unknown; fill?: MutationOutcome['fill']; repeat?: MutationOutcome['repeat'] }
  /** Text sent as it is (invalid JSON and its near misses). */
  | { kind: 'text'; text: string }
  /** A JSON body whose string at `path` holds raw bytes (invalid UTF-8 among them). */
  | { kind: 'bytes'; value: unknown; path: Path; bytes: number[] }
  /** `open` repeated `depth` times, then `inner`, then `close` repeated. */
  | { kind: 'nested'; depth: number; open: string; inner: string; close: string }
  /** A JSON body with such a nesting (around 1) at `path`, inside one of its fields. */
  | { kind: 'nestedAt'; value: unknown; path: Path; depth: number; open: string; close: string };

export interface ParamEntry {
  in: ParameterModel['in'];
  name: string;
  /** One value per occurrence: strings, or Fixtures. */
  values: unknown[];
  /** Query values already percent-encoded (or deliberately not). */
  raw?: boolean;
}

/** How a case deviates from a plain HTTP/1.1 request; these go over a real socket. */
export type SocketVariant =
  | { kind: 'plain' }
  | { kind: 'duplicateAuthorization'; second: AuthSpec }
  | { kind: 'duplicateContentType'; second: string }
  | { kind: 'duplicateHeader'; name: string; value: string }
  | { kind: 'conflictingContentLength'; delta: number }
  | { kind: 'contentLengthAndChunked' }
  | { kind: 'chunked'; pieces: number }
  | { kind: 'badChunk'; size: string }
  | { kind: 'oversizedHeader'; bytes: number }
  | { kind: 'manyHeaders'; count: number }
  | { kind: 'longUrl'; bytes: number }
  | { kind: 'controlCharInHeader'; char: number }
  | { kind: 'badHeaderName'; name: string };

export type Dimension = 'valid' | 'body' | 'params' | 'auth' | 'headers' | 'socket' | 'combined';

export interface FuzzCase {
  /** Which app under test (they differ in configuration). */
  target: number;
  /** Chooses among the fixtures of the app (tokens, addresses, codes) when the request is sent. */
  pick: number;
  dimension: Dimension;
  labels: string[];
  params: ParamEntry[];
  body: BodySpec;
  /** null: no Content-Type header. */
  contentType: string | null;
  auth: AuthSpec;
  extraHeaders: Array<[string, string]>;
  socket: SocketVariant | null;
}

// ---------------------------------------------------------------------------------------------
// Parameters.

/** Valid values for the parameters of an operation: required ones always, optional ones now and then. */
export function validParametersArbitrary(op: OperationModel, hints: Record<string, fc.Arbitrary<unknown>>) {
  const entries = op.parameters.map((p) => {
    const own = valueArbitrary(p.schema, {}, p.pointer);
    // A hint for this operation's parameter (`operationId:name`), else for the name anywhere.
    const hint = hints[`${op.id}:${p.name}`] ?? hints[p.name];
    const value = hint === undefined ? own : fc.oneof({ weight: 1, arbitrary: own }, { weight: 2, arbitrary: hint });
    const entry = value.map((v): ParamEntry => ({ in: p.in, name: p.name, values: [v] }));
    return p.required
      ? entry.map((e) => [e])
      : fc.option(entry, { freq: 2, nil: undefined }).map((e) => (e ? [e] : []));
  });
  return fc.tuple(...entries).map((lists) => lists.flat());
}

export type ParamMutation =
  | {
      op: 'violate';
      index: number;
      mutation: ReturnType<typeof mutationArbitrary> extends fc.Arbitrary<infer M> ? M : never;
    }
  | { op: 'odd'; index: number; text: string }
  | { op: 'huge'; index: number; length: number }
  | { op: 'empty'; index: number }
  | { op: 'repeat'; index: number; other: string }
  | { op: 'drop'; index: number }
  | { op: 'unknown'; location: 'query' | 'header' | 'cookie'; name: string; value: string }
  | { op: 'rawPercent'; index: number; raw: string };

export function parameterMutationArbitrary(): fc.Arbitrary<ParamMutation> {
  const index = fc.nat();
  return fc.oneof(
    {
      weight: 3,
      arbitrary: fc.record({ op: fc.constant('violate' as const), index, mutation: mutationArbitrary(256) }),
    },
    { weight: 2, arbitrary: fc.record({ op: fc.constant('odd' as const), index, text: oddUnicodeArbitrary }) },
    {
      weight: 1,
      arbitrary: fc.record({ op: fc.constant('huge' as const), index, length: fc.integer({ min: 257, max: 40_000 }) }),
    },
    { weight: 1, arbitrary: fc.record({ op: fc.constant('empty' as const), index }) },
    {
      weight: 2,
      arbitrary: fc.record({ op: fc.constant('repeat' as const), index, other: fc.string({ maxLength: 8 }) }),
    },
    { weight: 1, arbitrary: fc.record({ op: fc.constant('drop' as const), index }) },
    {
      weight: 1,
      arbitrary: fc.record({
        op: fc.constant('unknown' as const),
        location: fc.constantFrom('query' as const, 'header' as const, 'cookie' as const),
        name: fc.oneof(
          fc.stringMatching(/^[a-z][a-z0-9_-]{0,15}$/),
          fc.constantFrom('__proto__', 'constructor', 'role', 'admin', 'client_type[]', 'limit[0]', 'a.b', 'offset '),
        ),
        value: fc.string({ maxLength: 12 }),
      }),
    },
    {
      weight: 2,
      arbitrary: fc.record({
        op: fc.constant('rawPercent' as const),
        index,
        raw: fc.constantFrom(
          '%',
          '%%',
          '%zz',
          '%G1',
          '%00',
          '%C0%80',
          '%ED%A0%80',
          '%FF%FE',
          '%E2%82',
          'web%00',
          'w%65b',
          '%2e',
          '+',
          '%20web',
          'web#x',
        ),
      }),
    },
  );
}

/**
 * Applies a parameter mutation; `schemaValid` says whether every parameter value is still valid
 * by its schema (undefined when that cannot be known without the server's decoding).
 */
export function applyParameterMutation(
  op: OperationModel,
  entries: ParamEntry[],
  m: ParamMutation,
): { entries: ParamEntry[]; label: string; schemaValid: boolean | undefined } {
  if (m.op === 'unknown') {
    const name = op.parameters.some((p) => p.name.toLowerCase() === m.name.toLowerCase()) ? `${m.name}_x` : m.name;
    return {
      entries: [...entries, { in: m.location, name, values: [m.value] }],
      label: `unknown ${m.location} parameter ${name}`,
      schemaValid: true,
    };
  }
  const param = op.parameters[m.index % Math.max(1, op.parameters.length)];
  if (param === undefined) {
    return {
      entries: [...entries, { in: 'query', name: 'unexpected', values: ['1'] }],
      label: 'unknown query parameter',
      schemaValid: true,
    };
  }
  const others = entries.filter((e) => !(e.in === param.in && e.name === param.name));
  const current = entries.find((e) => e.in === param.in && e.name === param.name)?.values[0];
  const base = typeof current === 'string' ? current : 'x';
  const set = (values: unknown[], extra: Partial<ParamEntry> = {}) => [
    ...others,
    { in: param.in, name: param.name, values, ...extra },
  ];
  const where = `${param.in} ${param.name}`;
  switch (m.op) {
    case 'violate': {
      const outcome = applyMutation(base, param.schema, m.mutation);
      if (outcome === undefined || outcome.fill !== undefined || typeof outcome.value !== 'string') {
        return { entries: set([`${base}\u0000`]), label: `${where} with NUL`, schemaValid: undefined };
      }
      return {
        entries: set([outcome.value]),
        label: `${where}: ${outcome.label.replace(/^body/, 'value')}`,
        schemaValid: undefined,
      };
    }
    case 'odd':
      return { entries: set([m.text]), label: `${where} with odd Unicode`, schemaValid: undefined };
    case 'huge':
      return {
        entries: set(['9'.repeat(m.length)]),
        label: `${where} of ${m.length} characters`,
        schemaValid: undefined,
      };
    case 'empty':
      return { entries: set(['']), label: `${where} empty`, schemaValid: undefined };
    case 'repeat':
      return {
        entries: set([base, m.other]),
        label: `${where} given twice`,
        // A repeated query parameter arrives as an array, which no string schema accepts.
        schemaValid: param.in === 'query' ? false : undefined,
      };
    case 'drop':
      return { entries: others, label: `${where} left out`, schemaValid: !param.required };
    case 'rawPercent':
      return { entries: set([m.raw], { raw: true }), label: `${where} = ${m.raw} (raw)`, schemaValid: undefined };
  }
}

// ---------------------------------------------------------------------------------------------
// Bodies.

/** Content types the contract does not accept, near misses of application/json among them. */
export const WRONG_CONTENT_TYPES = [
  'text/plain',
  'text/plain; charset=utf-8',
  'application/x-www-form-urlencoded',
  'multipart/form-data; boundary=x',
  'application/xml',
  'text/json',
  'application/jsonx',
  'application/json-patch+json',
  'application/vnd.api+json',
  'application/octet-stream',
  'application',
  'json',
  '*/*',
  'application/*',
  '',
  ' ',
  ';',
  'application/json;',
  'application/json; charset=utf-16',
  'application/json; charset=latin1',
  'application/json; charset="utf-8"',
  'APPLICATION/JSON',
  'application/JSON; charset=UTF-8',
  'application/json, text/plain',
  'application/json\tx',
  `application/json; x=${'y'.repeat(2000)}`,
];

/** Text that is not JSON, or is JSON of an unexpected shape, built around a valid body. */
function invalidJsonArbitrary(validText: fc.Arbitrary<string>): fc.Arbitrary<{ text: string; label: string }> {
  return fc.oneof(
    validText.chain((t) =>
      fc
        .integer({ min: 0, max: Math.max(0, t.length - 1) })
        .map((n) => ({ text: t.slice(0, n), label: 'truncated JSON' })),
    ),
    validText.map((t) => ({ text: `${t.slice(0, -1)},}`, label: 'trailing comma' })),
    validText.map((t) => ({ text: t.replaceAll('"', "'"), label: 'single quotes' })),
    validText.map((t) => ({ text: `\ufeff${t}`, label: 'byte-order mark' })),
    validText.map((t) => ({ text: `${t}${t}`, label: 'two documents' })),
    validText.map((t) => ({ text: `/* c */${t}`, label: 'comment' })),
    validText.map((t) => ({ text: ` \n\t${t}\r\n `, label: 'surrounding whitespace' })),
    validText.map((t) => ({ text: t.replace(/^\{/, '{"__proto__":{"isAdmin":true},'), label: '__proto__ key' })),
    validText.map((t) => ({
      text: t.replace(/^\{/, '{"constructor":{"prototype":{"isAdmin":true}},'),
      label: 'constructor key',
    })),
    validText.map((t) => ({ text: t.replace(/^\{("[^"]+":)/, '{$1null,$1'), label: 'duplicate key' })),
    // No body for an operation whose body is optional, a missing one where it is required.
    fc.constant({ text: '', label: 'empty body' }),
    fc
      .constantFrom(
        ' ',
        '{',
        '}',
        '[',
        '{"a":}',
        '{"a":1,,}',
        'NaN',
        'Infinity',
        '-Infinity',
        'undefined',
        "{'a':1}",
        '{a:1}',
        '{"a":1e999999}',
        '{"a":-0}',
        '{"a":0x10}',
        '{"a":"\\x41"}',
        '{"a":"\\u12"}',
        '{"a":"\\ud800"}',
        '{"a":"\u0001"}',
        '{"a":"line\nbreak"}',
        '"\\u0000"',
        '\u0000',
      )
      .map((text) => ({ text, label: 'invalid JSON' })),
    fc.string({ unit: 'binary', maxLength: 40 }).map((text) => ({ text, label: 'random text' })),
  );
}

/** A valid body for the operation (or none, where the body is optional or there is none). */
export function validBodyArbitrary(
  op: OperationModel,
  hints: Hints,
): fc.Arbitrary<{ body: BodySpec; contentType: string | null }> {
  if (op.body === undefined) return fc.constant({ body: { kind: 'none' as const }, contentType: null });
  const json = valueArbitrary(op.body.schema, hints, op.body.pointer).map((value) => ({
    body: { kind: 'json' as const, value } as BodySpec,
    contentType: 'application/json' as string | null,
  }));
  const charset = json.map((b) => ({ ...b, contentType: 'application/json; charset=utf-8' }));
  if (op.body.required) return fc.oneof({ weight: 6, arbitrary: json }, { weight: 1, arbitrary: charset });
  const none = fc.constant({ body: { kind: 'none' as const } as BodySpec, contentType: null });
  return fc.oneof({ weight: 5, arbitrary: json }, { weight: 1, arbitrary: charset }, { weight: 2, arbitrary: none });
}

/** Bodies that break the contract one way each (or, for an operation without a body, bodies it should not get). */
export function mutatedBodyArbitrary(
  op: OperationModel,
  hints: Hints,
): fc.Arbitrary<{ body: BodySpec; contentType: string | null; label: string }> {
  const wrongType = fc.constantFrom(...WRONG_CONTENT_TYPES);
  if (op.body === undefined) {
    // Operations without a body: a body anyway, of any type, up to and over the default limit.
    return fc.oneof(
      fc.jsonValue({ maxDepth: 2 }).map((value) => ({
        body: { kind: 'json' as const, value } as BodySpec,
        contentType: 'application/json',
        label: 'unexpected JSON body',
      })),
      fc.tuple(fc.string({ maxLength: 40 }), fc.oneof(wrongType, fc.constant(null))).map(([text, contentType]) => ({
        body: { kind: 'text' as const, text } as BodySpec,
        contentType,
        label: `unexpected body as ${contentType ?? 'no content type'}`,
      })),
      fc.integer({ min: 16 * 1024 - 8, max: 20 * 1024 }).map((n) => ({
        body: {
          kind: 'json' as const,
          value: { pad: '' },
          fill: { path: ['pad'], unit: 'a', targetBytes: n },
        } as BodySpec,
        contentType: 'application/json',
        label: `unexpected ${n}-byte body`,
      })),
    );
  }
  const limit = op.bodyLimit ?? 16 * 1024;
  const valid = valueArbitrary(op.body.schema, hints, op.body.pointer);
  const schema = op.body.schema;
  const schemaMutation = fc.tuple(valid, mutationArbitrary(limit), typedValuesArbitrary).map(([value, m, typed]) => {
    const outcome = applyMutation(value, schema, m) ?? {
      value: typed.array,
      label: `body as an array (the ${m.op} mutation had no target)`,
    };
    const body: BodySpec = {
      kind: 'json',
      value: outcome.value,
      ...(outcome.fill ? { fill: outcome.fill } : {}),
      ...(outcome.repeat ? { repeat: outcome.repeat } : {}),
    };
    return { body, contentType: 'application/json' as string | null, label: outcome.label };
  });
  const validText = valid.map((v) => JSON.stringify(v));
  const invalidJson = invalidJsonArbitrary(validText).map(({ text, label }) => ({
    body: { kind: 'text' as const, text } as BodySpec,
    contentType: 'application/json' as string | null,
    label,
  }));
  const wrongContentType = fc
    .tuple(valid, fc.oneof({ weight: 4, arbitrary: wrongType }, { weight: 1, arbitrary: fc.constant(null) }))
    .map(([value, contentType]) => ({
      body: { kind: 'json' as const, value } as BodySpec,
      contentType,
      label: `valid JSON as ${contentType === null ? 'no content type' : JSON.stringify(contentType)}`,
    }));
  const rootOfOtherType = typedValuesArbitrary.chain((typed) =>
    fc.constantFrom('string', 'integer', 'number', 'boolean', 'null', 'array').map((type) => ({
      body: { kind: 'json' as const, value: typed[type as keyof typeof typed] } as BodySpec,
      contentType: 'application/json' as string | null,
      label: `body is ${type}`,
    })),
  );
  const invalidUtf8 = fc
    .tuple(
      valid,
      fc.nat(),
      fc.constantFrom(
        [0xff],
        [0xfe, 0xff],
        [0xc0, 0x80],
        [0xed, 0xa0, 0x80],
        [0xe2, 0x82],
        [0xf8, 0x88, 0x80, 0x80, 0x80],
        [0x80],
        [0xf4, 0x90, 0x80, 0x80],
      ),
    )
    .map(([value, site, bytes]) => {
      const strings = sitesOf(value, schema).filter((s) => typeof getValue(value, s.path) === 'string');
      const target = strings[site % Math.max(1, strings.length)];
      const body: BodySpec =
        target === undefined
          ? { kind: 'text', text: 'x' }
          : { kind: 'bytes', value, path: target.path, bytes: [...bytes] };
      return { body, contentType: 'application/json' as string | null, label: 'invalid UTF-8 in a string' };
    });
  const nested = fc
    .tuple(
      fc.integer({ min: 1, max: Math.min(Math.floor(limit / 2), 200_000) }),
      fc.constantFrom(['[', '1', ']'], ['{"a":', '1', '}'], ['{"a":[', '1', ']}']),
    )
    .map(([depth, [open = '[', inner = '1', close = ']']]) => ({
      body: {
        kind: 'nested' as const,
        depth: Math.max(1, Math.floor(depth / open.length)),
        open,
        inner,
        close,
      } as BodySpec,
      contentType: 'application/json' as string | null,
      label: 'deeply nested JSON',
    }));
  // Deep nesting inside a field: under a new key of an object (free-form ones such as a realtime
  // payload or a profile take it), or in place of any other value. Depths around MAX_JSON_DEPTH
  // and far past it.
  const nestedInField = fc
    .tuple(
      valid,
      fc.nat(),
      fc.oneof(fc.integer({ min: 1, max: 40 }), fc.integer({ min: 41, max: 6_000 })),
      fc.constantFrom(['[', ']'], ['{"a":', '}'], ['[{"a":', '}]']),
    )
    .map(([value, site, depth, [open = '[', close = ']']]) => {
      const sites = sitesOf(value, schema);
      const target = sites[site % sites.length]?.path ?? [];
      const at = getValue(value, target);
      const path = at !== null && typeof at === 'object' && !Array.isArray(at) ? [...target, 'deep'] : target;
      return {
        body: { kind: 'nestedAt' as const, value, path, depth, open, close } as BodySpec,
        contentType: 'application/json' as string | null,
        label: `${depth} levels of ${open} at ${path.join('.') || 'the root'}`,
      };
    });
  const missing = fc.constant({
    body: { kind: 'none' as const } as BodySpec,
    contentType: 'application/json' as string | null,
    label: 'no body',
  });
  return fc.oneof(
    { weight: 12, arbitrary: schemaMutation },
    { weight: 3, arbitrary: invalidJson },
    { weight: 3, arbitrary: wrongContentType },
    { weight: 1, arbitrary: rootOfOtherType },
    { weight: 1, arbitrary: invalidUtf8 },
    { weight: 1, arbitrary: nested },
    { weight: 2, arbitrary: nestedInField },
    { weight: 1, arbitrary: missing },
  );
}

function getValue(root: unknown, path: Path): unknown {
  let node = root;
  for (const part of path) node = (node as Record<string | number, unknown>)[part];
  return node;
}

// ---------------------------------------------------------------------------------------------
// Headers.

/** Extra headers that no operation declares, with values a client might (mis)send. */
export function extraHeadersArbitrary(): fc.Arbitrary<Array<[string, string]>> {
  const junk = fc.oneof(fc.string({ maxLength: 30 }), oddUnicodeArbitrary);
  const header = fc.oneof(
    fc.tuple(
      fc.constant('user-agent'),
      fc.oneof(
        junk,
        fc.integer({ min: 512, max: 12_000 }).map((n) => 'M'.repeat(n)),
      ),
    ),
    fc.tuple(
      fc.constant('x-request-id'),
      fc.oneof(junk, fc.constantFrom('a'.repeat(129), 'ok-id', '../x', '<script>')),
    ),
    fc.tuple(
      fc.constant('x-forwarded-for'),
      fc.oneof(junk, fc.constantFrom('1.2.3.4', '::1, 10.0.0.1', 'unknown', '999.1.1.1')),
    ),
    fc.tuple(
      fc.constant('accept'),
      fc.constantFrom('application/xml', 'text/html', '*/*;q=0', 'application/json;q=0', ''),
    ),
    fc.tuple(fc.constant('accept-encoding'), fc.constantFrom('gzip', 'br, gzip, deflate', 'identity;q=0', '*')),
    fc.tuple(fc.constant('content-encoding'), fc.constantFrom('gzip', 'br', 'deflate', 'identity', 'x-unknown')),
    fc.tuple(fc.constant('expect'), fc.constantFrom('100-continue', 'x')),
    fc.tuple(
      fc.constant('cookie'),
      fc.oneof(
        junk,
        fc.constantFrom('refresh_token=a; refresh_token=b', 'refresh_token=', '=x', 'a=%zz', `big=${'c'.repeat(8000)}`),
      ),
    ),
    fc.tuple(fc.constant('x-csrf-token'), junk),
    fc.tuple(fc.constant('origin'), fc.constantFrom('https://evil.example', 'null', '')),
    fc.tuple(fc.constant('x-http-method-override'), fc.constantFrom('DELETE', 'PUT', 'GET')),
    fc.tuple(fc.constant('transfer-encoding'), fc.constantFrom('identity', 'gzip')),
    fc.tuple(
      fc.string({ minLength: 1, maxLength: 20 }).map((s) => `x-${s.replace(/[^a-z0-9-]/gi, '') || 'a'}`),
      junk,
    ),
  );
  return fc.array(header, { minLength: 1, maxLength: 3 });
}

/** A header value as it reaches Node from the wire: UTF-8 bytes read as Latin-1, trimmed, without control characters. */
export function wireHeaderValue(value: string): string {
  return Buffer.from(value.toWellFormed(), 'utf8')
    .toString('latin1')
    .split('')
    .filter((ch) => {
      const code = ch.charCodeAt(0);
      return code === 0x09 || (code >= 0x20 && code !== 0x7f);
    })
    .join('')
    .trim();
}

/** A cookie value as sent: a header value without the characters that would end it or start another cookie. */
export const wireCookieValue = (value: string) => wireHeaderValue(value).replace(/[;,\s]/g, '');

/** A query value as the server decodes it (lone surrogates cannot be percent-encoded: they travel as U+FFFD). */
export const wireQueryValue = (value: string) => value.toWellFormed();

/** How a parameter's value reaches the server, by where it travels (path values are percent-encoded, as query values are). */
export const wireParameterValue = (location: string): ((value: string) => string) =>
  location === 'query' || location === 'path'
    ? wireQueryValue
    : location === 'cookie'
      ? wireCookieValue
      : wireHeaderValue;

// ---------------------------------------------------------------------------------------------
// Raw-socket variants.

export function socketVariantArbitrary(failingAuth: fc.Arbitrary<AuthSpec>, passingAuth: fc.Arbitrary<AuthSpec>) {
  return fc.oneof(
    { weight: 2, arbitrary: fc.constant<SocketVariant>({ kind: 'plain' }) },
    {
      weight: 3,
      arbitrary: fc
        .oneof(failingAuth, passingAuth)
        .map((second): SocketVariant => ({ kind: 'duplicateAuthorization', second })),
    },
    {
      weight: 2,
      arbitrary: fc
        .constantFrom('application/json', 'text/plain', 'application/xml', 'application/json; charset=utf-8')
        .map((second): SocketVariant => ({ kind: 'duplicateContentType', second })),
    },
    {
      weight: 1,
      arbitrary: fc
        .tuple(
          fc.constantFrom('x-csrf-token', 'cookie', 'user-agent', 'x-request-id', 'host', 'accept'),
          fc.string({ maxLength: 20 }),
        )
        .map(([name, value]): SocketVariant => ({ kind: 'duplicateHeader', name, value })),
    },
    {
      weight: 2,
      arbitrary: fc
        .oneof(fc.constantFrom(-1, 1, 0), fc.integer({ min: -50, max: 50 }))
        .map((delta): SocketVariant => ({ kind: 'conflictingContentLength', delta })),
    },
    { weight: 1, arbitrary: fc.constant<SocketVariant>({ kind: 'contentLengthAndChunked' }) },
    {
      weight: 1,
      arbitrary: fc.integer({ min: 1, max: 5 }).map((pieces): SocketVariant => ({ kind: 'chunked', pieces })),
    },
    {
      weight: 1,
      arbitrary: fc
        .constantFrom('zz', '-1', '', '1;;', 'fffffffffffffffff', ' 2')
        .map((size): SocketVariant => ({ kind: 'badChunk', size })),
    },
    {
      weight: 3,
      arbitrary: fc
        .oneof(
          fc.integer({ min: 16 * 1024 - 600, max: 16 * 1024 + 600 }),
          fc.integer({ min: 17 * 1024, max: 64 * 1024 }),
        )
        .map((bytes): SocketVariant => ({ kind: 'oversizedHeader', bytes })),
    },
    {
      weight: 1,
      arbitrary: fc.integer({ min: 100, max: 3000 }).map((count): SocketVariant => ({ kind: 'manyHeaders', count })),
    },
    {
      weight: 1,
      arbitrary: fc
        .integer({ min: 16 * 1024 - 300, max: 24 * 1024 })
        .map((bytes): SocketVariant => ({ kind: 'longUrl', bytes })),
    },
    {
      weight: 1,
      arbitrary: fc
        .constantFrom(0x00, 0x01, 0x0b, 0x0c, 0x1b, 0x7f)
        .map((char): SocketVariant => ({ kind: 'controlCharInHeader', char })),
    },
    {
      weight: 1,
      arbitrary: fc
        .constantFrom('Bad Header', 'x(y)', ' x', '', 'h\u00e9', '{}', 'x"y', 'a/b')
        .map((name): SocketVariant => ({ kind: 'badHeaderName', name })),
    },
  );
}

// ---------------------------------------------------------------------------------------------
// The wire.

export interface WireRequest {
  method: string;
  /** Path and query, encoded. */
  url: string;
  /** In order; names as sent. */
  headers: Array<[string, string]>;
  body: Buffer | undefined;
}

const encodeQuery = (s: string) => encodeURIComponent(s.toWellFormed());

/** The body's bytes, and its value when it is JSON text (before any growing). */
export function bodyBytes(body: BodySpec): Buffer | undefined {
  switch (body.kind) {
    case 'none':
      return undefined;
    case 'json':
      return Buffer.from(jsonWithFill(body.value, body.fill, body.repeat), 'utf8');
    case 'text':
      return Buffer.from(body.text, 'utf8');
    case 'bytes': {
      const marker = '\u0001MARK\u0001';
      const text = JSON.stringify(setAt(body.value, body.path, marker));
      const encodedMarker = JSON.stringify(marker).slice(1, -1);
      const at = text.indexOf(encodedMarker);
      return Buffer.concat([
        Buffer.from(text.slice(0, at), 'utf8'),
        Buffer.from(body.bytes),
        Buffer.from(text.slice(at + encodedMarker.length), 'utf8'),
      ]);
    }
    case 'nested':
      return Buffer.from(body.open.repeat(body.depth) + body.inner + body.close.repeat(body.depth), 'utf8');
    case 'nestedAt': {
      const marker = '\u0001DEEP\u0001';
      const text = JSON.stringify(setAt(body.value, body.path, marker));
      const nesting = `${body.open.repeat(body.depth)}1${body.close.repeat(body.depth)}`;
      return Buffer.from(text.replace(JSON.stringify(marker), nesting), 'utf8');
    }
  }
}

/** The request a case describes, fixtures resolved, as a client would send it (before socket variants). */
export function wireRequest(
  op: OperationModel,
  c: FuzzCase,
  resolve: FixtureResolver,
  authorization: string | undefined,
): { wire: WireRequest; body: BodySpec } {
  const params = c.params.map((p) => ({ ...p, values: p.values.map((v) => resolveFixtures(v, resolve)) }));
  let path = op.specPath;
  const query: string[] = [];
  const headers: Array<[string, string]> = [['host', 'localhost']];
  const cookies: string[] = [];
  for (const p of params) {
    const values = p.values.flatMap(parameterStrings);
    for (const value of values) {
      if (p.in === 'path') path = path.replace(`{${p.name}}`, p.raw ? value : encodeQuery(value));
      else if (p.in === 'query') query.push(`${encodeQuery(p.name)}=${p.raw ? value : encodeQuery(value)}`);
      else if (p.in === 'header') headers.push([p.name, wireHeaderValue(value)]);
      else cookies.push(`${p.name}=${wireCookieValue(value)}`);
    }
  }
  if (cookies.length > 0) headers.push(['cookie', cookies.join('; ')]);
  if (authorization !== undefined) headers.push(['authorization', wireHeaderValue(authorization)]);
  if (c.contentType !== null) headers.push(['content-type', c.contentType]);
  for (const [name, value] of c.extraHeaders) headers.push([name, wireHeaderValue(value)]);
  const body =
    c.body.kind === 'json' || c.body.kind === 'bytes' || c.body.kind === 'nestedAt'
      ? { ...c.body, value: resolveFixtures(c.body.value, resolve) }
      : c.body;
  return {
    wire: {
      method: op.method,
      url: query.length > 0 ? `${path}?${query.join('&')}` : path,
      headers,
      body: bodyBytes(body),
    },
    body,
  };
}

/** What the HTTP layer must answer for a socket variant, before any operation runs (undefined: the operation answers). */
export type LayerExpectation = 400 | 431 | undefined | 'either';

/** The raw bytes of a request with a socket variant applied, and what the HTTP layer should make of it. */
export function socketBytes(
  wire: WireRequest,
  variant: SocketVariant,
  secondAuthorization: string | undefined,
): { bytes: Buffer; layer: LayerExpectation } {
  let headers = wire.headers.filter(([name]) => name.toLowerCase() !== 'content-length');
  let url = wire.url;
  const body = wire.body ?? Buffer.alloc(0);
  let bodyPart: Buffer = body;
  let layer: LayerExpectation;
  const framing: Array<[string, string]> = wire.body === undefined ? [] : [['content-length', String(body.length)]];
  switch (variant.kind) {
    case 'plain':
      break;
    case 'duplicateAuthorization':
      headers = [...headers, ['authorization', wireHeaderValue(secondAuthorization ?? SECOND_AUTHORIZATION_FALLBACK)]];
      break;
    case 'duplicateContentType':
      headers = [...headers, ['content-type', variant.second]];
      break;
    case 'duplicateHeader':
      headers = [...headers, [variant.name, wireHeaderValue(variant.value) || 'x']];
      // A second Host header makes the request invalid HTTP/1.1 (RFC 9112 3.2).
      if (variant.name === 'host') layer = 'either';
      break;
    case 'conflictingContentLength':
      framing.splice(
        0,
        framing.length,
        ['content-length', String(body.length)],
        ['content-length', String(Math.max(0, body.length + variant.delta))],
      );
      layer = 400; // Node refuses any repeated Content-Length, equal values included
      break;
    case 'contentLengthAndChunked':
      framing.splice(0, framing.length, ['content-length', String(body.length)], ['transfer-encoding', 'chunked']);
      bodyPart = chunked(body, 1);
      layer = 400;
      break;
    case 'chunked':
      framing.splice(0, framing.length, ['transfer-encoding', 'chunked']);
      bodyPart = chunked(body, variant.pieces);
      break;
    case 'badChunk':
      framing.splice(0, framing.length, ['transfer-encoding', 'chunked']);
      bodyPart = Buffer.concat([Buffer.from(`${variant.size}\r\n`), body, Buffer.from('\r\n0\r\n\r\n')]);
      layer = 400;
      break;
    case 'oversizedHeader':
      headers = [...headers, ['x-padding', 'p'.repeat(variant.bytes)]];
      break;
    case 'manyHeaders':
      headers = [...headers, ...Array.from({ length: variant.count }, (_, i): [string, string] => [`x-h${i}`, 'v'])];
      break;
    case 'longUrl':
      url += `${url.includes('?') ? '&' : '?'}pad=${'u'.repeat(variant.bytes)}`;
      break;
    case 'controlCharInHeader':
      headers = [...headers, ['x-control', `a${String.fromCharCode(variant.char)}b`]];
      layer = 400;
      break;
    case 'badHeaderName':
      headers = [...headers, [variant.name, 'x']];
      layer = 400;
      break;
  }
  const all: Array<[string, string]> = [...headers, ...framing, ['connection', 'close']];
  const head = `${wire.method} ${url} HTTP/1.1\r\n${all.map(([n, v]) => `${n}: ${v}\r\n`).join('')}\r\n`;
  const headBytes = Buffer.from(head, 'latin1');
  // Node counts the URL and the header names and values (not the separators) against its limit
  // (measured: 431 from 16,385 such bytes); within a few bytes of it, either answer is accepted.
  const counted = url.length + all.reduce((n, [k, v]) => n + k.length + v.length, 0);
  const size: LayerExpectation =
    counted > MAX_HEADER_BYTES + 32 || all.length > MAX_HEADER_LINES
      ? 431
      : counted < MAX_HEADER_BYTES - 32
        ? undefined
        : 'either';
  if (size !== undefined) layer = layer === undefined || layer === size ? size : 'either';
  return { bytes: Buffer.concat([headBytes, bodyPart]), layer };
}

function chunked(body: Buffer, pieces: number): Buffer {
  const parts: Buffer[] = [];
  const size = Math.max(1, Math.ceil(body.length / pieces));
  for (let at = 0; at < body.length; at += size) {
    const piece = body.subarray(at, at + size);
    parts.push(Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n'));
  }
  parts.push(Buffer.from('0\r\n\r\n'));
  return Buffer.concat(parts);
}
