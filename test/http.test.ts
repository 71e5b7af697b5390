import t from 'tap';
import { buildAppCapturingLogs, buildTestApp } from './helpers/app.ts';
import { assertErrorBody } from './helpers/error-body.ts';

t.test('HTTP behaviour shared by every route', async (t) => {
  const { app } = await buildTestApp(t, { env: { RATE_LIMIT_SIGN_UP: '1000' } });

  t.test('GET /api/health answers 200 when the database answers', async (t) => {
    const res = await app.inject({ url: '/api/health' });
    t.equal(res.statusCode, 200);
    const body = res.json();
    t.equal(body.status, 'ok');
    t.equal(body.database, 'up');
    t.match(body.version, /^\d+\.\d+\.\d+/);
    t.type(body.uptimeSeconds, 'number');
  });

  t.test('every response carries a request id, and a sane given one is kept', async (t) => {
    const res = await app.inject({ url: '/api/health' });
    t.match(res.headers['x-request-id'], /^[0-9a-f-]{36}$/);
    const given = await app.inject({ url: '/api/health', headers: { 'x-request-id': 'trace-abc.1' } });
    t.equal(given.headers['x-request-id'], 'trace-abc.1');
    const hostile = await app.inject({ url: '/api/health', headers: { 'x-request-id': 'a b\u0000c' } });
    t.not(hostile.headers['x-request-id'], 'a b\u0000c', 'an unsafe id is replaced');
  });

  t.test('unknown route: 404 in the Error schema', async (t) => {
    const body = assertErrorBody(t, await app.inject({ url: '/api/nothing-here' }), 404, 'NOT_FOUND');
    t.match(body.message, /GET \/api\/nothing-here/);
  });

  t.test('known path, wrong method: 405 with Allow', async (t) => {
    const res = await app.inject({ method: 'PUT', url: '/api/auth/users' });
    assertErrorBody(t, res, 405, 'METHOD_NOT_ALLOWED');
    t.equal(res.headers.allow, 'DELETE, GET, POST');
  });

  t.test('an undeclared content type: 415', async (t) => {
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'application/xml']) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/auth/users',
        headers: { 'content-type': type },
        payload: 'email=a@b.co',
      });
      assertErrorBody(t, res, 415, 'UNSUPPORTED_MEDIA_TYPE');
    }
  });

  t.test('an oversized body: 413', async (t) => {
    const res = await app.inject({
      method: 'POST',
      url: '/api/auth/users',
      headers: { 'content-type': 'application/json' },
      payload: JSON.stringify({ email: 'a@b.co', password: 'x'.repeat(2 * 1024 * 1024) }),
    });
    assertErrorBody(t, res, 413, 'PAYLOAD_TOO_LARGE');
  });

  t.test('invalid JSON, an empty JSON body and a missing required body: 400', async (t) => {
    const json = { 'content-type': 'application/json' };
    const bad = await app.inject({ method: 'POST', url: '/api/auth/users', headers: json, payload: '{"email":' });
    t.match(assertErrorBody(t, bad, 400, 'INVALID_INPUT').message, /not valid JSON/);
    const empty = await app.inject({ method: 'POST', url: '/api/auth/users', headers: json, payload: '' });
    assertErrorBody(t, empty, 400, 'INVALID_INPUT');
    const missing = await app.inject({ method: 'POST', url: '/api/auth/users' });
    t.match(assertErrorBody(t, missing, 400, 'INVALID_INPUT').message, /body is required/);
  });

  t.test('validation errors name the field and say why', async (t) => {
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ password: 'abcdefgh' }, /^body\.email is required$/],
      [{ email: 'not-an-email', password: 'abcdefgh' }, /^body\.email must be a valid email$/],
      [{ email: 'a@b.co', password: 'short' }, /^body\.password must have at least 8 characters$/],
      [{ email: 'a@b.co', password: 'abcdefgh', role: 'admin' }, /^body\.role is not an accepted field$/],
      [{ email: 42, password: 'abcdefgh' }, /^body\.email must be string$/],
    ];
    for (const [payload, message] of cases) {
      const res = await app.inject({ method: 'POST', url: '/api/auth/users', payload });
      t.match(assertErrorBody(t, res, 400, 'INVALID_INPUT').message, message, JSON.stringify(payload));
    }
    // A field name the caller chose is echoed escaped: NUL, an unpaired surrogate (refused before
    // validation) and a control character cannot reach the message (the Error schema refuses the
    // first two).
    const names: Array<[string, string]> = [
      ['\u0000', 'body.\\u0000 contains a NUL character or an unpaired UTF-16 surrogate'],
      ['a\uD800', 'body.a\\ud800 contains a NUL character or an unpaired UTF-16 surrogate'],
      ['\uDC00b', 'body.\\udc00b contains a NUL character or an unpaired UTF-16 surrogate'],
      ['x\u001b[2J', 'body.x\\u001b[2J is not an accepted field'],
      ['\u{1F600}', 'body.\u{1F600} is not an accepted field'],
    ];
    for (const [name, message] of names) {
      const res = await app.inject({
        method: 'POST',
        url: '/api/auth/users',
        headers: { 'content-type': 'application/json' },
        payload: `{"email":"a@b.co","password":"abcdefgh",${JSON.stringify(name)}:1}`,
      });
      t.equal(assertErrorBody(t, res, 400, 'INVALID_INPUT').message, message, JSON.stringify(name));
    }
    const query = await app.inject({
      method: 'POST',
      url: '/api/auth/email/verify?client_type=tv',
      payload: { otp: '123456', email: 'a@b.co' },
    });
    t.match(assertErrorBody(t, query, 400).message, /^query\.client_type must be one of: web, mobile, desktop$/);
  });

  t.test('types are not coerced: a number where the spec says string is rejected', async (t) => {
    const res = await app.inject({
      method: 'POST',
      url: '/api/auth/sessions',
      payload: { email: 'a@b.co', password: 1 },
    });
    t.match(assertErrorBody(t, res, 400, 'INVALID_INPUT').message, /^body\.password must be string$/);
    const otp = await app.inject({ method: 'POST', url: '/api/auth/email/verify', payload: { otp: 123456 } });
    t.match(
      assertErrorBody(t, otp, 400, 'INVALID_INPUT').message,
      /^body\.otp must be a 6-digit code or a 64-character hexadecimal token$/,
      'a discriminator of the wrong type: the forms it may take',
    );
  });

  t.test('a body of neither oneOf form: the message is about the form the body meant', async (t) => {
    const cases: Array<[string, Record<string, unknown>, string]> = [
      ['/api/auth/email/verify', { otp: '123456' }, 'body.email is required'],
      ['/api/auth/email/verify', { otp: 'a'.repeat(64), email: 'a@b.co' }, 'body.email is not an accepted field'],
      ['/api/auth/email/verify', { otp: 'abc' }, 'body.otp must be a 6-digit code or a 64-character hexadecimal token'],
      ['/api/auth/email/verify', { otp: '123456', email: 'nope' }, 'body.email must be a valid email'],
      ['/api/auth/sessions', { email: 'a@b.co' }, 'body.password is required'],
      ['/api/auth/sessions', { method: 'otp', email: 'a@b.co' }, 'body.otp is required'],
      ['/api/auth/sessions', { method: 'otp', email: 'a@b.co', otp: 'abc' }, 'body.otp must be a 6-digit code'],
      ['/api/auth/sessions', { method: 'sms', email: 'a@b.co' }, 'body.method must be one of: otp, password'],
      // A wrong type makes a branch report twice (type, then const): still about `method`.
      [
        '/api/auth/sessions',
        { method: 1, email: 'a@b.co', password: 'x' },
        'body.method must be one of: otp, password',
      ],
      [
        '/api/auth/sessions',
        { method: null, email: 'a@b.co', password: 'x' },
        'body.method must be one of: otp, password',
      ],
    ];
    for (const [url, payload, message] of cases) {
      const res = await app.inject({ method: 'POST', url, payload });
      t.equal(assertErrorBody(t, res, 400, 'INVALID_INPUT').message, message, JSON.stringify(payload));
    }
  });

  t.test('the docs page and the spec are served', async (t) => {
    const docs = await app.inject({ url: '/docs' });
    t.equal(docs.statusCode, 200);
    t.match(docs.headers['content-type'], /text\/html/);
    const json = await app.inject({ url: '/openapi.json' });
    t.equal(json.statusCode, 200);
    t.equal(json.json().openapi, '3.1.0');
    const yaml = await app.inject({ url: '/openapi.yaml' });
    t.equal(yaml.statusCode, 200);
    t.match(yaml.headers['content-type'], /yaml/);
    t.match(yaml.body, /^openapi: 3\.1\.0/m);
    // What Swagger UI at /docs is given: "Try it out" targets the serving deployment, with Bearer auth.
    const ui = await app.inject({ url: '/docs/json' });
    t.equal(ui.statusCode, 200);
    const document = ui.json();
    t.equal(document.servers[0].url, '/', 'try-it-out calls the service that serves the page');
    t.same(document.components.securitySchemes.bearerAuth, json.json().components.securitySchemes.bearerAuth);
    t.same(Object.keys(document.paths).sort(), Object.keys(json.json().paths).sort(), 'every operation is shown');
    // Authorize and the operations on the first screen: the description is its first paragraph and a link.
    const whole = json.json().info.description as string;
    const shown = document.info.description as string;
    t.ok(shown.startsWith(whole.split('\n\n')[0] ?? '?'), 'the first paragraph of the description');
    t.match(shown, /\[openapi\.yaml\]\(\/openapi\.yaml\)/, 'and a link to the rest');
    t.ok(shown.length < 800 && whole.length > 5000, `short (${shown.length} of ${whole.length} characters)`);
  });

  t.test('/ sends a browser to the docs', async (t) => {
    const root = await app.inject({ url: '/' });
    t.equal(root.statusCode, 302);
    t.equal(root.headers.location, '/docs');
    t.equal((await app.inject({ method: 'HEAD', url: '/' })).statusCode, 302, 'HEAD too');
    assertErrorBody(t, await app.inject({ method: 'POST', url: '/', payload: {} }), 404, 'NOT_FOUND');
  });
});

t.test('a 5xx is logged with its request id and never shows internals', async (t) => {
  const { app, database, lines } = await buildAppCapturingLogs(t, 'error');
  app.get('/test-only/explode', async () => {
    await database.handle.db
      .selectFrom('no_such_table' as never)
      .selectAll()
      .execute();
    return {};
  });
  const res = await app.inject({ url: '/test-only/explode', headers: { 'x-request-id': 'req-500-check' } });
  const body = assertErrorBody(t, res, 500, 'INTERNAL_ERROR');
  t.equal(body.message, 'Internal server error');
  t.notMatch(res.body, /no_such_table|relation|select/i, 'no SQL or table names leak to the client');
  const logged = lines.map((l) => JSON.parse(l)).find((l) => l.reqId === 'req-500-check');
  t.ok(logged, 'the failure is logged under the request id');
  t.match(logged?.err?.message, /no_such_table/, 'the log keeps the real cause');
});

t.test('tokens in verification links and credentials in headers never reach the log', async (t) => {
  const { app, lines } = await buildAppCapturingLogs(t, 'info');
  const token = 'ab'.repeat(32);
  await app.inject({ url: `/auth/verify-email?token=${token}` });
  await app.inject({ url: '/api/auth/sessions/current', headers: { authorization: 'Bearer secret-bearer-value' } });
  const log = lines.join('');
  t.match(log, /verify-email\?token=\[redacted\]/, 'the request is logged, without its token');
  t.notMatch(log, new RegExp(token), 'the link token is not in the log');
  t.notMatch(log, /secret-bearer-value/, 'the Authorization header is not in the log');
});

t.test('strings PostgreSQL cannot store are a 400 naming the field, never a 500', async (t) => {
  const { app } = await buildTestApp(t, { env: { RATE_LIMIT_SIGN_UP: '1000' } });
  const bodies = [
    '{"email":"nul@example.com","password":"abcdefgh","name":"a\\u0000b"}',
    '{"email":"sur@example.com","password":"abcdefgh","name":"\\ud800"}',
    '{"email":"sur2@example.com","password":"abcdefgh\\udfff"}',
  ];
  for (const payload of bodies) {
    const res = await app.inject({
      method: 'POST',
      url: '/api/auth/users',
      headers: { 'content-type': 'application/json' },
      payload,
    });
    t.match(assertErrorBody(t, res, 400, 'INVALID_INPUT').message, /^body\.(name|password) contains a NUL/, payload);
  }
});

t.test('each request is one log line, written once it is answered', async (t) => {
  const { app, lines } = await buildAppCapturingLogs(t, 'info');
  const before = lines.length;
  await app.inject({ url: '/api/health', headers: { 'x-request-id': 'one-line-check' } });
  const mine = lines
    .slice(before)
    .map((l) => JSON.parse(l))
    .filter((l) => l.reqId === 'one-line-check');
  t.equal(mine.length, 1, 'one line');
  t.match(mine[0], {
    level: 30,
    msg: 'request completed',
    req: { method: 'GET', url: '/api/health' },
    res: { statusCode: 200 },
    responseTime: Number,
  });
});
