// Property-based fuzzing from the spec. For every operation of generated/contract.ts (so a new
// operation is fuzzed as soon as it is in openapi.yaml), fast-check generates requests from the
// operation's parameters and body schema in openapi.yaml (test/helpers/spec-arbitraries.ts), valid
// ones and mutated ones: wrong types, missing and unknown fields, values past their constraints,
// huge strings up to and over x-body-limit, odd Unicode, invalid JSON and invalid UTF-8, wrong or
// missing content types, bad query values, unexpected headers, every kind of bad Bearer token, and
// over a real socket duplicated, oversized and malformed headers and framing. Every answer must be a
// status the operation declares with a body valid against the spec (the contract check of the test
// apps), errors in the Error shape, never a 5xx, within a deadline; and what the spec promises for a
// case holds: bad tokens get 401 (AUTH_UNAUTHORIZED for a token that has expired or is not valid), invalid requests a 4xx, bodies
// over the limit 413, malformed HTTP and oversized headers the HTTP layer's 400 and 431.
//
// The operations are shared among three test files (test/fuzz.test.ts, test/fuzz-more.test.ts and
// test/fuzz-rest.test.ts, in turn in contract order), which tap runs two at a time, so that each
// stays well within the per-file timeout as the contract gains operations.
//
// FUZZ_RUNS (default 500) cases per operation; FUZZ_SEED replays a run (the seed is printed);
// FUZZ_ONLY=op1,op2 fuzzes some operations only; FUZZ_PATH (with FUZZ_SEED and FUZZ_ONLY) replays
// the counterexample of a failure as fast-check reported it.
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import fc from 'fast-check';
import type { FastifyInstance } from 'fastify';
import type { Kysely } from 'kysely';
import t, { type Test } from 'tap';
import { errorCodes, type OperationId, operationIds } from '../../generated/contract.ts';
import type { Env } from '../../src/config.ts';
import type { Database } from '../../src/db/schema.ts';
import { MAX_JSON_DEPTH } from '../../src/json-values.ts';
import { specDocument } from '../../src/spec.ts';
import { buildTestApp } from './app.ts';
import { PASSWORD } from './auth.ts';
import { contractProblem, violations } from './contract-check.ts';
import {
  type AuthSpec,
  authExpectation,
  authorizationHeader,
  failingAuthArbitrary,
  passingAuthArbitrary,
  type TokenSource,
} from './fuzz-auth.ts';
import {
  applyParameterMutation,
  type BodySpec,
  extraHeadersArbitrary,
  Fixture,
  type FixtureKind,
  type FuzzCase,
  mutatedBodyArbitrary,
  type ParamEntry,
  parameterMutationArbitrary,
  resolveFixtures,
  SECOND_AUTHORIZATION_FALLBACK,
  socketBytes,
  socketVariantArbitrary,
  validBodyArbitrary,
  validParametersArbitrary,
  type WireRequest,
  wireHeaderValue,
  wireParameterValue,
  wireRequest,
} from './fuzz-requests.ts';
import type { GithubFake } from './github-fake.ts';
import { SERVICE_CLIENT, type TestOidcProvider } from './oidc-provider.ts';
import { rawRequest } from './raw-http.ts';
import { type SmtpCapture, startSmtpCapture } from './smtp.ts';
import {
  type Hints,
  type OperationModel,
  operationModel,
  parameterStrings,
  valueArbitrary,
} from './spec-arbitraries.ts';
import { PROPERTY_MODELS, propertyAppEnv, propertyRunSettings, startOutsideParts } from './spec-properties.ts';
import { specValidator } from './spec-schema.ts';
import { accessTokenFor, currentSigningKey, forgeJwt, type StolenKey } from './tokens.ts';
import { startWatchdog, type Watchdog } from './watchdog.ts';

const { runs: RUNS, seed: SEED, only: ONLY, replayPath: REPLAY_PATH } = propertyRunSettings('FUZZ', 500);
/** An answer slower than this is a hang. */
const DEADLINE_MS = 20_000;
/** A case that blocks the event loop longer than this (so that no deadline can fire) is a hang too. */
const BLOCKED_MS = 30_000;
/** How long fast-check may spend shrinking a failure before the smallest failing case so far is reported. */
const SHRINK_BUDGET_MS = 20_000;

const MODELS = PROPERTY_MODELS;
const ADMIN_EMAIL = 'fuzz-admin@example.com';
/** The OAuth providers of the apps: a real OpenID Provider under a built-in and a custom name, and GitHub's fake. */
const OAUTH_NAMES = ['google', 'fuzzidp', 'github'];
const OAUTH_REDIRECT = 'https://app.example.com/auth/callback';
const JWT_SECRET = `fuzz-${randomBytes(24).toString('base64url')}`;
const OTHER_KEY = `other-${randomBytes(24).toString('base64url')}`;

/**
 * Operations that run scrypt (about 50-80 ms) on every well-formed request: sign-up and sign-in.
 * Fewer of their cases are well-formed (a minority of valid cases, and mostly mutated bodies under
 * the cases that vary something else), so that the file stays fast; mutated cases take milliseconds.
 */
const SCRYPT_BOUND: ReadonlySet<string> = new Set<OperationId>(['createUser', 'createSession']);

// ---------------------------------------------------------------------------------------------
// The apps under test and what they know (tokens, sessions, addresses, codes), fed by their answers.

const POOL_SIZE = 32;
class Pool<T> {
  readonly items: T[] = [];
  add(item: T) {
    this.items.push(item);
    if (this.items.length > POOL_SIZE) this.items.shift();
  }
  pick(n: number): T | undefined {
    return this.items.length === 0 ? undefined : this.items[n % this.items.length];
  }
}

interface Target {
  name: string;
  app: FastifyInstance;
  db: Kysely<Database>;
  /** The app's current signing key, to sign made-up claims the app accepts. */
  signingKey: StolenKey;
  port: number;
  smtp: SmtpCapture;
  tokens: { user: Pool<string>; admin: Pool<string> };
  /** An ID token of the test provider for the apps' client id (signInWithIdToken). */
  idToken: string;
  refreshTokens: Pool<string>;
  webSessions: Pool<{ cookie: string; csrf: string }>;
  emails: Pool<string>;
  /** Realtime channels created (by the seed and by the fuzzed operations), for channelId. */
  channels: Pool<string>;
  /** Messages published, for the history's channel and `after`. */
  messages: Pool<{ channel: string; messageId: string }>;
}

function tokenSource(target: Target): TokenSource {
  return {
    key: target.signingKey,
    jwtSecret: JWT_SECRET,
    otherKey: OTHER_KEY,
    sessionToken: (role, pick) => target.tokens[role].pick(pick),
    refreshToken: (pick) => target.refreshTokens.pick(pick),
    sign: (claims) => target.app.accessTokens.sign(claims as never),
  };
}

/** A UUID no row has: what a UUID fixture falls back to while the app has none. */
const NO_SUCH_ID = '00000000-0000-4000-8000-000000000000';
const UUID = /^[0-9a-f]{8}-(?:[0-9a-f]{4}-){3}[0-9a-f]{12}$/i;

/** The subject of the access token in an Authorization header, when it is a UUID. */
const subjectOf = (authorization: string | undefined): string | undefined => {
  const jwt = authorization?.trim().split(/\s+/).pop() ?? '';
  try {
    const sub = JSON.parse(Buffer.from(jwt.split('.')[1] ?? '', 'base64url').toString('utf8')).sub;
    return typeof sub === 'string' && UUID.test(sub) ? sub : undefined;
  } catch {
    return undefined;
  }
};

/**
 * A fixture's value in `target` now; `pick` keeps the fields of one case together (a cookie and its
 * CSRF token, a message's channel and id); `authorization` is the case's own header.
 */
function fixtureValue(target: Target, kind: FixtureKind, pick: number, authorization: string | undefined): string {
  const mails = target.smtp.messages.filter((m) => m.code !== undefined);
  // The latest mails first: their codes are the ones still valid.
  const mail = mails.length === 0 ? undefined : mails[mails.length - 1 - (pick % Math.min(mails.length, 8))];
  switch (kind) {
    case 'idToken':
      return target.idToken;
    case 'email':
      return target.emails.pick(pick) ?? 'nobody@example.com';
    case 'refreshToken':
      return target.refreshTokens.pick(pick) ?? 'pzRr3YP0PxKdC6W0P3u_r5AnV17-IeYpnDKdYN6nD94';
    case 'webCookie':
      return target.webSessions.pick(pick)?.cookie ?? 'no-session';
    case 'webCsrf':
      return target.webSessions.pick(pick)?.csrf ?? 'no-session';
    case 'otpCode':
      return mail?.code ?? '000000';
    case 'otpEmail':
      return mail?.to[0] ?? 'nobody@example.com';
    case 'otpToken':
      return mail?.token ?? '0'.repeat(64);
    case 'channelId':
      return target.channels.pick(pick) ?? NO_SUCH_ID;
    case 'messageChannel':
      return target.messages.pick(pick)?.channel ?? 'fuzz:room-1';
    case 'messageId':
      return target.messages.pick(pick)?.messageId ?? NO_SUCH_ID;
    case 'callerId':
      return subjectOf(authorization) ?? NO_SUCH_ID;
  }
}

const decodeRole = (jwt: string): unknown => {
  try {
    return JSON.parse(Buffer.from(jwt.split('.')[1] ?? '', 'base64url').toString('utf8')).role;
  } catch {
    return undefined;
  }
};

/** Whether the session of the access token in an Authorization header has been revoked. */
async function sessionEnded(target: Target, header: string | undefined): Promise<boolean> {
  const token = header?.split(' ').at(-1) ?? '';
  let sid: unknown;
  try {
    sid = JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8')).sid;
  } catch {
    return false;
  }
  if (typeof sid !== 'string') return false;
  const row = await target.db.selectFrom('sessions').select('revoked_at').where('id', '=', sid).executeTakeFirst();
  return row?.revoked_at != null;
}

/** Keeps what a successful answer hands out: tokens, sessions and registered addresses. */
function absorb(target: Target, answer: Answer, requestBody: unknown): void {
  if (answer.status < 200 || answer.status >= 300 || !answer.body.startsWith('{')) return;
  const body = JSON.parse(answer.body) as Record<string, unknown>;
  if (typeof body.accessToken === 'string') {
    target.tokens[decodeRole(body.accessToken) === 'admin' ? 'admin' : 'user'].add(body.accessToken);
  }
  if (typeof body.refreshToken === 'string') target.refreshTokens.add(body.refreshToken);
  // The line that sets the cookie, not those that expire its variants under other settings.
  const setCookie = [answer.headers['set-cookie'] ?? []]
    .flat()
    .find((line) => line.startsWith('refresh_token=') && !line.startsWith('refresh_token=;'));
  const cookie = setCookie?.slice('refresh_token='.length).split(';')[0];
  if (cookie && typeof body.csrfToken === 'string') target.webSessions.add({ cookie, csrf: body.csrfToken });
  const user = body.user as { email?: unknown } | undefined;
  if (typeof user?.email === 'string') target.emails.add(user.email);
  // A channel as created or updated (not those of the list: the catch-all of the seed stays out of reach).
  if (typeof body.id === 'string' && typeof body.pattern === 'string' && typeof body.enabled === 'boolean') {
    if (!target.channels.items.includes(body.id)) target.channels.add(body.id);
  }
  if (typeof body.messageId === 'string' && typeof body.channel === 'string') {
    target.messages.add({ channel: body.channel, messageId: body.messageId });
  }
  // A sign-up that asks for verification has registered its address too.
  if (body.requireEmailVerification === true) {
    const email = (requestBody as { email?: unknown } | undefined)?.email;
    if (typeof email === 'string') target.emails.add(email);
  }
}

interface OAuthFixtures {
  idp: TestOidcProvider;
  github: GithubFake;
  idToken: string;
}

async function startTarget(
  t: Test,
  name: string,
  env: Env,
  upstreamUrl: string,
  oauth: OAuthFixtures,
): Promise<Target> {
  const smtp = await startSmtpCapture();
  const { app, config, database } = await buildTestApp(t, {
    env: {
      JWT_SECRET,
      SMTP_URL: smtp.url,
      ADMIN_EMAIL,
      ADMIN_PASSWORD: PASSWORD,
      ...propertyAppEnv(oauth, upstreamUrl, 'fuzzidp'),
      ...env,
    },
  });
  t.teardown(() => smtp.close());
  await app.listen({ port: 0, host: '127.0.0.1' });
  const target: Target = {
    name,
    app,
    db: database.handle.db,
    signingKey: await currentSigningKey(config, database.handle.db),
    port: (app.server.address() as AddressInfo).port,
    smtp,
    tokens: { user: new Pool(), admin: new Pool() },
    idToken: oauth.idToken,
    refreshTokens: new Pool(),
    webSessions: new Pool(),
    emails: new Pool(),
    channels: new Pool(),
    messages: new Pool(),
  };
  target.emails.add(ADMIN_EMAIL);
  return target;
}

/** Sessions to start from: a user's and the administrator's, for a mobile and a web client. */
async function seedSessions(target: Target, verificationRequired: boolean): Promise<void> {
  const expect = async (
    what: string,
    status: number,
    res: Promise<{ statusCode: number; body: string; headers: Record<string, unknown> }>,
    sent?: unknown,
  ) => {
    const r = await res;
    if (r.statusCode !== status) throw new Error(`${target.name}: ${what} answered ${r.statusCode} ${r.body}`);
    absorb(
      target,
      { status: r.statusCode, headers: r.headers as Answer['headers'], body: r.body, fromHttpLayer: false },
      sent,
    );
    return r;
  };
  const { app } = target;
  for (const client of ['mobile', 'web']) {
    const email = `fuzz-${client}-${randomBytes(4).toString('hex')}@example.com`;
    const payload = { email, password: PASSWORD, name: `Fuzz ${client}` };
    const url = `/api/auth/users?client_type=${client}`;
    if (!verificationRequired) {
      await expect(`sign-up (${client})`, 201, app.inject({ method: 'POST', url, payload }));
    } else {
      await expect(`sign-up (${client})`, 202, app.inject({ method: 'POST', url, payload }), payload);
      const [mail] = await target.smtp.waitFor(email);
      await expect(
        `verification (${client})`,
        200,
        app.inject({
          method: 'POST',
          url: `/api/auth/email/verify?client_type=${client}`,
          payload: { otp: mail?.token },
        }),
      );
    }
    await expect(
      `administrator sign-in (${client})`,
      200,
      app.inject({
        method: 'POST',
        url: `/api/auth/sessions?client_type=${client}`,
        payload: { email: ADMIN_EMAIL, password: PASSWORD },
      }),
    );
  }
}

/**
 * Realtime channels to start from: a catch-all `%` that no fixture names (so that publishing on
 * any valid channel name may succeed whatever the fuzzed operations disable or delete), channels
 * whose ids the channel operations get, and a few messages for the history.
 */
async function seedRealtime(target: Target): Promise<void> {
  const admin = target.tokens.admin.pick(0);
  const user = target.tokens.user.pick(0);
  if (admin === undefined || user === undefined) throw new Error(`${target.name}: no sessions to seed channels with`);
  const send = async (token: string, url: string, payload: object) => {
    const r = await target.app.inject({ method: 'POST', url, headers: { authorization: `Bearer ${token}` }, payload });
    if (r.statusCode !== 201) throw new Error(`${target.name}: POST ${url} answered ${r.statusCode} ${r.body}`);
    return { status: r.statusCode, headers: r.headers as Answer['headers'], body: r.body, fromHttpLayer: false };
  };
  await send(admin, '/api/realtime/channels', { pattern: '%', description: 'fuzz: every channel' });
  for (const pattern of ['fuzz:%', 'order:%', 'fuzz-seed-_']) {
    absorb(target, await send(admin, '/api/realtime/channels', { pattern }), undefined);
  }
  for (const [channel, n] of [
    ['fuzz:room-1', 3],
    ['order:123', 2],
  ] as const) {
    for (let i = 0; i < n; i++) {
      const payload = { channel, event: 'seeded', payload: { n: i } };
      absorb(target, await send(user, '/api/realtime/messages', payload), payload);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Cases.

/** Values of the apps' state offered beside the schema's own, so that valid requests reach success. */
const BODY_HINTS: Hints = {
  properties: {
    email: fc.constant(new Fixture('email')),
    password: fc.constant(PASSWORD),
    refreshToken: fc.constant(new Fixture('refreshToken')),
    model: fc.constantFrom(...MODELS),
    // Channels that the seeded history has (any valid name is published on: the seed's `%` covers it).
    channel: fc.constantFrom('fuzz:room-1', 'order:123'),
    senderId: fc.constant(new Fixture('callerId')),
  },
  // `otp` is a 6-digit code in some bodies and a 64-hex token in others: hinted per body.
  components: {
    VerifyEmailRequest: fc.constantFrom(
      { otp: new Fixture('otpCode'), email: new Fixture('otpEmail') },
      { otp: new Fixture('otpToken') },
    ),
    OtpSignInRequest: fc.constant({ method: 'otp', otp: new Fixture('otpCode'), email: new Fixture('otpEmail') }),
    ExchangeResetPasswordTokenRequest: fc.constant({ code: new Fixture('otpCode'), email: new Fixture('otpEmail') }),
    IdTokenSignInRequest: fc.record({
      provider: fc.constantFrom(...OAUTH_NAMES),
      token: fc.constant(new Fixture('idToken')),
    }),
    ResetPasswordRequest: fc.record({
      otp: fc.constant(new Fixture('otpToken')),
      newPassword: fc.constantFrom(PASSWORD, 'a brand new passphrase'),
    }),
  },
};
const PARAMETER_HINTS = {
  provider: fc.constantFrom(...OAUTH_NAMES),
  'getOAuthAuthorizationUrl:provider': fc.constantFrom('google', 'github'),
  'getCustomOAuthAuthorizationUrl:provider': fc.constant('fuzzidp'),
  redirect_uri: fc.constant(OAUTH_REDIRECT),
  refresh_token: fc.constant(new Fixture('webCookie')),
  'X-CSRF-Token': fc.constant(new Fixture('webCsrf')),
  channelId: fc.constant(new Fixture('channelId')),
  channel: fc.constant(new Fixture('messageChannel')),
  after: fc.constant(new Fixture('messageId')),
};

function caseArbitrary(op: OperationModel, targets: number): fc.Arbitrary<FuzzCase> {
  const target =
    targets > 1
      ? fc.oneof({ weight: 2, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.nat(targets - 1) })
      : fc.constant(0);
  const pick = fc.nat();
  const params = validParametersArbitrary(op, PARAMETER_HINTS);
  const cheap = !SCRYPT_BOUND.has(op.id);
  const validBody = validBodyArbitrary(op, BODY_HINTS);
  // The body of cases that vary something else: valid, except that for scrypt-bound operations
  // it is mostly a mutated one (answered in milliseconds), so that few of their cases run scrypt.
  const body: fc.Arbitrary<GeneratedBody> = cheap
    ? validBody
    : fc.oneof({ weight: 1, arbitrary: validBody }, { weight: 7, arbitrary: mutatedBodyArbitrary(op, BODY_HINTS) });
  const failing = failingAuthArbitrary();
  const passing: fc.Arbitrary<AuthSpec> = op.secured
    ? passingAuthArbitrary()
    : fc.oneof(
        { weight: 4, arbitrary: fc.constant({ kind: 'none' as const }) },
        { weight: 1, arbitrary: passingAuthArbitrary() },
      );
  const plain = { extraHeaders: [] as Array<[string, string]>, socket: null };

  const valid = fc
    .record({ target, pick, params, body: validBody, auth: passing })
    .map((r): FuzzCase => ({ ...r, ...plain, ...withBody(r.body), dimension: 'valid', labels: ['valid'] }));
  const bodyMutated = fc
    .record({ target, pick, params, body: mutatedBodyArbitrary(op, BODY_HINTS), auth: passing })
    .map(
      (r): FuzzCase => ({
        ...r,
        ...plain,
        body: r.body.body,
        contentType: r.body.contentType,
        dimension: 'body',
        labels: [r.body.label],
      }),
    );
  const paramsMutated = fc
    .record({ target, pick, params, m: parameterMutationArbitrary(), body, auth: passing })
    .map(({ m, ...r }): FuzzCase => {
      const mutated = applyParameterMutation(op, r.params, m);
      return {
        ...r,
        ...plain,
        ...withBody(r.body),
        params: mutated.entries,
        dimension: 'params',
        labels: [mutated.label, ...labelOf(r.body)],
      };
    });
  const authMutated = fc.record({ target, pick, params, body, auth: failing }).map(
    (r): FuzzCase => ({
      ...r,
      ...plain,
      ...withBody(r.body),
      dimension: 'auth',
      labels: [`auth: ${describeAuth(r.auth)}`, ...labelOf(r.body)],
    }),
  );
  const headersMutated = fc
    .record({ target, pick, params, body, auth: passing, extraHeaders: extraHeadersArbitrary() })
    .map(
      (r): FuzzCase => ({
        ...r,
        ...withBody(r.body),
        socket: null,
        dimension: 'headers',
        labels: [`extra headers ${r.extraHeaders.map(([n]) => n).join(', ')}`, ...labelOf(r.body)],
      }),
    );
  const overSocket = fc
    .record({
      target,
      pick,
      params,
      body,
      auth: fc.oneof({ weight: 3, arbitrary: passing }, { weight: 1, arbitrary: failing }),
      socket: socketVariantArbitrary(failing, passingAuthArbitrary()),
    })
    .map(
      (r): FuzzCase => ({
        ...r,
        ...withBody(r.body),
        extraHeaders: [],
        dimension: 'socket',
        labels: [`socket: ${r.socket.kind}`, `auth: ${describeAuth(r.auth)}`, ...labelOf(r.body)],
      }),
    );
  const combined = fc
    .record({
      target,
      pick,
      params,
      m: parameterMutationArbitrary(),
      body: mutatedBodyArbitrary(op, BODY_HINTS),
      auth: fc.oneof(passing, failing),
      extraHeaders: fc.option(extraHeadersArbitrary(), { nil: undefined }),
    })
    .map(({ m, ...r }): FuzzCase => {
      const mutated = applyParameterMutation(op, r.params, m);
      return {
        ...r,
        params: mutated.entries,
        body: r.body.body,
        contentType: r.body.contentType,
        extraHeaders: r.extraHeaders ?? [],
        socket: null,
        dimension: 'combined',
        labels: [mutated.label, r.body.label, `auth: ${describeAuth(r.auth)}`],
      };
    });

  return fc.oneof(
    { weight: cheap ? 4 : 1, arbitrary: valid },
    { weight: op.body ? 8 : 2, arbitrary: bodyMutated },
    { weight: op.parameters.length > 0 ? 4 : 1, arbitrary: paramsMutated },
    { weight: op.secured ? 4 : 2, arbitrary: authMutated },
    { weight: cheap ? 2 : 1, arbitrary: headersMutated },
    { weight: cheap ? 4 : 2, arbitrary: overSocket },
    { weight: 2, arbitrary: combined },
  );
}

type GeneratedBody = { body: BodySpec; contentType: string | null; label?: string };
const withBody = (b: GeneratedBody) => ({ body: b.body, contentType: b.contentType });
const labelOf = (b: GeneratedBody) => (b.label === undefined ? [] : [b.label]);

function describeAuth(auth: AuthSpec): string {
  const { kind, ...rest } = auth;
  const detail = Object.entries(rest)
    .map(([k, v]) => `${k}=${typeof v === 'string' ? JSON.stringify(v.slice(0, 24)) : JSON.stringify(v)}`)
    .join(' ');
  return detail ? `${kind} ${detail}` : kind;
}

// ---------------------------------------------------------------------------------------------
// Sending a case and judging the answer.

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  /** Sent by the HTTP layer (Node's parser and clientErrorHandler), before any route. */
  fromHttpLayer: boolean;
}

/** Whether the parameters are valid by their schemas: true, false, or undefined (only the server's decoding can tell). */
function parametersVerdict(
  op: OperationModel,
  entries: ParamEntry[],
  resolve: (kind: FixtureKind) => string,
): boolean | undefined {
  let verdict: boolean | undefined = true;
  for (const param of op.parameters) {
    const given = entries.filter((e) => e.in === param.in && e.name === param.name);
    if (given.length === 0) {
      if (param.required) return false;
      continue;
    }
    const asSent = wireParameterValue(param.in);
    const values = given.flatMap((e) =>
      e.values.map((v) => resolveFixtures(v, resolve)).flatMap((v) => parameterStrings(v).map(asSent)),
    );
    if (given.some((e) => e.raw)) verdict = undefined;
    else if (values.length > 1) {
      if (param.in === 'query') return false; // an array, which no string schema accepts
      verdict = undefined;
    } else if (param.in !== 'query' && param.in !== 'path' && values.some((v) => /[^\u0020-\u007e]/.test(v))) {
      verdict = undefined; // header bytes beyond ASCII: Node reads them as Latin-1, not as they were generated
    } else if (!specValidator(...pointerSegments(param.pointer))(values[0] ?? '')) {
      return false;
    }
  }
  return verdict;
}

/**
 * When a path parameter keeps the URL from addressing the operation at all, what the router answers
 * instead: a value sent raw that cannot be percent-decoded (`%`, `%zz`) is not a URL any route can
 * match (400, before authentication). An empty value still reaches the operation (Fastify matches
 * `/channels/` with `channelId` empty), which refuses it as any invalid value.
 */
function routerExpectation(
  op: OperationModel,
  entries: ParamEntry[],
  resolve: (kind: FixtureKind) => string,
): { statuses: number[]; why: string; changesPath?: true } | undefined {
  for (const param of op.parameters.filter((p) => p.in === 'path')) {
    const entry = entries.find((e) => e.in === 'path' && e.name === param.name);
    const value = entry?.values[0] === undefined ? undefined : resolveFixtures(entry.values[0], resolve);
    if (value === undefined) continue; // left out: the template's {name} is sent as it is
    const text = parameterStrings(value)[0] ?? '';
    let decoded = text;
    if (entry?.raw) {
      try {
        decoded = decodeURIComponent(text);
      } catch {
        return { statuses: [400], why: `path ${param.name} ${JSON.stringify(text)} is not percent-decodable` };
      }
    }
    // Followed by more of the path, a dot segment ("%2e") is removed and a "#" ends the path: the
    // request addresses another path (another route, or none), whose answer this case cannot tell.
    // As the last segment, "." leaves the path ending in "/" (the operation, with the value empty),
    // while ".." still takes the segment before it away (URL parsing resolves it wherever it is).
    const last = new RegExp(`[:{]${param.name}}?$`).test(op.routePath);
    // (A "#" ends it only when sent raw: otherwise it is sent as %23, part of the segment.)
    if (decoded === '..' || (!last && (decoded === '.' || (entry?.raw === true && text.includes('#'))))) {
      return {
        statuses: [400, 404, 405],
        why: `path ${param.name} ${JSON.stringify(text)} changes the path`,
        changesPath: true,
      };
    }
  }
  return undefined;
}

/** The operation whose path a URL resolves to (dot segments removed, the fragment dropped), if any. */
function operationAt(method: string, url: string): OperationModel | undefined {
  const path = new URL(url, 'http://fuzz.invalid').pathname;
  for (const id of operationIds) {
    let model: OperationModel;
    try {
      model = operationModel(id);
    } catch {
      continue; // an operation the fuzzer has no generator for (its path is still matched by others)
    }
    if (model.method.toUpperCase() !== method.toUpperCase()) continue;
    const pattern = model.specPath
      .split(/\{[^}]+\}/)
      .map((part) => part.replace(/[.*+?^$()|[\]\\]/g, '\\$&'))
      .join('[^/]*');
    if (new RegExp(`^${pattern}$`).test(path)) return model;
  }
  return undefined;
}

const pointerSegments = (pointer: string) =>
  pointer
    .replace(/^#\//, '')
    .split('/')
    .map((p) => p.replaceAll('~1', '/').replaceAll('~0', '~'));

const isJsonMediaType = (contentType: string | null) =>
  contentType !== null && /^application\/json\s*(;\s*charset=("?)utf-8\2\s*)?$/i.test(contentType);
const mediaType = (contentType: string) => contentType.split(';')[0]?.trim().toLowerCase() ?? '';

/** Whether the body is valid by the spec: true, false, or undefined (the server's decoding decides). */
function bodyVerdict(
  op: OperationModel,
  body: BodySpec,
  bytes: Buffer | undefined,
  contentType: string | null,
): boolean | undefined {
  if (op.body === undefined) return undefined; // a body the operation does not take: nothing is promised
  if (bytes === undefined) return !op.body.required;
  if (contentType !== null && mediaType(contentType) !== 'application/json') return false; // 415
  if (!isJsonMediaType(contentType) || body.kind === 'bytes') return undefined;
  // info.description: an empty body sent as JSON counts as no body.
  if (bytes.length === 0) return !op.body.required;
  const text = bytes.toString('utf8');
  if (text.startsWith('\ufeff')) return undefined; // JSON parsers may ignore a byte-order mark (RFC 8259 8.1)
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return false;
  }
  // The contract's "Limits and timeouts": nesting past MAX_JSON_DEPTH is refused whatever the schema.
  if (jsonDepth(value) > MAX_JSON_DEPTH) return false;
  return specValidator(...pointerSegments(op.body.pointer))(value) === true;
}

/** How deeply objects and arrays nest in a parsed JSON value (a scalar: 0), without recursion. */
function jsonDepth(root: unknown): number {
  let deepest = 0;
  const stack: Array<[unknown, number]> = [[root, 0]];
  for (let next = stack.pop(); next !== undefined; next = stack.pop()) {
    const [value, depth] = next;
    if (value === null || typeof value !== 'object') continue;
    deepest = Math.max(deepest, depth + 1);
    for (const item of Object.values(value)) stack.push([item, depth + 1]);
  }
  return deepest;
}

const errorBodyProblem = (body: unknown, status: number): string | undefined => {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return 'the error body is not an object';
  const keys = Object.keys(body).sort().join(',');
  if (keys !== 'error,message,statusCode') return `the error body has the keys ${keys}, not error, message, statusCode`;
  const b = body as { error: unknown; message: unknown; statusCode: unknown };
  if (!(errorCodes as readonly unknown[]).includes(b.error))
    return `error ${JSON.stringify(b.error)} is not in ErrorCode`;
  if (typeof b.message !== 'string' || b.message.length === 0) return 'the error message is empty';
  if (b.statusCode !== status) return `statusCode ${JSON.stringify(b.statusCode)} differs from the status ${status}`;
  return undefined;
};

const preview = (s: string, n = 400) =>
  s.length > n ? `${JSON.stringify(s.slice(0, n))}… (${s.length} chars)` : JSON.stringify(s);

function describeRequest(target: Target, c: FuzzCase, wire: WireRequest): string {
  const headers = wire.headers.map(([n, v]) => `${n}: ${v.length > 120 ? `${v.slice(0, 120)}… (${v.length})` : v}`);
  return [
    `app "${target.name}", case: ${c.labels.join(' | ')}`,
    `${wire.method} ${wire.url.length > 300 ? `${wire.url.slice(0, 300)}… (${wire.url.length})` : wire.url}${c.socket ? ` over a socket (${c.socket.kind})` : ''}`,
    ...headers.map((h) => `  ${h}`),
    `  body: ${wire.body === undefined ? 'none' : `${wire.body.length} bytes ${preview(wire.body.toString('utf8'), 300)}`}`,
  ].join('\n');
}

async function withDeadline<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`hang: no answer within ${DEADLINE_MS} ms to ${what}`)), DEADLINE_MS);
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/** Per operation: what ran and what came back. */
interface Tally {
  cases: number;
  byDimension: Map<string, { cases: number; ms: number }>;
  /** The slowest case: its time and what it was. */
  slowest: { ms: number; what: string };
  /** "200", or "400 (HTTP layer)" for the HTTP layer's own answers. */
  byStatus: Map<string, number>;
}

/** Counts a case of the run (not the replays of shrinking). */
function record(tally: Tally, c: FuzzCase, answer: Answer, ms: number): void {
  if (ms > tally.slowest.ms) tally.slowest = { ms, what: `${c.labels.join(' | ')} → ${answer.status}` };
  tally.cases++;
  const dimension = tally.byDimension.get(c.dimension) ?? { cases: 0, ms: 0 };
  tally.byDimension.set(c.dimension, { cases: dimension.cases + 1, ms: dimension.ms + ms });
  const statusKey = answer.fromHttpLayer ? `${answer.status} (HTTP layer)` : String(answer.status);
  tally.byStatus.set(statusKey, (tally.byStatus.get(statusKey) ?? 0) + 1);
}

/** Where a case stands, for the watchdog's report of a hang. */
interface RunContext {
  op: OperationModel;
  targets: Target[];
  tally: Tally;
  watchdog: Watchdog;
  /** How many cases of the operation ran before this one (the fast-check path of the case, before any shrinking). */
  index: number;
  /** When a case first failed (the later ones are fast-check shrinking it), or undefined. */
  failedAt: number | undefined;
}

async function runCase(c: FuzzCase, context: RunContext): Promise<void> {
  const { op, targets, tally, watchdog } = context;
  const target = targets[c.target % targets.length] as Target;
  const started = performance.now();
  const authorization = authorizationHeader(c.auth, tokenSource(target), c.pick);
  const resolve = (kind: FixtureKind) => fixtureValue(target, kind, c.pick, authorization);
  const { wire, body } = wireRequest(op, c, resolve, authorization);
  const violationsBefore = violations.length;
  const replay =
    context.failedAt !== undefined
      ? `while shrinking a failure of ${op.id} (seed ${SEED})`
      : `replay: FUZZ_SEED=${SEED} FUZZ_RUNS=${RUNS} FUZZ_ONLY=${op.id} FUZZ_PATH=${REPLAY_PATH ?? context.index} npx tap ${shardFile}`;
  watchdog.arm(`${describeRequest(target, c, wire)}\ncase: ${fc.stringify(c).slice(0, 4000)}\n${replay}`);

  let answer: Answer;
  let layer: 400 | 431 | 'either' | undefined;
  /** The second Authorization header of a duplicateAuthorization case. */
  let sentSecond: string | undefined;
  if (c.socket === null) {
    // Repeated headers as arrays: light-my-request combines them as Node does (the first of a
    // singleton such as Authorization, cookies joined with "; ", the others with ", ").
    const headers: Record<string, string[]> = Object.create(null); // a header may be named __proto__
    for (const [name, value] of wire.headers) {
      const key = name.toLowerCase();
      headers[key] = [...(headers[key] ?? []), value];
    }
    const res = await withDeadline(
      target.app.inject({
        method: wire.method as 'GET',
        url: wire.url,
        headers,
        ...(wire.body ? { payload: wire.body } : {}),
      }),
      `${wire.method} ${wire.url.slice(0, 100)}`,
    );
    answer = {
      status: res.statusCode,
      headers: res.headers as Answer['headers'],
      body: res.body,
      fromHttpLayer: false,
    };
  } else {
    // What goes on the wire as the second header (a spec of "none" still sends one).
    const second =
      c.socket.kind === 'duplicateAuthorization'
        ? (authorizationHeader(c.socket.second, tokenSource(target), c.pick + 1) ?? SECOND_AUTHORIZATION_FALLBACK)
        : undefined;
    sentSecond = second;
    const raw = socketBytes(wire, c.socket, second);
    layer = raw.layer;
    const outcome = await withDeadline(
      rawRequest(target.port, raw.bytes, DEADLINE_MS),
      `${wire.method} ${wire.url.slice(0, 100)} over a socket`,
    );
    if (outcome.kind === 'closed') {
      throw new Error(
        `the connection was closed without an answer (${outcome.error ?? 'no error'})\n${describeRequest(target, c, wire)}`,
      );
    }
    const r = outcome.response;
    answer = {
      status: r.status,
      headers: r.headers,
      body: r.body,
      fromHttpLayer: r.headers['x-request-id'] === undefined,
    };
  }

  const ms = performance.now() - started;
  if (context.failedAt === undefined) record(tally, c, answer, ms);

  const problems: string[] = [];
  const contentType = String([answer.headers['content-type'] ?? ''].flat()[0] ?? '');
  let parsed: unknown;
  if (/^application\/json/i.test(contentType) && answer.body !== '') {
    try {
      parsed = JSON.parse(answer.body);
    } catch {
      problems.push('a JSON content type with a body that is not JSON');
    }
  }

  const router = routerExpectation(op, c.params, resolve);
  /** What the contract says of this answer as `operation`'s. */
  const answerProblem = (operation: OperationModel) =>
    contractProblem({
      method: operation.method,
      routePath: operation.routePath,
      status: answer.status,
      contentType,
      body: answer.body === '' ? undefined : answer.body,
    });
  if (answer.fromHttpLayer) {
    const codeFor: Record<number, string> = { 400: 'INVALID_INPUT', 408: 'REQUEST_TIMEOUT', 431: 'HEADERS_TOO_LARGE' };
    if (codeFor[answer.status] === undefined)
      problems.push(`the HTTP layer answered ${answer.status} (only 400, 408 and 431 are its own)`);
    const shape = errorBodyProblem(parsed, answer.status);
    if (shape) problems.push(`the HTTP layer's answer: ${shape}`);
    else if ((parsed as { error: string }).error !== codeFor[answer.status])
      problems.push(`the HTTP layer's ${answer.status} has the code ${(parsed as { error: string }).error}`);
    if (layer === undefined) problems.push('the HTTP layer refused a request that is valid HTTP/1.1');
    else if (layer !== 'either' && layer !== answer.status) problems.push(`expected the HTTP layer's ${layer}`);
  } else if (router !== undefined) {
    // The URL does not address the operation. When the path it resolves to is another operation's,
    // that operation answers (its own rules, authentication first); otherwise the router does,
    // before authentication and body.
    if (layer === 400 || layer === 431) problems.push(`expected the HTTP layer's ${layer}, but the router answered`);
    const other = router.changesPath ? operationAt(wire.method, wire.url) : undefined;
    if (other !== undefined) {
      if (answer.status >= 500) problems.push(`${router.why} to ${other.id}'s path: a ${answer.status}`);
      const problem = answerProblem(other);
      if (problem) problems.push(`${router.why} to ${other.id}'s path: contract: ${problem}`);
    } else if (!router.statuses.includes(answer.status))
      problems.push(`${router.why}: expected the router's ${router.statuses.join(' or ')}, got ${answer.status}`);
    const shape = answer.status >= 200 && answer.status < 300 ? undefined : errorBodyProblem(parsed, answer.status);
    if (shape) problems.push(shape);
    if (violations.length > violationsBefore)
      problems.push(`contract check of the app: ${violations.slice(violationsBefore).join('; ')}`);
  } else {
    if (layer === 400 || layer === 431) problems.push(`expected the HTTP layer's ${layer}, but the operation answered`);
    if (answer.status >= 500) problems.push(`a ${answer.status}`);
    const problem = answerProblem(op);
    if (problem) problems.push(`contract: ${problem}`);
    if (violations.length > violationsBefore)
      problems.push(`contract check of the app: ${violations.slice(violationsBefore).join('; ')}`);
    if ((answer.status < 200 || answer.status >= 300) && parsed !== undefined) {
      const shape = errorBodyProblem(parsed, answer.status);
      if (shape) problems.push(shape);
    }

    // What the spec promises for this case in particular. Node keeps the first of repeated
    // Authorization and Content-Type headers: the case's own, or the added one when the case had none.
    // (Decided by the case, not by comparing the specs: two "none" specs may be one object.)
    const secondCounts = c.socket?.kind === 'duplicateAuthorization' && c.auth.kind === 'none';
    const effectiveAuth = c.socket?.kind === 'duplicateAuthorization' && secondCounts ? c.socket.second : c.auth;
    const effectiveContentType =
      c.socket?.kind === 'duplicateContentType' && c.contentType === null ? c.socket.second : c.contentType;
    const effectiveHeader = secondCounts ? sentSecond : authorization;
    const received = effectiveHeader === undefined ? undefined : wireHeaderValue(effectiveHeader);
    // An operation whose token is optional checks one that is sent as a secured operation does.
    const checked = op.secured || (op.optionalToken && received !== undefined);
    const expected = checked ? authExpectation(effectiveAuth, received) : 'pass';
    const code = (parsed as { error?: string } | undefined)?.error;
    if (expected !== 'pass' && (answer.status !== 401 || code !== expected)) {
      problems.push(
        `a bad token (${describeAuth(effectiveAuth)}) must get 401 ${expected}, got ${answer.status} ${code ?? ''}`,
      );
    }
    // The fuzzed operations end sessions too (logout, refresh-token reuse, a password change):
    // their tokens are refused with SESSION_REVOKED, and only those. (A 401 with another code is
    // the operation's own answer about what it checks, a passkey assertion's PASSKEY_REFUSED.)
    let sessionWasEnded = false;
    const tokenRefused = code === 'UNAUTHORIZED' || code === 'AUTH_UNAUTHORIZED' || code === 'SESSION_REVOKED';
    if (checked && effectiveAuth.kind === 'session' && answer.status === 401 && tokenRefused) {
      sessionWasEnded = code === 'SESSION_REVOKED' && (await sessionEnded(target, effectiveHeader));
      if (!sessionWasEnded) problems.push('the token of a live session was refused');
    }
    const authPasses = expected === 'pass' && !sessionWasEnded;
    const bytes = wire.body?.length ?? 0;
    if (op.bodyLimit !== undefined && wire.body !== undefined && authPasses && isJsonMediaType(effectiveContentType)) {
      if (bytes > op.bodyLimit && answer.status !== 413)
        problems.push(`a ${bytes}-byte body over the ${op.bodyLimit}-byte limit must get 413`);
    }
    if (op.bodyLimit !== undefined && bytes <= op.bodyLimit && answer.status === 413) {
      problems.push(`413 for a ${bytes}-byte body, within the ${op.bodyLimit}-byte limit`);
    }
    const invalid =
      parametersVerdict(op, c.params, resolve) === false ||
      bodyVerdict(op, body, wire.body, effectiveContentType) === false;
    if (invalid && authPasses && (answer.status < 400 || answer.status >= 500)) {
      problems.push(`a request the spec does not allow was answered ${answer.status}`);
    }
    if (c.dimension === 'valid') {
      // The generator's own check: what it calls valid is valid by the spec.
      if (parametersVerdict(op, c.params, resolve) === false)
        problems.push('generator bug: "valid" parameters are invalid by the spec');
      if (bodyVerdict(op, body, wire.body, c.contentType) === false)
        problems.push('generator bug: a "valid" body is invalid by the spec');
      if (answer.status === 413 || answer.status === 415) problems.push(`a valid request got ${answer.status}`);
    }
  }

  if (problems.length > 0) {
    watchdog.arm(`shrinking a failure of ${op.id} (seed ${SEED})`);
    throw new Error(
      `${problems.join('\n')}\n${describeRequest(target, c, wire)}\n→ ${answer.status}${answer.fromHttpLayer ? ' (HTTP layer)' : ''} ${contentType} ${preview(answer.body, 600)}`,
    );
  }
  if (!answer.fromHttpLayer) absorb(target, answer, body.kind === 'json' ? body.value : undefined);
  watchdog.arm(`generating the case after #${context.index} of ${op.id} (seed ${SEED})`);
}

// ---------------------------------------------------------------------------------------------

/** The test file running this share of the operations (named in the replay lines). */
let shardFile = 'test/fuzz.test.ts';

/**
 * Fuzzes share `shard` of `shards` of the operations (every shards-th one in contract order,
 * starting at shard); share 0 also checks the generator and the fixed regressions.
 */
export function fuzzShare(shard: number, shards: number, file: string): void {
  shardFile = file;
  t.test(
    `fuzzing operations of openapi.yaml, share ${shard + 1} of ${shards} (seed ${SEED}, ${RUNS} cases per operation)`,
    async (t) => {
      t.comment(
        `fuzz seed ${SEED}: replay with FUZZ_SEED=${SEED} (and FUZZ_RUNS=${RUNS}); FUZZ_RUNS sets the cases per operation`,
      );
      const watchdog = startWatchdog(BLOCKED_MS);
      t.teardown(() => watchdog.stop());
      const { upstream, idp, github } = await startOutsideParts(t);
      const oauth = {
        idp,
        github,
        idToken: await idp.issueIdToken({ clientId: SERVICE_CLIENT.clientId, login: 'fuzz-id' }),
      };
      const open = await startTarget(
        t,
        'open (no email verification)',
        { REQUIRE_EMAIL_VERIFICATION: 'false' },
        upstream.baseUrl,
        oauth,
      );
      const verifying = await startTarget(
        t,
        'verifying (email verification, redirect)',
        { REQUIRE_EMAIL_VERIFICATION: 'true', AUTH_REDIRECT_URL: 'https://app.example.com/welcome' },
        upstream.baseUrl,
        oauth,
      );
      await seedSessions(open, false);
      await seedSessions(verifying, true);
      await seedRealtime(open);
      await seedRealtime(verifying);
      const targets = [open, verifying];

      if (shard === 0)
        await t.test('the generator: every schema of openapi.yaml yields values the spec accepts', async (t) => {
          const schemas = (specDocument.components as { schemas: Record<string, unknown> }).schemas;
          for (const name of Object.keys(schemas)) {
            const validate = specValidator('components', 'schemas', name);
            const details = await fc.check(
              fc.property(valueArbitrary({ $ref: `#/components/schemas/${name}` }), (value) => {
                if (!validate(value)) throw new Error(JSON.stringify(validate.errors?.slice(0, 3)));
              }),
              { seed: SEED, numRuns: 100 },
            );
            t.notOk(
              details.failed,
              `${name}: generated values are valid`,
              details.failed ? { report: fc.defaultReportMessage(details) } : {},
            );
          }
        });

      // getMetrics is served only when switched on and takes its own token, not a session: test/metrics.test.ts.
      const fuzzed = operationIds.filter((id) => id !== 'getMetrics');
      if (ONLY.length > 0)
        t.same(
          fuzzed.filter((id) => ONLY.includes(id)).length,
          ONLY.length,
          `FUZZ_ONLY names operations of the contract (${ONLY.join(', ')})`,
        );
      const share = fuzzed.filter((_, i) => i % shards === shard);
      const ids = ONLY.length > 0 ? share.filter((id) => ONLY.includes(id)) : share;
      const counts: string[] = [];
      for (const id of ids) {
        await t.test(`${id} (seed ${SEED})`, async (t) => {
          let op: OperationModel;
          try {
            op = operationModel(id);
          } catch (err) {
            t.fail(`${id} has no generator: ${(err as Error).message}`);
            return;
          }
          const tally: Tally = { cases: 0, byDimension: new Map(), byStatus: new Map(), slowest: { ms: 0, what: '' } };
          const started = performance.now();
          const context: RunContext = { op, targets, tally, watchdog, index: 0, failedAt: undefined };
          watchdog.arm(`generating the first case of ${id} (seed ${SEED})`);
          const details = await fc.check(
            fc.asyncProperty(caseArbitrary(op, targets.length), async (c) => {
              // Shrinking replays requests (some of them megabytes): past its budget, the candidates
              // left are passed over, and the smallest failing case found so far is the one reported.
              if (context.failedAt !== undefined && performance.now() - context.failedAt > SHRINK_BUDGET_MS) return;
              try {
                await runCase(c, context);
              } catch (err) {
                context.failedAt ??= performance.now();
                throw err;
              } finally {
                context.index++;
              }
            }),
            { seed: SEED, numRuns: RUNS, ...(REPLAY_PATH ? { path: REPLAY_PATH } : {}) },
          );
          watchdog.disarm();
          const seconds = ((performance.now() - started) / 1000).toFixed(1);
          const statuses = [...tally.byStatus]
            .sort(([a], [b]) => a.localeCompare(b))
            .map(([s, n]) => `${s} ×${n}`)
            .join(', ');
          const dimensions = [...tally.byDimension]
            .map(([d, { cases, ms }]) => `${d} ${cases} in ${(ms / 1000).toFixed(1)} s`)
            .join(', ');
          t.comment(`${id}: ${details.numRuns} cases in ${seconds} s (${dimensions}); answers ${statuses}`);
          t.comment(`${id}: slowest case ${Math.round(tally.slowest.ms)} ms (${tally.slowest.what})`);
          counts.push(`${id} ${details.numRuns}`);
          if (details.failed) {
            const error =
              details.errorInstance instanceof Error ? details.errorInstance.message : String(details.errorInstance);
            t.fail(
              `${fc.defaultReportMessage(details)}\n\n${error}\n\nreplay: FUZZ_SEED=${details.seed} FUZZ_ONLY=${id} FUZZ_PATH=${JSON.stringify(details.counterexamplePath)} npx tap ${shardFile}`,
            );
            return;
          }
          t.ok(
            details.numRuns >= (REPLAY_PATH ? 1 : RUNS),
            `${details.numRuns} cases of ${id}, each answered as the spec says`,
          );
        });
      }
      t.comment(`cases per operation: ${counts.join(', ')}`);
      if (ONLY.length === 0 && shard === 0) {
        await regressions(t, open);
        await knownBugs(t, open);
      }
    },
  );
}

/** What this fuzzer found and what was fixed (src/contract-routes.ts, src/auth/access-token.ts), as fixed requests. */
async function regressions(t: Test, target: Target): Promise<void> {
  await t.test('fixed: a deeply nested JSON body is a 400, not a 500 (the call stack)', async (t) => {
    for (const [open, close] of [
      ['[', ']'],
      ['{"a":[', ']}'],
    ] as const) {
      const depth = Math.floor(16_000 / (open.length + close.length));
      const res = await target.app.inject({
        method: 'POST',
        url: '/api/auth/users',
        headers: { 'content-type': 'application/json' },
        payload: `${open.repeat(depth)}1${close.repeat(depth)}`,
      });
      t.equal(res.statusCode, 400, `${depth} levels of ${open}: ${res.body}`);
    }
  });
  await t.test('fixed: a token signed with the key but without iss, aud or a well-formed sub is a 401', async (t) => {
    const now = Math.floor(Date.now() / 1000);
    const user = target.tokens.user.pick(0) ?? '';
    const claims = JSON.parse(Buffer.from(user.split('.')[1] ?? '', 'base64url').toString('utf8'));
    const { iss: _iss, ...withoutIssuer } = claims;
    const { aud: _aud, ...withoutAudience } = claims;
    for (const [what, changed] of [
      ['no iss', { ...withoutIssuer, exp: now + 600 }],
      ['no aud', { ...withoutAudience, exp: now + 600 }],
      ['sub not a UUID', { ...claims, sub: 'not-a-uuid', exp: now + 600 }],
      ['role unknown', { ...claims, role: 'superuser', exp: now + 600 }],
    ] as const) {
      const res = await target.app.inject({
        url: '/api/auth/sessions/current',
        headers: { authorization: `Bearer ${forgeJwt(target.signingKey, changed)}` },
      });
      t.equal(res.statusCode, 401, `${what}: ${res.body}`);
    }
  });
}

/** Bugs this fuzzer found in the HTTP layer and the token counting, as fixed requests. */
async function knownBugs(t: Test, target: Target): Promise<void> {
  await t.test(
    'an HTTP/1.1 request without Host is answered in the Error shape (Node answered an empty 400)',
    async (t) => {
      const outcome = await rawRequest(
        target.port,
        Buffer.from('GET /api/health HTTP/1.1\r\nConnection: close\r\n\r\n'),
        5000,
      );
      t.equal(outcome.kind, 'answer');
      if (outcome.kind !== 'answer') return;
      t.equal(outcome.response.status, 400);
      t.match(String(outcome.response.headers['content-type'] ?? ''), /^application\/json/);
      t.notOk(
        errorBodyProblem(outcome.response.body === '' ? undefined : JSON.parse(outcome.response.body), 400),
        'an Error body',
      );
    },
  );
  await t.test(
    'an 8 MiB embeddings input of one unbroken run of characters is a 400, not a 500 (the regexp stack overflowed)',
    async (t) => {
      // A token of a session still live: the fuzzed operations may have ended the first ones
      // (any signed-in caller may embed, an administrator too), all of them even (an
      // administrator's removal of an account's factors ends its sessions): then a token the
      // service signs for a caller of its own.
      let token = accessTokenFor(target.app, 'user');
      for (const candidate of [...target.tokens.user.items, ...target.tokens.admin.items]) {
        if (!(await sessionEnded(target, `Bearer ${candidate}`))) {
          token = candidate;
          break;
        }
      }
      const res = await target.app.inject({
        method: 'POST',
        url: '/api/ai/embeddings',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        payload: JSON.stringify({ model: 'local/lexical-v1', input: 'a'.repeat(8_388_000) }),
      });
      t.equal(res.statusCode, 400, res.body);
    },
  );
}
