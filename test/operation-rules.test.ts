import type { InjectOptions } from 'fastify';
import t from 'tap';
import { type OperationId, operationIds, operations } from '../generated/contract.ts';
import { specDocument } from '../src/spec.ts';
import { buildTestApp } from './helpers/app.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { accessTokenFor } from './helpers/tokens.ts';

// What openapi.yaml must keep declaring. An operation that loses (or gains) `x-roles` or
// `x-rate-limit` fails here: the hook that applies them reads nothing else.
const administratorsOnly: OperationId[] = [
  'listUsers',
  'getUser',
  'updateUser',
  'deleteUsers',
  'listRealtimeChannels',
  'createRealtimeChannel',
  'updateRealtimeChannel',
  'deleteRealtimeChannel',
  'listSigningKeys',
  'createSigningKey',
  'rotateSigningKeys',
  'revokeSigningKey',
  'deleteUserFactors',
  'listUserSessions',
  'endUserSessions',
  'listAuditEvents',
  'listWebhookDeliveries',
];
// The operations a session that owes its second step may call (x-aal: aal1); every other one
// answers it 403 MFA_REQUIRED.
const beforeSecondStep: OperationId[] = [
  'getCurrentSession',
  'listFactors',
  'verifyMfa',
  'createPasskeyAuthenticationOptions',
  'verifyPasskeyAuthentication',
];
const limited: Partial<Record<OperationId, string>> = {
  createSession: 'signIn by ip',
  createUser: 'signUp by ip',
  verifyEmail: 'verify by ip',
  sendVerificationEmail: 'sendVerification by ip',
  refreshSession: 'refresh by ip',
  logout: 'refresh by ip',
  sendOtpEmail: 'sendVerification by ip',
  sendResetPasswordEmail: 'sendVerification by ip',
  exchangeResetPasswordToken: 'verify by ip',
  resetPassword: 'verify by ip',
  getOAuthAuthorizationUrl: 'signIn by ip',
  getCustomOAuthAuthorizationUrl: 'signIn by ip',
  handleOAuthCallback: 'signIn by ip',
  exchangeOAuthCode: 'verify by ip',
  signInWithIdToken: 'signIn by ip',
  createEmbeddings: 'embeddings by user',
  publishRealtimeMessage: 'realtimePublish by user',
  verifyMfa: 'verify by ip',
  createPasskeyAuthenticationOptions: 'signIn by ip',
  verifyPasskeyAuthentication: 'verify by ip',
  startIdentityLink: 'signIn by ip',
};

t.test('the contract declares who may call each operation and its rate limits', async (t) => {
  for (const id of operationIds) {
    const { roles, rateLimits, aal } = operations[id];
    t.same(roles, administratorsOnly.includes(id) ? ['admin'] : null, `${id}: x-roles`);
    t.equal(aal, beforeSecondStep.includes(id) ? 'aal1' : 'account', `${id}: x-aal`);
    const declared = rateLimits.map((l) => `${l.name} by ${l.by}`);
    t.same(declared, limited[id] === undefined ? [] : [limited[id]], `${id}: x-rate-limit`);
  }
});

const sample = '00000000-0000-4000-8000-000000000000';
const requests: Record<string, InjectOptions> = {
  listUsers: { method: 'GET', url: '/api/auth/users' },
  getUser: { method: 'GET', url: `/api/auth/users/${sample}` },
  updateUser: { method: 'PATCH', url: `/api/auth/users/${sample}`, payload: { role: 'admin' } },
  deleteUsers: { method: 'DELETE', url: '/api/auth/users', payload: { userIds: [sample] } },
  listRealtimeChannels: { method: 'GET', url: '/api/realtime/channels' },
  createRealtimeChannel: { method: 'POST', url: '/api/realtime/channels', payload: { pattern: 'room:%' } },
  updateRealtimeChannel: { method: 'PATCH', url: `/api/realtime/channels/${sample}`, payload: { enabled: false } },
  deleteRealtimeChannel: { method: 'DELETE', url: `/api/realtime/channels/${sample}` },
  listSigningKeys: { method: 'GET', url: '/api/auth/signing-keys' },
  createSigningKey: { method: 'POST', url: '/api/auth/signing-keys', payload: { alg: 'ES256' } },
  rotateSigningKeys: { method: 'POST', url: '/api/auth/signing-keys/rotate' },
  revokeSigningKey: { method: 'POST', url: '/api/auth/signing-keys/some-kid/revoke' },
  deleteUserFactors: { method: 'DELETE', url: `/api/auth/users/${sample}/factors` },
  listUserSessions: { method: 'GET', url: `/api/auth/users/${sample}/sessions` },
  endUserSessions: { method: 'DELETE', url: `/api/auth/users/${sample}/sessions` },
  listAuditEvents: { method: 'GET', url: '/api/auth/audit-log' },
  listWebhookDeliveries: { method: 'GET', url: '/api/auth/webhook-deliveries?status=failed' },
};

t.test('x-roles: a signed-in user who is not an administrator is refused', async (t) => {
  const { app } = await buildTestApp(t);
  const user = accessTokenFor(app, 'user');
  for (const id of administratorsOnly) {
    const request = requests[id];
    if (request === undefined) throw new Error(`no sample request for ${id}`);
    t.equal(operations[id].method, request.method, `${id}: the sample's method`);
    const headers = { authorization: `Bearer ${user}` };
    assertErrorBody(t, await app.inject({ ...request, headers }), 403, 'FORBIDDEN');
  }
});

t.test('a concrete path answers 405 to a method only its templated sibling takes', async (t) => {
  const { app } = await buildTestApp(t);
  const cases: Array<['GET' | 'HEAD', string, string]> = [
    ['GET', '/api/auth/oauth/exchange', 'POST'],
    ['HEAD', '/api/auth/oauth/exchange', 'POST'],
    ['GET', '/api/auth/profiles/current', 'PATCH'],
  ];
  for (const [method, url, allow] of cases) {
    const res = await app.inject({ method, url });
    if (method === 'HEAD') t.equal(res.statusCode, 405, `${method} ${url}: 405`);
    else assertErrorBody(t, res, 405, 'METHOD_NOT_ALLOWED');
    t.equal(res.headers.allow, allow, `${method} ${url}: Allow: ${allow}`);
  }
});

t.test('an unknown path, or a method its path does not take, is 404 or 405 whatever body comes with it', async (t) => {
  const { app } = await buildTestApp(t);
  const token = accessTokenFor(app, 'admin');
  const bodies: Array<[string, Record<string, string>, string]> = [
    ['a body over any limit', { 'content-type': 'application/json' }, `{"pad":"${'a'.repeat(20_000)}"}`],
    ['a body of another media type', { 'content-type': 'text/plain' }, 'hello'],
    ['an empty content type', { 'content-type': '' }, ''],
  ];
  for (const [what, headers, payload] of bodies) {
    const unknown = await app.inject({ method: 'POST', url: '/api/no-such-thing', headers, payload });
    assertErrorBody(t, unknown, 404, 'NOT_FOUND');
    // A kid of "." is a dot segment: the path is /api/auth/signing-keys/revoke, which no operation has.
    const dotted = await app.inject({
      method: 'POST',
      url: '/api/auth/signing-keys/%2e/revoke',
      headers: { ...headers, authorization: `Bearer ${token}` },
      payload,
    });
    assertErrorBody(t, dotted, 404, 'NOT_FOUND');
    const wrongMethod = await app.inject({ method: 'PUT', url: '/api/health', headers, payload });
    assertErrorBody(t, wrongMethod, 405, 'METHOD_NOT_ALLOWED');
    // An operation without a body ignores one.
    const rotate = await app.inject({
      method: 'POST',
      url: '/api/auth/signing-keys/rotate',
      headers: { ...headers, authorization: `Bearer ${token}` },
      payload,
    });
    t.equal(rotate.statusCode, 200, `rotate with ${what}: 200`);
  }
});

t.test('a limited GET has no HEAD of its own, which would count apart; a trailing slash is not a path', async (t) => {
  const { app } = await buildTestApp(t, { env: { RATE_LIMIT_SIGN_IN: '2' } });
  const url = '/api/auth/oauth/github?redirect_uri=http://localhost:3000/callback';
  for (let i = 0; i < 3; i++) {
    const head = await app.inject({ method: 'HEAD', url });
    t.equal(head.statusCode, 405, `HEAD ${i + 1}: 405, doing nothing`);
    t.equal(head.headers.allow, 'GET', `HEAD ${i + 1}: Allow: GET`);
  }
  const gets = [];
  for (let i = 0; i < 3; i++) gets.push((await app.inject({ method: 'GET', url })).statusCode);
  t.not(gets[1], 429, 'the HEADs took nothing from the GETs’ limit');
  t.equal(gets[2], 429, 'the third GET is over RATE_LIMIT_SIGN_IN=2');
  const user = accessTokenFor(app, 'admin');
  for (const path of [`/api/auth/users/${sample}/`, '/api/realtime/channels/']) {
    const res = await app.inject({ method: 'GET', url: path, headers: { authorization: `Bearer ${user}` } });
    assertErrorBody(t, res, 404, 'NOT_FOUND');
  }
});

type Schema = { $ref?: string; properties?: Record<string, Schema>; items?: Schema };
type Link = { operationId: string; parameters?: Record<string, string>; requestBody?: Record<string, string> };

t.test(
  'every OpenAPI link names an operation, fills what it takes, and reads a field the answer declares',
  async (t) => {
    const spec = specDocument as unknown as {
      paths: Record<
        string,
        Record<
          string,
          {
            operationId?: string;
            parameters?: Array<{ $ref?: string; name?: string }>;
            responses: Record<
              string,
              { links?: Record<string, { $ref: string }>; content?: Record<string, { schema: Schema }> }
            >;
          }
        >
      >;
      components: {
        links: Record<string, Link>;
        schemas: Record<string, Schema>;
        parameters: Record<string, { name: string }>;
      };
    };
    const resolve = (schema: Schema): Schema =>
      schema.$ref === undefined
        ? schema
        : resolve(spec.components.schemas[schema.$ref.split('/').pop() as string] as Schema);
    const fieldAt = (schema: Schema, pointer: string): Schema | undefined =>
      pointer
        .split('/')
        .filter(Boolean)
        .reduce<Schema | undefined>((s, part) => {
          if (s === undefined) return undefined;
          const r = resolve(s);
          return /^\d+$/.test(part) ? r.items : r.properties?.[part];
        }, schema);
    let count = 0;
    for (const item of Object.values(spec.paths)) {
      for (const op of Object.values(item)) {
        for (const [status, response] of Object.entries(op.responses ?? {})) {
          for (const [name, ref] of Object.entries(response.links ?? {})) {
            count++;
            const link = spec.components.links[ref.$ref.split('/').pop() as string] as Link;
            const where = `${op.operationId} ${status} ${name}`;
            const target = link.operationId as OperationId;
            t.ok(target in operations, `${where}: ${target} is an operation`);
            const body = response.content?.['application/json']?.schema as Schema;
            const expressions = { ...link.parameters, ...link.requestBody };
            for (const [field, expression] of Object.entries(expressions)) {
              const pointer = expression.replace(/^\$response\.body#/, '');
              t.ok(fieldAt(body, pointer), `${where}: the answer declares ${pointer}`);
              if (link.parameters?.[field] !== undefined) {
                t.match(operations[target].path, `{${field}}`, `${where}: ${target} takes ${field}`);
              }
            }
          }
        }
      }
    }
    t.ok(count >= 20, `${count} links`);
  },
);
