import { createPublicKey, randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import type { InjectOptions } from 'fastify';
import t from 'tap';
import { errorCodes, type OperationId, operationIds, operations } from '../generated/contract.ts';
import { resolveJwtSecret } from '../src/auth/service-secret.ts';
import type { AppContext } from '../src/context.ts';
import { createServiceHandlers } from '../src/handlers/index.ts';
import { specDocument } from '../src/spec.ts';
import { buildTestApp } from './helpers/app.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { accessClaims, accessTokenFor, currentSigningKey, forgeJwt } from './helpers/tokens.ts';

type SpecOperation = {
  parameters?: Array<{ $ref?: string; in?: string; name?: string; schema?: { maxLength?: number } }>;
  requestBody?: unknown;
  security?: Array<Record<string, unknown>>;
};
const paths = specDocument.paths as Record<string, Record<string, SpecOperation>>;
const specOperation = (id: OperationId): SpecOperation => {
  const op = operations[id];
  return paths[op.path]?.[op.method.toLowerCase()] as SpecOperation;
};

t.test('every operationId in openapi.yaml has exactly one handler, and nothing else does', async (t) => {
  const handlers = createServiceHandlers({} as AppContext);
  t.same(Object.keys(handlers).sort(), [...operationIds].sort());
  for (const id of operationIds) t.type(handlers[id], 'function', `${id} is a function`);
});

t.test('every route of the contract is registered with its method', async (t) => {
  const { app } = await buildTestApp(t);
  for (const id of operationIds) {
    const { method, path } = operations[id];
    // Fastify writes path parameters as :name, OpenAPI as {name}.
    const url = path.replace(/\{(\w+)\}/g, ':$1');
    t.ok(app.hasRoute({ method, url }), `${method} ${path} (${id})`);
  }
});

t.test("every error code the code can produce is in the spec's ErrorCode enum", async (t) => {
  const srcDir = path.resolve(import.meta.dirname, '..', 'src');
  const files = readdirSync(srcDir, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts'));
  const found = new Set<string>();
  for (const file of files) {
    const text = readFileSync(path.join(srcDir, file), 'utf8');
    for (const m of text.matchAll(/new ApiError\(\s*'([A-Z_]+)'/g)) found.add(m[1] as string);
    for (const m of text.matchAll(/\berror: '([A-Z_]+)'/g)) found.add(m[1] as string);
    for (const m of text.matchAll(/^\s+\d{3}: '([A-Z_]+)',$/gm)) found.add(m[1] as string);
  }
  t.ok(found.size >= 10, `found ${found.size} codes in src/`);
  for (const code of found) t.ok((errorCodes as readonly string[]).includes(code), `${code} is in the enum`);
});

// A request to each operation that breaks its declared input, sent with a valid token where one is needed.
function malformedRequest(id: OperationId, token: string): InjectOptions | undefined {
  const { method, secured } = operations[id];
  // Path parameters are filled with something their schema refuses (each is a UUID).
  // A kid may be any 1 to 64 of [A-Za-z0-9_-] (not-a-uuid is one): it gets a space instead.
  const path = operations[id].path.replace('{kid}', 'not%20a%20kid').replace(/\{\w+\}/g, 'not-a-uuid');
  const op = specOperation(id);
  const headers: Record<string, string> = secured ? { authorization: `Bearer ${token}` } : {};
  // A query parameter with a length limit (the OAuth callback's, whose provider name any
  // configured provider could have) gets a value over it.
  const longQuery = (op.parameters ?? []).find((p) => p.in === 'query' && p.schema?.maxLength !== undefined);
  if (op.requestBody === undefined && longQuery?.name !== undefined && longQuery.schema?.maxLength !== undefined) {
    return {
      method,
      url: `${path}?${longQuery.name}=${'x'.repeat(longQuery.schema.maxLength + 1)}`,
      headers,
    } as InjectOptions;
  }
  if (op.requestBody !== undefined || operations[id].path.includes('{')) {
    return { method, url: path, headers, payload: { unexpectedField: true } } as InjectOptions;
  }
  const queryParameter = (op.parameters ?? []).find((p) => p.$ref?.includes('parameters/') || p.in === 'query');
  if (queryParameter !== undefined) {
    return { method, url: `${path}?limit=not-a-number&offset=-1&client_type=tv`, headers } as InjectOptions;
  }
  // A header parameter with a length limit gets a value over it.
  const headerParameter = (op.parameters ?? []).find((p) => p.in === 'header' && p.schema?.maxLength !== undefined);
  if (headerParameter?.name !== undefined && headerParameter.schema?.maxLength !== undefined) {
    headers[headerParameter.name.toLowerCase()] = 'x'.repeat(headerParameter.schema.maxLength + 1);
    return { method, url: path, headers } as InjectOptions;
  }
  return undefined;
}

t.test('a malformed request to each operation that takes input gets 400 in the Error schema', async (t) => {
  const { app } = await buildTestApp(t);
  const token = accessTokenFor(app, 'admin');
  const withoutInput: string[] = [];
  for (const id of operationIds) {
    const request = malformedRequest(id, token);
    if (request === undefined) {
      withoutInput.push(id);
      continue;
    }
    const res = await app.inject(request);
    // A profile's or factor's id that is not a UUID is answered as an unknown one (no shape of id stands out).
    if (id === 'getProfile' || id === 'deleteFactor' || id === 'deletePasskey' || id === 'unlinkIdentity') {
      assertErrorBody(t, res, 404, 'NOT_FOUND');
    } else assertErrorBody(t, res, 400, 'INVALID_INPUT');
  }
  t.same(
    withoutInput.sort(),
    [
      'createPasskeyRegistrationOptions',
      'getCurrentSession',
      'getHealth',
      'getJwks',
      'getMetrics',
      'getOpenIdConfiguration',
      'getRealtimePermissions',
      'listFactors',
      'listIdentities',
      'listPasskeys',
      'listRealtimeChannels',
      'listSessions',
      'listSigningKeys',
      'regenerateRecoveryCodes',
      'rotateSigningKeys',
    ],
    'only operations with no parameters and no body are exempt',
  );
});

const publicPemOf = (privatePem: string) =>
  createPublicKey(privatePem).export({ type: 'spki', format: 'pem' }) as string;

t.test('secured operations refuse a missing, malformed, foreign-key or refresh-typed token', async (t) => {
  const { app, config, database } = await buildTestApp(t);
  // Operations behind access tokens; getMetrics has a scheme of its own (test/metrics.test.ts).
  const secured = operationIds.filter((id) => operations[id].bearer);
  t.same(
    secured.sort(),
    [
      'changePassword',
      'createEmbeddings',
      'getCurrentSession',
      'getRealtimePermissions',
      'listUsers',
      'getUser',
      'updateUser',
      'deleteUsers',
      'getProfile',
      'updateCurrentProfile',
      'listRealtimeChannels',
      'createRealtimeChannel',
      'updateRealtimeChannel',
      'deleteRealtimeChannel',
      'publishRealtimeMessage',
      'listRealtimeMessages',
      'listSigningKeys',
      'createSigningKey',
      'rotateSigningKeys',
      'revokeSigningKey',
      'deleteUserFactors',
      'listFactors',
      'createFactor',
      'deleteFactor',
      'regenerateRecoveryCodes',
      'verifyMfa',
      'listPasskeys',
      'createPasskeyRegistrationOptions',
      'verifyPasskeyRegistration',
      'updatePasskey',
      'deletePasskey',
      'listSessions',
      'endSessions',
      'endSession',
      'listUserSessions',
      'endUserSessions',
      'listIdentities',
      'startIdentityLink',
      'unlinkIdentity',
      'listAuditEvents',
      'listOwnAuditEvents',
      'listWebhookDeliveries',
    ].sort(),
  );
  const jwtSecret = await resolveJwtSecret(config, database.handle.db);
  const secret = await currentSigningKey(config, database.handle.db);
  const now = Math.floor(Date.now() / 1000);
  const { privatePem } = secret;
  const tokens: Array<[string, string | undefined, string]> = [
    ['missing', undefined, 'UNAUTHORIZED'],
    ['not a JWT', 'Bearer not-a-token', 'AUTH_UNAUTHORIZED'],
    ['alg none', `Bearer ${forgeJwt(null, accessClaims(now), 'none')}`, 'AUTH_UNAUTHORIZED'],
    ['signed with another key', `Bearer ${forgeJwt('x'.repeat(32), accessClaims(now))}`, 'AUTH_UNAUTHORIZED'],
    // A fresh deployment never accepts HS256, even signed with JWT_SECRET itself.
    ['HS256 with JWT_SECRET', `Bearer ${forgeJwt(jwtSecret, accessClaims(now))}`, 'AUTH_UNAUTHORIZED'],
    ['HS512 with JWT_SECRET', `Bearer ${forgeJwt(jwtSecret, accessClaims(now), 'HS512')}`, 'AUTH_UNAUTHORIZED'],
    [
      'the right key under an unknown kid',
      `Bearer ${forgeJwt({ ...secret, kid: 'unknown' }, accessClaims(now))}`,
      'AUTH_UNAUTHORIZED',
    ],
    [
      'the right key without a kid',
      `Bearer ${forgeJwt({ ...secret, kid: '' }, accessClaims(now))}`,
      'AUTH_UNAUTHORIZED',
    ],
    [
      'the public key as an HMAC secret (algorithm confusion)',
      `Bearer ${forgeJwt(publicPemOf(privatePem), accessClaims(now))}`,
      'AUTH_UNAUTHORIZED',
    ],
    [
      'refresh token as access token',
      `Bearer ${forgeJwt(secret, accessClaims(now, { token_use: 'refresh' }))}`,
      'AUTH_UNAUTHORIZED',
    ],
    ['another audience', `Bearer ${forgeJwt(secret, accessClaims(now, { aud: 'elsewhere' }))}`, 'AUTH_UNAUTHORIZED'],
    ['another issuer', `Bearer ${forgeJwt(secret, accessClaims(now, { iss: 'elsewhere' }))}`, 'AUTH_UNAUTHORIZED'],
    ['expired', `Bearer ${forgeJwt(secret, accessClaims(now - 3600))}`, 'AUTH_UNAUTHORIZED'],
    ['Basic scheme', 'Basic dXNlcjpwYXNz', 'UNAUTHORIZED'],
  ];
  const valid = forgeJwt(secret, accessClaims(now, { role: 'admin' }));
  const control = await app.inject({ url: '/api/auth/users', headers: { authorization: `Bearer ${valid}` } });
  t.not(
    control.statusCode,
    401,
    'the same forging helper makes a token that passes, so the refusals below are meaningful',
  );
  // An operation whose token is optional refuses the same tokens when one is sent (not as if none was).
  const optional = operationIds.filter((id) => operations[id].optionalBearer);
  t.same(optional.sort(), ['createPasskeyAuthenticationOptions', 'verifyPasskeyAuthentication']);
  for (const id of [...secured, ...optional]) {
    const { method, path } = operations[id];
    for (const [label, authorization, code] of tokens) {
      if (authorization === undefined && optional.includes(id)) continue;
      const res = await app.inject({
        method,
        url: path.replace(/\{\w+\}/g, randomUUID()),
        headers: authorization === undefined ? {} : { authorization },
        ...(method === 'POST' || method === 'PATCH' ? { payload: { model: 'local/x', input: 'hi' } } : {}),
      } as InjectOptions);
      t.test(`${id}: ${label}`, async (t) => {
        assertErrorBody(t, res, 401, code);
      });
    }
  }
});

t.test('every operation is documented: summary, description, tag, examples, its error responses', async (t) => {
  const components = specDocument.components as { responses: Record<string, { content?: Record<string, object> }> };
  type Documented = SpecOperation & {
    summary?: string;
    description?: string;
    tags?: string[];
    requestBody?: { content?: Record<string, { example?: unknown; examples?: unknown }> };
    responses: Record<string, { $ref?: string; content?: Record<string, { example?: unknown; examples?: unknown }> }>;
  };
  for (const id of operationIds) {
    const op = specOperation(id) as Documented;
    t.ok(op.summary && op.description && op.tags?.length === 1, `${id}: summary, description and one tag`);
    const body = op.requestBody?.content?.['application/json'];
    if (body) t.ok(body.example ?? body.examples, `${id}: request example`);
    for (const [status, response] of Object.entries(op.responses)) {
      const resolved = response.$ref ? components.responses[response.$ref.split('/').pop() as string] : response;
      const json = resolved?.content?.['application/json'] as { example?: unknown; examples?: unknown } | undefined;
      if (json) t.ok(json.example ?? json.examples, `${id} ${status}: response example`);
    }
    const declared = Object.keys(op.responses);
    const expected = ['500'];
    if (operations[id].secured) expected.push('401');
    if (body) expected.push('400', '413', '415');
    for (const status of expected) t.ok(declared.includes(status), `${id} declares ${status}`);
  }
  t.match((specDocument.info as { version: string }).version, /^\d+\.\d+\.\d+$/, 'info.version is semver');
  const changelog = readFileSync(path.resolve(import.meta.dirname, '..', 'CHANGELOG.md'), 'utf8');
  t.match(
    changelog,
    `## ${(specDocument.info as { version: string }).version}`,
    'CHANGELOG.md has an entry for the version',
  );
});
