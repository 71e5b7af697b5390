import t from 'tap';
import { contractProblem } from './helpers/contract-check.ts';

// The checker every app under test runs (test/helpers/contract-check.ts) must itself catch drift.
const json = 'application/json; charset=utf-8';
const error = (status: number, code: string) => JSON.stringify({ error: code, message: 'm', statusCode: status });

t.test('a response that matches the spec passes', async (t) => {
  t.equal(
    contractProblem({
      method: 'GET',
      routePath: '/api/health',
      status: 503,
      contentType: json,
      body: error(503, 'SERVICE_UNAVAILABLE'),
    }),
    undefined,
  );
  t.equal(
    contractProblem({ method: 'POST', routePath: '/api/auth/logout', status: 204, contentType: '', body: '' }),
    undefined,
    'a 204 without a body',
  );
  t.equal(
    contractProblem({
      method: 'GET',
      routePath: '/docs/static/index.html',
      status: 200,
      contentType: 'text/html',
      body: '<html>',
    }),
    undefined,
    'routes outside the contract are not checked',
  );
});

t.test('drift is named: status, content type, body', async (t) => {
  t.match(
    contractProblem({
      method: 'GET',
      routePath: '/api/realtime/permissions',
      status: 418,
      contentType: json,
      body: '{}',
    }),
    /getRealtimePermissions 418: status not declared/,
  );
  t.match(
    contractProblem({
      method: 'GET',
      routePath: '/api/realtime/permissions',
      status: 200,
      contentType: 'text/plain',
      body: '{}',
    }),
    /content type "text\/plain" not declared/,
  );
  t.match(
    contractProblem({
      method: 'GET',
      routePath: '/api/realtime/permissions',
      status: 200,
      contentType: json,
      body: JSON.stringify({
        subscribe: { policies: [{ policyName: 'p', roles: '{authenticated}' }] },
        publish: { policies: [] },
      }),
    }),
    /getRealtimePermissions 200: body\/subscribe\/policies\/0 /,
  );
  t.match(
    contractProblem({
      method: 'GET',
      routePath: '/api/auth/users',
      status: 401,
      contentType: json,
      body: '{"error":"NOPE"}',
    }),
    /listUsers 401: body/,
    'an error body outside the Error schema',
  );
  t.match(
    contractProblem({ method: 'POST', routePath: '/api/auth/logout', status: 204, contentType: json, body: '{}' }),
    /a body was sent where the spec declares none/,
  );
});
