// The server against the spec, operation by operation. For every operation of generated/contract.ts
// (a new one is covered as soon as it is in openapi.yaml), fast-check generates requests whose path
// and query parameters and JSON body range over values the operation's schemas accept and values
// they refuse (wrong types, missing required fields, unknown fields, strings past maxLength or a
// pattern, numbers past minimum or maximum, arrays past maxItems, oneOf branches mixed, odd Unicode
// in strings, values at and past the edges of parameters, a query parameter given twice, unknown
// query parameters), from the arbitraries of the fuzzer
// (test/helpers/spec-arbitraries.ts, test/helpers/fuzz-requests.ts). The spec's verdict on each
// request is Ajv's, against the operation's own schemas in openapi.yaml (test/helpers/spec-verdict.ts);
// every request carries valid authentication, so that authentication decides nothing. Then:
//   - the spec refuses => 400 INVALID_INPUT in the Error shape, with a message naming the field;
//   - the spec accepts => no 400 INVALID_INPUT, except the semantic refusals listed below (rules no
//     schema can state), each matched by its exact message;
//   - a body over the operation's x-body-limit => 413 PAYLOAD_TOO_LARGE whatever else (the spec says so);
//   - any answer is one the spec declares (the test app's contract check turns others into a 500).
// Values that only the service's configuration or state can make acceptable (allowed redirect URLs,
// configured models and OAuth providers, the caller's own id) come from fixtures.
//
// CONFORMANCE_RUNS (default 100; a third of it for scrypt-bound operations) cases per operation;
// CONFORMANCE_SEED replays a run (the seed is printed); CONFORMANCE_ONLY=op1,op2 checks some
// operations only; CONFORMANCE_PATH (with the seed and CONFORMANCE_ONLY) replays a counterexample;
// CONFORMANCE_COLLECT=1 runs every case without stopping at the first disagreement and lists them all.
import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import type { FastifyInstance } from 'fastify';
import t, { type Test } from 'tap';
import { type OperationId, operationIds, operations } from '../generated/contract.ts';
import { buildTestApp } from './helpers/app.ts';
import { PASSWORD } from './helpers/auth.ts';
import { TestClock } from './helpers/clock.ts';
import {
  applyParameterMutation,
  type BodySpec,
  type FuzzCase,
  type ParamEntry,
  parameterMutationArbitrary,
  validParametersArbitrary,
  wireRequest,
} from './helpers/fuzz-requests.ts';
import { startSmtpCapture } from './helpers/smtp.ts';
import {
  applyMutation,
  deref,
  type JsonSchema,
  jsonWithFill,
  mutationArbitrary,
  type OperationModel,
  operationModel,
  valueArbitrary,
} from './helpers/spec-arbitraries.ts';
import { PROPERTY_MODELS, propertyAppEnv, propertyRunSettings, startOutsideParts } from './helpers/spec-properties.ts';
import {
  namesAField,
  OPEN_QUERY_OPERATIONS,
  type SentBody,
  specVerdict,
  type Verdict,
} from './helpers/spec-verdict.ts';

const { runs: RUNS, seed: SEED, only: ONLY, replayPath: REPLAY_PATH } = propertyRunSettings('CONFORMANCE', 100);
const COLLECT = process.env.CONFORMANCE_COLLECT === '1';
/** How long fast-check may spend shrinking a failure before the smallest failing case so far is reported. */
const SHRINK_BUDGET_MS = 10_000;

/**
 * Operations that run scrypt (tens of milliseconds) on a well-formed request: sign-up, sign-in and
 * the password reset (which hashes the new password whatever the token) and the password change.
 * They get a third of the cases, mostly malformed ones (answered in milliseconds).
 */
/** Operations whose valid cases may end the caller's own session (the administrator's, here). */
const SESSION_ENDING: ReadonlySet<OperationId> = new Set<OperationId>(['endSessions', 'endSession', 'endUserSessions']);

const SCRYPT_BOUND: ReadonlySet<OperationId> = new Set<OperationId>([
  'createUser',
  'createSession',
  'resetPassword',
  'changePassword',
]);

// ---------------------------------------------------------------------------------------------
// The app's configuration, and the fixtures that make valid values acceptable to it.

const ADMIN_EMAIL = 'conformance-admin@example.com';
const JWT_SECRET = `conformance-${randomBytes(24).toString('base64url')}`;
const METRICS_TOKEN = `metrics-${randomBytes(16).toString('hex')}`;
/** AUTH_REDIRECT_ALLOWLIST, and URLs it allows (redirectTo, redirect_uri). */
const REDIRECT_ORIGIN = 'https://app.example.com';
const ALLOWED_REDIRECTS = [
  'https://app.example.com/auth/callback',
  'https://app.example.com/welcome',
  'https://app.example.com/',
];
/** Models the app allows, and the sizes it knows of the ones that can shorten their vectors (dimensions). */
const MODELS = PROPERTY_MODELS;
const SHORTENABLE: Record<string, number> = { 'text-embedding-3-small': 1536, 'text-embedding-3-large': 3072 };
/** The OAuth providers of the app: an OpenID Provider under a built-in and a custom name, and GitHub's fake. */
const OAUTH_BUILT_IN = ['google', 'github'];
const OAUTH_CUSTOM = ['conformidp'];
/** The providers that issue ID tokens (GitHub is OAuth 2 only). */
const OIDC_PROVIDERS = ['google', 'conformidp'];

interface Fixtures {
  app: FastifyInstance;
  /** An administrator's live session: the Bearer token of every secured operation but changePassword. */
  adminToken: string;
  adminId: string;
  /** The app's clock. */
  clock: TestClock;
  /** A channel of the app (updateRealtimeChannel changes it). */
  channelId: string;
  resetAdminProfile(): Promise<void>;
  /** An account of its own for changePassword, its password as it is now and a live session. */
  passwordUser: { email: string; password: string; token: string };
  /** Signs the administrator in again when a case ended its session (SESSION_ENDING). */
  renewAdminIfEnded(): Promise<void>;
  /** Signs passwordUser in again (after its password changed, which ends its sessions). */
  renewPasswordUser(password: string): Promise<void>;
}

const at = <T>(list: readonly T[], pick: number): T => list[pick % list.length] as T;

/**
 * A URL the allow-list accepts: a generated one moved onto the allowed origin (its path kept), one of
 * the allowed URLs, or one of those with a query or a fragment (which the schemas allow).
 */
function allowedRedirect(generated: unknown, pick: number): string {
  const url = typeof generated === 'string' ? URL.parse(generated) : null;
  const fixed = at(ALLOWED_REDIRECTS, pick >> 2);
  switch (pick % 4) {
    case 0:
      return url === null ? fixed : `${REDIRECT_ORIGIN}${url.pathname}${url.search}`;
    case 1:
      return `${fixed}?from=conformance`;
    case 2:
      return `${fixed}#section`;
    default:
      return fixed;
  }
}

/** Valid parameters moved onto what the app's configuration accepts (providers, redirect URIs), and existing ids. */
function parameterFixtures(op: OperationModel, entries: ParamEntry[], pick: number, fixtures: Fixtures): ParamEntry[] {
  return entries.map((e) => {
    // Now and then an id that exists, so that the operation goes past its lookup.
    if (e.in === 'path' && pick % 3 === 0) {
      if ((op.id === 'getProfile' || op.id === 'getUser') && e.name === 'userId')
        return { ...e, values: [fixtures.adminId] };
      if (op.id === 'updateRealtimeChannel' && e.name === 'channelId') return { ...e, values: [fixtures.channelId] };
    }
    if (e.in === 'path' && e.name === 'provider') {
      const names =
        op.id === 'getOAuthAuthorizationUrl'
          ? OAUTH_BUILT_IN
          : op.id === 'getCustomOAuthAuthorizationUrl'
            ? OAUTH_CUSTOM
            : [...OAUTH_BUILT_IN, ...OAUTH_CUSTOM];
      return { ...e, values: [at(names, pick)] };
    }
    if (e.in === 'query' && e.name === 'redirect_uri') return { ...e, values: [allowedRedirect(e.values[0], pick)] };
    return e;
  });
}

/** A valid body moved onto what the app's configuration and state accept. */
function bodyFixtures(op: OperationModel, value: unknown, pick: number, fixtures: Fixtures): unknown {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return value;
  const body = { ...(value as Record<string, unknown>) };
  if (typeof body.redirectTo === 'string') body.redirectTo = allowedRedirect(body.redirectTo, pick);
  if (op.id === 'createEmbeddings') {
    if (typeof body.dimensions === 'number') {
      const model = at(Object.keys(SHORTENABLE), pick);
      body.model = model;
      body.dimensions = Math.min(body.dimensions, SHORTENABLE[model] as number);
    } else if (typeof body.model === 'string') body.model = at(MODELS, pick);
  }
  if (op.id === 'signInWithIdToken' && typeof body.provider === 'string') body.provider = at(OIDC_PROVIDERS, pick);
  if (op.id === 'startIdentityLink') {
    if (typeof body.provider === 'string') body.provider = at([...OAUTH_BUILT_IN, ...OAUTH_CUSTOM], pick);
    if (typeof body.redirect_uri === 'string') body.redirect_uri = allowedRedirect(body.redirect_uri, pick);
  }
  if (op.id === 'publishRealtimeMessage' && typeof body.senderId === 'string') body.senderId = fixtures.adminId;
  // Now and then the right current password, so that a change goes through.
  if (op.id === 'changePassword' && typeof body.currentPassword === 'string' && pick % 4 === 0) {
    body.currentPassword = fixtures.passwordUser.password;
  }
  // Both names of the refresh token may be sent only for the same token.
  if (typeof body.refreshToken === 'string' && typeof body.refresh_token === 'string') {
    body.refresh_token = body.refreshToken;
  }
  return body;
}

/**
 * Refusals of requests the spec accepts, that no schema can state. Each is a question for the spec
 * owner; each is matched by its exact message, for the operations named.
 */
const SEMANTIC_REFUSALS: ReadonlyArray<{ operations: OperationId[]; message: RegExp; reason: string }> = [
  {
    operations: ['updateCurrentProfile'],
    message:
      /^body\.profile: a profile holds at most 50 fields, name and avatar_url included \(this one would have \d+\)$/,
    reason:
      'the limit is on the profile after the merge (what is stored counts), which no request schema can state; ' +
      'name and avatar_url are counted even when the profile has neither (a 49-field patch of an empty profile is refused)',
  },
  {
    operations: ['updateCurrentProfile'],
    message: /^body\.profile: a profile holds at most 4096 bytes of JSON \(this one would have \d+\)$/,
    reason: 'a size in bytes of the merged profile: JSON Schema counts characters, and only in one value',
  },
];

// ---------------------------------------------------------------------------------------------
// Cases.

type GeneratedBody = {
  body: SentBody;
  /** How a body the spec sees as none is sent: no bytes and no Content-Type, or no bytes as application/json. */
  empty?: 'absent' | 'emptyJson';
  label: string;
  repeat?: { path: ReadonlyArray<string | number>; count: number };
};

interface ConformanceCase {
  pick: number;
  params: ParamEntry[];
  paramLabel: string;
  body: GeneratedBody;
}

/** The oneOf/anyOf branches of an object body, when it has two or more. */
function objectBranches(schema: JsonSchema, where: string): JsonSchema[] {
  const { schema: s } = deref(schema, where);
  const list = (s.oneOf ?? s.anyOf) as JsonSchema[] | undefined;
  return list === undefined ? [] : list;
}

const BODY_MUTATIONS = new Set(['wrongType', 'removeRequired', 'addUnknown', 'violate', 'boundary', 'oddUnicode']);

function bodyArbitrary(op: OperationModel, fixtures: Fixtures, validWeight: number): fc.Arbitrary<GeneratedBody> {
  const spec = op.body;
  if (spec === undefined) return fc.constant({ body: { kind: 'none' }, empty: 'absent', label: 'no body' });
  const valid = fc
    .tuple(valueArbitrary(spec.schema, {}, spec.pointer), fc.nat())
    .map(([value, pick]) => bodyFixtures(op, value, pick, fixtures));
  const mutated = fc
    .tuple(
      valid,
      mutationArbitrary(op.bodyLimit ?? 16 * 1024).filter((m) => BODY_MUTATIONS.has(m.op)),
    )
    .map(([value, m]): GeneratedBody => {
      const outcome = applyMutation(value, spec.schema, m);
      if (outcome === undefined) return { body: { kind: 'json', value }, label: `valid (no target for ${m.op})` };
      // A value at a bound of the schema, or with odd Unicode in a string, is still held to the app's own
      // rules (a model's size, one refresh token under both names).
      const mutatedValue =
        m.op === 'boundary' || m.op === 'oddUnicode'
          ? bodyFixtures(op, outcome.value, m.site, fixtures)
          : outcome.value;
      return {
        body: { kind: 'json', value: mutatedValue },
        label: outcome.label,
        ...(outcome.repeat ? { repeat: outcome.repeat } : {}),
      };
    });
  const choices: Array<fc.WeightedArbitrary<GeneratedBody>> = [
    { weight: validWeight, arbitrary: valid.map((value) => ({ body: { kind: 'json', value }, label: 'valid' })) },
    { weight: 8, arbitrary: mutated },
    { weight: 1, arbitrary: fc.constant<GeneratedBody>({ body: { kind: 'none' }, empty: 'absent', label: 'no body' }) },
    {
      weight: 1,
      arbitrary: fc.constant<GeneratedBody>({
        body: { kind: 'none' },
        empty: 'emptyJson',
        label: 'an empty body as application/json',
      }),
    },
  ];
  // oneOf branches mixed: the fields of one branch with those of another.
  const branches = objectBranches(spec.schema, spec.pointer);
  if (branches.length >= 2) {
    const pair = fc
      .tuple(fc.nat(branches.length - 1), fc.nat(branches.length - 2))
      .map(([a, b]) => [a, b >= a ? b + 1 : b] as const);
    const mixed = pair.chain(([a, b]) =>
      fc
        .tuple(
          valueArbitrary(branches[a] as JsonSchema, {}, `${spec.pointer}/oneOf/${a}`),
          valueArbitrary(branches[b] as JsonSchema, {}, `${spec.pointer}/oneOf/${b}`),
          fc.nat(),
        )
        .map(([x, y, pick]): GeneratedBody => {
          const merged =
            x !== null && typeof x === 'object' && y !== null && typeof y === 'object'
              ? { ...(y as object), ...(x as object) }
              : x;
          return {
            body: { kind: 'json', value: bodyFixtures(op, merged, pick, fixtures) },
            label: `oneOf branches ${a} and ${b} mixed`,
          };
        }),
    );
    choices.push({ weight: 2, arbitrary: mixed });
  }
  return fc.oneof(...choices);
}

/**
 * Values at and past the edges of a string parameter's schema (lengths, the digits of a number
 * written out, an enum's values in another case); the verdict says which the spec accepts.
 */
function edgeValues(schema: JsonSchema, where: string): string[] {
  const { schema: s } = deref(schema, where);
  const out = [
    '',
    ' ',
    '0',
    '1',
    '00',
    '01',
    '-1',
    '+1',
    '1.5',
    '1e3',
    '999',
    '1000',
    '1001',
    '9'.repeat(15),
    '9'.repeat(16),
  ];
  if (typeof s.maxLength === 'number') out.push('a'.repeat(s.maxLength), 'a'.repeat(s.maxLength + 1));
  if (typeof s.minLength === 'number' && s.minLength > 0)
    out.push('a'.repeat(s.minLength - 1), 'a'.repeat(s.minLength));
  if (Array.isArray(s.enum)) out.push(...s.enum.map(String), ...s.enum.map((v) => String(v).toUpperCase()));
  return out;
}

function caseArbitrary(op: OperationModel, fixtures: Fixtures): fc.Arbitrary<ConformanceCase> {
  const scrypt = SCRYPT_BOUND.has(op.id);
  const own = op.parameters.filter((p) => p.in === 'path' || p.in === 'query');
  const mutation = fc.oneof(
    { weight: 4, arbitrary: fc.constant({ kind: 'none' as const }) },
    {
      weight: own.length > 0 ? 2 : 1,
      arbitrary: parameterMutationArbitrary()
        .filter((m) => m.op !== 'rawPercent')
        .map((m) => ({ kind: 'fuzz' as const, m })),
    },
    ...(own.length > 0
      ? [
          {
            weight: 2,
            arbitrary: fc.record({ kind: fc.constant('edge' as const), index: fc.nat(), pick: fc.nat() }),
          },
        ]
      : []),
  );
  const params = fc.tuple(validParametersArbitrary(op, {}), fc.nat(), mutation).map(([entries, pick, m]) => {
    const valid = parameterFixtures(op, entries, pick, fixtures);
    if (m.kind === 'none') return { params: valid, paramLabel: 'valid parameters' };
    if (m.kind === 'fuzz') {
      const mutated = applyParameterMutation(op, valid, m.m);
      return { params: mutated.entries, paramLabel: mutated.label };
    }
    const param = at(own, m.index);
    const value = at(edgeValues(param.schema, param.pointer), m.pick);
    return {
      params: [
        ...valid.filter((e) => !(e.in === param.in && e.name === param.name)),
        { in: param.in, name: param.name, values: [value] },
      ],
      paramLabel: `${param.in} ${param.name} = ${JSON.stringify(value.length > 20 ? `${value.slice(0, 8)}… (${value.length})` : value)}`,
    };
  });
  return fc
    .record({ pick: fc.nat(), p: params, body: bodyArbitrary(op, fixtures, scrypt ? 1 : 8) })
    .map(({ pick, p, body }) => ({ pick, ...p, body }));
}

// ---------------------------------------------------------------------------------------------
// Sending a case and holding the answer to the verdict.

interface Answer {
  /** The body sent is larger than the operation's x-body-limit: the spec's answer is 413, whatever else. */
  overLimit: boolean;
  status: number;
  body: string;
  parsed: { error?: unknown; message?: unknown; statusCode?: unknown } | undefined;
}

function authorizationFor(op: OperationModel, fixtures: Fixtures): string | undefined {
  if (op.id === 'getMetrics') return `Bearer ${METRICS_TOKEN}`;
  if (!op.secured) return undefined;
  // A password change ends the account's sessions: it gets an account of its own.
  if (op.id === 'changePassword') return `Bearer ${fixtures.passwordUser.token}`;
  return `Bearer ${fixtures.adminToken}`;
}

async function send(
  op: OperationModel,
  c: ConformanceCase,
  fixtures: Fixtures,
): Promise<{ answer: Answer; request: string; verdict: Verdict }> {
  const sent = c.body.body;
  const bodySpec: BodySpec =
    sent.kind === 'json'
      ? { kind: 'json', value: sent.value, ...(c.body.repeat ? { repeat: c.body.repeat } : {}) }
      : c.body.empty === 'emptyJson'
        ? { kind: 'text', text: '' }
        : { kind: 'none' };
  const contentType = sent.kind === 'json' || c.body.empty === 'emptyJson' ? 'application/json' : null;
  const fuzzCase: FuzzCase = {
    target: 0,
    pick: c.pick,
    dimension: 'valid',
    labels: [],
    params: c.params,
    body: bodySpec,
    contentType,
    auth: { kind: 'none' },
    extraHeaders: [],
    socket: null,
  };
  const { wire } = wireRequest(op, fuzzCase, () => 'no fixture', authorizationFor(op, fixtures));
  // The body the server parses: a grown array written out.
  const verdictBody: SentBody =
    sent.kind === 'json' && c.body.repeat
      ? { kind: 'json', value: JSON.parse(jsonWithFill(sent.value, undefined, c.body.repeat)) }
      : sent;
  const verdict = specVerdict(op, c.params, verdictBody);
  const headers: Record<string, string[]> = Object.create(null);
  for (const [name, value] of wire.headers) {
    const key = name.toLowerCase();
    headers[key] = [...(headers[key] ?? []), value];
  }
  if (op.id === 'updateCurrentProfile') await fixtures.resetAdminProfile();
  const inject = () =>
    fixtures.app.inject({
      method: wire.method as 'GET',
      url: wire.url,
      headers,
      ...(wire.body ? { payload: wire.body } : {}),
    });
  let res = await inject();
  // Wrong current passwords make the account back off (429, as sign-in does): wait that out on the app's clock.
  if (op.id === 'changePassword' && res.statusCode === 429) {
    fixtures.clock.advance(Number(res.headers['retry-after'] ?? 60) + 1);
    res = await inject();
  }
  if (op.id === 'changePassword' && res.statusCode >= 200 && res.statusCode < 300 && sent.kind === 'json') {
    await fixtures.renewPasswordUser(String((sent.value as { newPassword?: unknown }).newPassword));
  }
  if (SESSION_ENDING.has(op.id) && res.statusCode >= 200 && res.statusCode < 300) await fixtures.renewAdminIfEnded();
  let parsed: Answer['parsed'];
  try {
    parsed = JSON.parse(res.body);
  } catch {
    parsed = undefined;
  }
  const bodyText = wire.body === undefined ? 'none' : preview(wire.body.toString('utf8'), 400);
  const request = `${wire.method} ${preview(wire.url, 300, false)}${contentType ? ` (${contentType})` : ''}\n  body: ${bodyText}\n  case: ${c.paramLabel} | ${c.body.label}`;
  const overLimit = wire.body !== undefined && op.bodyLimit !== undefined && wire.body.length > op.bodyLimit;
  return { answer: { overLimit, status: res.statusCode, body: res.body, parsed }, request, verdict };
}

const preview = (s: string, n: number, quote = true) => {
  const text = s.length > n ? `${s.slice(0, n)}… (${s.length} chars)` : s;
  return quote ? JSON.stringify(text) : text;
};

/** What is wrong with the answer to a request the spec refuses or accepts; undefined when nothing is. */
function judge(op: OperationModel, verdict: Verdict, answer: Answer): { kind: string; problem: string } | undefined {
  const { status, parsed } = answer;
  const code = parsed?.error;
  const message = typeof parsed?.message === 'string' ? parsed.message : '';
  // The test app's contract check replaces an answer the spec does not declare with a 500 that says so.
  if (status === 500 && message.startsWith('contract violation')) {
    return {
      kind: 'answer not declared by the spec',
      problem: `the server's answer is not one the spec declares (${message})`,
    };
  }
  if (answer.overLimit) {
    if (status === 413 && code === 'PAYLOAD_TOO_LARGE') return undefined;
    return {
      kind: 'body over x-body-limit',
      problem: `a body over the ${op.bodyLimit}-byte x-body-limit was answered ${status} ${String(code ?? '')}`,
    };
  }
  if (verdict.accepts === false) {
    const why = verdict.refusals.map((r) => r.reason).join('; ');
    if (status !== 400 || code !== 'INVALID_INPUT') {
      return {
        kind: 'spec refuses, server accepts',
        problem: `the spec refuses it (${why}), the server answered ${status} ${String(code ?? '')}`,
      };
    }
    const keys = Object.keys(parsed ?? {})
      .sort()
      .join(',');
    if (keys !== 'error,message,statusCode' || parsed?.statusCode !== 400 || message === '') {
      return { kind: 'error shape', problem: `the 400 is not in the Error shape: ${answer.body.slice(0, 300)}` };
    }
    if (!namesAField(message, verdict.refusals)) {
      const fields = [...new Set(verdict.refusals.flatMap((r) => r.fields))].join(', ');
      return {
        kind: 'message names no field',
        problem: `the message ${JSON.stringify(message)} names none of the refused fields (${fields}; the spec: ${why})`,
      };
    }
    return undefined;
  }
  if (verdict.accepts === true && status === 400 && code === 'INVALID_INPUT') {
    const allowed = SEMANTIC_REFUSALS.find((r) => r.operations.includes(op.id) && r.message.test(message));
    if (allowed === undefined) {
      return {
        kind: 'spec accepts, server refuses',
        problem: `the spec accepts it, the server refused it: ${JSON.stringify(message)}`,
      };
    }
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------

async function setUp(t: Test): Promise<Fixtures> {
  const { upstream, idp, github } = await startOutsideParts(t);
  const smtp = await startSmtpCapture();
  t.teardown(() => smtp.close());
  const clock = new TestClock();
  const { app, database } = await buildTestApp(t, {
    clock,
    env: {
      JWT_SECRET,
      SMTP_URL: smtp.url,
      ADMIN_EMAIL,
      ADMIN_PASSWORD: PASSWORD,
      REQUIRE_EMAIL_VERIFICATION: 'false',
      METRICS_TOKEN,
      ...propertyAppEnv({ idp, github }, upstream.baseUrl, OAUTH_CUSTOM[0] as string),
    },
  });
  const signIn = await app.inject({
    method: 'POST',
    url: '/api/auth/sessions?client_type=mobile',
    payload: { email: ADMIN_EMAIL, password: PASSWORD },
  });
  if (signIn.statusCode !== 200) throw new Error(`administrator sign-in answered ${signIn.statusCode} ${signIn.body}`);
  const session = signIn.json() as { accessToken: string; user: { id: string } };
  // A catch-all channel, so that publishing on any valid channel name may succeed.
  const channel = await app.inject({
    method: 'POST',
    url: '/api/realtime/channels',
    headers: { authorization: `Bearer ${session.accessToken}` },
    payload: { pattern: '%' },
  });
  if (channel.statusCode !== 201) throw new Error(`creating a channel answered ${channel.statusCode} ${channel.body}`);
  const own = await app.inject({
    method: 'POST',
    url: '/api/realtime/channels',
    headers: { authorization: `Bearer ${session.accessToken}` },
    payload: { pattern: 'conformance:%' },
  });
  if (own.statusCode !== 201) throw new Error(`creating a channel answered ${own.statusCode} ${own.body}`);
  const passwordUser = {
    email: `conformance-${randomBytes(4).toString('hex')}@example.com`,
    password: PASSWORD,
    token: '',
  };
  const signUp = await app.inject({
    method: 'POST',
    url: '/api/auth/users?client_type=mobile',
    payload: { email: passwordUser.email, password: PASSWORD },
  });
  if (signUp.statusCode !== 201) throw new Error(`sign-up answered ${signUp.statusCode} ${signUp.body}`);
  passwordUser.token = (signUp.json() as { accessToken: string }).accessToken;
  const db = database.handle.db;
  const fixtures: Fixtures = {
    app,
    clock,
    adminToken: session.accessToken,
    adminId: session.user.id,
    channelId: (own.json() as { id: string }).id,
    passwordUser,
    renewPasswordUser: async (password) => {
      const res = await app.inject({
        method: 'POST',
        url: '/api/auth/sessions?client_type=mobile',
        payload: { email: passwordUser.email, password },
      });
      if (res.statusCode !== 200)
        throw new Error(`signing in with the new password answered ${res.statusCode} ${res.body}`);
      passwordUser.password = password;
      passwordUser.token = (res.json() as { accessToken: string }).accessToken;
    },
    renewAdminIfEnded: async () => {
      const current = await app.inject({
        url: '/api/auth/sessions/current',
        headers: { authorization: `Bearer ${fixtures.adminToken}` },
      });
      if (current.statusCode === 200) return;
      const again = await app.inject({
        method: 'POST',
        url: '/api/auth/sessions?client_type=mobile',
        payload: { email: ADMIN_EMAIL, password: PASSWORD },
      });
      if (again.statusCode !== 200) throw new Error(`administrator sign-in answered ${again.statusCode} ${again.body}`);
      fixtures.adminToken = (again.json() as { accessToken: string }).accessToken;
    },
    // The profile's limits count the fields already stored: each case starts from an empty one.
    resetAdminProfile: async () => {
      await db
        .updateTable('users')
        .set({ profile: '{}' as never })
        .where('id', '=', session.user.id)
        .execute();
    },
  };
  return fixtures;
}

// Run alone (node test/spec-conformance.test.ts) the file would get tap's 30 s; larger runs take longer.
t.setTimeout(Math.max(180_000, RUNS * 1_000));

t.test(`the server holds to openapi.yaml for every operation (seed ${SEED})`, async (t) => {
  t.comment(
    `conformance seed ${SEED}: replay with CONFORMANCE_SEED=${SEED} CONFORMANCE_RUNS=${RUNS} node test/spec-conformance.test.ts`,
  );
  const fixtures = await setUp(t);
  const ids = ONLY.length > 0 ? operationIds.filter((id) => ONLY.includes(id)) : operationIds;
  if (ONLY.length > 0) t.same(ids.length, ONLY.length, `CONFORMANCE_ONLY names operations of the contract`);
  // The rule of the query: closed everywhere but where the spec says the provider chooses it.
  const open = operationIds.filter((id) => (operations[id] as { openQuery?: boolean }).openQuery === true);
  t.same(open, [...OPEN_QUERY_OPERATIONS], 'the contract leaves the query open on the OAuth callback only');
  const found = new Map<string, { count: number; example: string }>();
  for (const id of ids) {
    await t.test(`${id} (seed ${SEED})`, async (t) => {
      const op = operationModel(id);
      const runs = SCRYPT_BOUND.has(id) ? Math.max(1, Math.ceil(RUNS / 3)) : RUNS;
      const tally = { refused: 0, accepted: 0, undecided: 0, overLimit: 0 };
      /** The answers to the requests the spec accepts, by status and code. */
      const answers = new Map<string, number>();
      let failedAt: number | undefined;
      const started = performance.now();
      const details = await fc.check(
        fc.asyncProperty(caseArbitrary(op, fixtures), async (c) => {
          if (failedAt !== undefined && performance.now() - failedAt > SHRINK_BUDGET_MS) return;
          const { answer, request, verdict } = await send(op, c, fixtures);
          if (failedAt === undefined) {
            if (answer.overLimit) tally.overLimit++;
            else if (verdict.accepts === true) {
              tally.accepted++;
              const key = `${answer.status}${answer.status >= 400 ? ` ${String(answer.parsed?.error ?? '')}` : ''}`;
              answers.set(key, (answers.get(key) ?? 0) + 1);
            } else if (verdict.accepts === false) tally.refused++;
            else tally.undecided++;
          }
          const outcome = judge(op, verdict, answer);
          if (outcome === undefined) return;
          const report = `${outcome.problem}\n${request}\n→ ${answer.status} ${answer.body.slice(0, 400)}`;
          if (COLLECT) {
            const key = `${id} | ${outcome.kind} | ${(answer.parsed?.message as string | undefined)?.replace(/"[^"]*"|\d+/g, '…') ?? answer.status}`;
            const seen = found.get(key);
            if (seen) seen.count++;
            else found.set(key, { count: 1, example: report });
            return;
          }
          failedAt ??= performance.now();
          throw new Error(report);
        }),
        { seed: SEED, numRuns: runs, ...(REPLAY_PATH ? { path: REPLAY_PATH } : {}) },
      );
      const seconds = ((performance.now() - started) / 1000).toFixed(1);
      t.comment(
        `${id}: ${details.numRuns} cases in ${seconds} s (the spec refuses ${tally.refused}, accepts ${tally.accepted}, cannot tell ${tally.undecided}, over x-body-limit ${tally.overLimit}); accepted ones answered ${[
          ...answers,
        ]
          .sort(([a], [b]) => a.localeCompare(b))
          .map(([k, n]) => `${k} ×${n}`)
          .join(', ')}`,
      );
      if (details.failed) {
        const error =
          details.errorInstance instanceof Error ? details.errorInstance.message : String(details.errorInstance);
        t.fail(
          `${id}: the server and the spec disagree\n${error}\n\nreplay: CONFORMANCE_SEED=${details.seed} CONFORMANCE_ONLY=${id} CONFORMANCE_PATH=${JSON.stringify(details.counterexamplePath)} node test/spec-conformance.test.ts`,
        );
        return;
      }
      t.ok(true, `${details.numRuns} cases of ${id}, each answered as the spec says`);
    });
  }
  if (COLLECT) {
    for (const [key, { count, example }] of found) t.fail(`${key} (×${count})\n${example}`);
    t.comment(`${found.size} kinds of disagreement`);
  }
});
