import t from 'tap';
import { buildTestApp } from './helpers/app.ts';
import { assertErrorBody } from './helpers/error-body.ts';

t.test('GET /api/health: 200 while the database answers, 503 once it does not', async (t) => {
  const { app, database } = await buildTestApp(t);
  const ok = await app.inject({ url: '/api/health' });
  t.equal(ok.statusCode, 200);
  t.equal(ok.json().database, 'up');
  // The connection pool goes away under the app, as when the database server is lost.
  await database.handle.db.destroy();
  const down = await app.inject({ url: '/api/health' });
  const body = assertErrorBody(t, down, 503, 'SERVICE_UNAVAILABLE');
  t.match(body.message, /database/);
  t.equal(down.headers['retry-after'], '5', 'with a Retry-After');
});
