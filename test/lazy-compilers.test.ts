// compilersOnFirstUse (src/lazy-compilers.ts): Fastify's own validators and serializers, compiled at
// the first request that needs each, check and serialise exactly as when compiled at start.
import Fastify from 'fastify';
import t from 'tap';
import { compilersOnFirstUse } from '../src/lazy-compilers.ts';

async function app(routes: (app: ReturnType<typeof Fastify>) => void) {
  const app = Fastify({
    schemaController: compilersOnFirstUse(),
    ajv: { customOptions: { coerceTypes: false, removeAdditional: false } },
  });
  routes(app);
  await app.ready();
  return app;
}

t.test('headers, bodies and responses are checked at the first request as at any other', async (t) => {
  const server = await app((app) =>
    app.post(
      '/thing',
      {
        schema: {
          headers: {
            type: 'object',
            properties: { 'X-Token': { type: 'string', minLength: 3 } },
            required: ['X-Token'],
          },
          body: {
            type: 'object',
            properties: { n: { type: 'integer' } },
            required: ['n'],
            additionalProperties: false,
          },
          response: { 200: { type: 'object', properties: { n: { type: 'integer' } } } },
        },
      },
      async (request: { body: unknown }) => ({
        n: (request.body as { n: number }).n,
        secret: 'not in the response schema',
      }),
    ),
  );
  t.teardown(() => server.close());
  const post = (headers: Record<string, string>, body: unknown) =>
    server.inject({ method: 'POST', url: '/thing', headers, payload: body as object });
  // The very first request already fails its checks: nothing passes while the validator is compiled.
  t.equal((await post({}, { n: 1 })).statusCode, 400, 'the required header (named in capitals in the schema)');
  t.equal((await post({ 'x-token': 'ab' }, { n: 1 })).statusCode, 400, 'its minLength');
  t.equal((await post({ 'x-token': 'abc' }, { n: 'one' })).statusCode, 400, 'the body');
  t.equal((await post({ 'x-token': 'abc' }, { n: 1, extra: true })).statusCode, 400, 'additionalProperties');
  const ok = await post({ 'X-TOKEN': 'abc' }, { n: 7 });
  t.equal(ok.statusCode, 200);
  t.same(ok.json(), { n: 7 }, 'the response serialiser leaves out what its schema does not name');
});

t.test('a schema that does not compile refuses every request', async (t) => {
  const server = await app((app) =>
    app.post('/broken', { schema: { body: { type: 'string', pattern: '(' } } }, async () => 'never'),
  );
  t.teardown(() => server.close());
  for (let i = 0; i < 2; i++) {
    const res = await server.inject({
      method: 'POST',
      url: '/broken',
      payload: '"x"',
      headers: { 'content-type': 'application/json' },
    });
    t.equal(res.statusCode, 500, `request ${i + 1}`);
  }
});

t.test('a headers schema that nests names elsewhere stops the start', async (t) => {
  await t.rejects(
    app((app) =>
      app.get(
        '/nested',
        { schema: { headers: { allOf: [{ type: 'object', required: ['X-Token'] }] } } },
        async () => 'never',
      ),
    ),
    /a headers schema may only use/,
  );
});
