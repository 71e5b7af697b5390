// The typed test client (test/helpers/typed-inject.ts): what it sends, that its answers go through
// the contract check, and, by `npm run typecheck` (the @ts-expect-error lines), that a path, a
// parameter or a body field the spec does not have is a compile error.
import Fastify from 'fastify';
import t from 'tap';
import { buildTestApp } from './helpers/app.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { requestUrl, typedInject } from './helpers/typed-inject.ts';

t.test('requestUrl fills in path parameters and writes the query', async (t) => {
  t.equal(requestUrl('/api/auth/users/{userId}', { userId: 'a b/c' }, undefined), '/api/auth/users/a%20b%2Fc');
  t.equal(
    requestUrl('/api/auth/users', undefined, { search: 'ada@example.com', limit: '5', offset: undefined }),
    '/api/auth/users?search=ada%40example.com&limit=5',
  );
  t.equal(
    requestUrl('/api/auth/sessions', undefined, { client_type: 'mobile' }, 'x=1'),
    '/api/auth/sessions?client_type=mobile&x=1',
  );
  t.equal(requestUrl('/api/health', undefined, {}, '?a=b'), '/api/health?a=b');
  t.throws(() => requestUrl('/api/auth/users/{userId}', {}, undefined), /userId/);
});

t.test('requests go through app.inject and its contract check', async (t) => {
  const { app } = await buildTestApp(t);
  const api = typedInject(app);
  const health = await api.get('/api/health');
  t.equal(health.statusCode, 200);
  const status: 'ok' = health.json().status;
  t.equal(status, 'ok', 'json() is typed by the success response');
  assertErrorBody(t, await api.get('/api/auth/users'), 401, 'UNAUTHORIZED');
  const refused = await api.post('/api/auth/users', { rawBody: { email: 'not an address' } });
  t.equal(refused.json<400>().error, 'INVALID_INPUT', 'rawBody is sent as given; json<400>() types the error body');

  // Wrong paths, parameters and bodies do not compile (npm run typecheck covers test/).
  const compileErrors = async () => {
    // @ts-expect-error: no such path
    await api.get('/api/healthz');
    // @ts-expect-error: no GET on this path
    await api.get('/api/auth/logout');
    // @ts-expect-error: the path parameter is missing
    await api.get('/api/auth/users/{userId}');
    // @ts-expect-error: a path parameter of another name
    await api.get('/api/auth/users/{userId}', { params: { id: 'x' } });
    // @ts-expect-error: the body is required
    await api.post('/api/auth/users', {});
    // @ts-expect-error: a body field the schema does not have
    await api.post('/api/auth/users', { body: { email: 'a@example.com', password: 'x', nickname: 'a' } });
    // @ts-expect-error: a query value outside the enum
    await api.post('/api/auth/sessions', { query: { client_type: 'tablet' }, body: { email: 'a', password: 'b' } });
    // @ts-expect-error: body and rawBody together
    await api.post('/api/auth/users', { body: { email: 'a@example.com', password: 'x' }, rawBody: '{}' });
    // @ts-expect-error: a property the success body does not have
    (await api.get('/api/health')).json().nonsense;
  };
  t.type(compileErrors, 'function');
});

t.test('an app without the contract check is refused', async (t) => {
  const app = Fastify();
  t.teardown(() => app.close());
  t.throws(() => typedInject(app), /checkResponsesAgainstContract/);
});
