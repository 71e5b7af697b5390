import type { AddressInfo } from 'node:net';
import t from 'tap';
import { type ClientType, createClient } from '../src/client/index.ts';
import { buildAuthTestApp, newEmail, PASSWORD, pause } from './helpers/auth.ts';

/** A fetch with a cookie jar, as a browser keeps the refresh cookie of a web client. */
function browserLikeFetch() {
  const jar = new Map<string, string>();
  return async (request: Request): Promise<Response> => {
    const headers = new Headers(request.headers);
    if (jar.size > 0) headers.set('cookie', [...jar].map(([k, v]) => `${k}=${v}`).join('; '));
    const response = await fetch(new Request(request, { headers }));
    for (const line of response.headers.getSetCookie()) {
      const pair = line.split(';')[0] ?? '';
      const eq = pair.indexOf('=');
      const name = pair.slice(0, eq);
      const value = pair.slice(eq + 1);
      if (value === '' || /max-age=0|expires=thu, 01 jan 1970/i.test(line)) jar.delete(name);
      else jar.set(name, value);
    }
    return response;
  };
}

t.test('the typed client drives every operation over real HTTP', async (t) => {
  const admin = { email: 'sdk-admin@example.com', password: 'sdk-admin-password' };
  const { app, firstMail } = await buildAuthTestApp(t, {
    label: 'client',
    env: { ADMIN_EMAIL: admin.email, ADMIN_PASSWORD: admin.password, ACCESS_TOKEN_TTL_SECONDS: '2' },
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const baseUrl = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;

  for (const clientType of ['mobile', 'web'] as ClientType[]) {
    t.test(`${clientType} client`, async (t) => {
      const api = createClient({
        baseUrl,
        clientType,
        ...(clientType === 'web' ? { fetch: browserLikeFetch() } : {}),
      });
      const query = { client_type: clientType } as const;

      const health = await api.GET('/api/health');
      t.equal(health.data?.status, 'ok', 'getHealth');

      const email = newEmail(`sdk-${clientType}`);
      const signUp = await api.POST('/api/auth/users', { body: { email, password: PASSWORD } });
      t.equal(signUp.response.status, 202, 'createUser');
      const resend = await api.POST('/api/auth/email/send-verification', { body: { email } });
      t.equal(resend.response.status, 202, 'sendVerificationEmail');
      const mail = await firstMail(email);
      const verified = await api.POST('/api/auth/email/verify', {
        params: { query },
        body: { email, otp: mail.code as string },
      });
      t.equal(verified.data?.user.emailVerified, true, 'verifyEmail');
      t.ok(api.tokens().accessToken, 'the session’s access token is kept');
      t.equal(
        api.tokens().refreshToken !== undefined,
        clientType !== 'web',
        'a refresh token in the body: mobile only',
      );
      t.equal(api.tokens().csrfToken !== undefined, clientType === 'web', 'a CSRF token: web only');

      const me = await api.GET('/api/auth/sessions/current');
      t.equal(me.data?.user.email, email, 'getCurrentSession with the kept token');

      const signIn = await api.POST('/api/auth/sessions', { params: { query }, body: { email, password: PASSWORD } });
      t.equal(signIn.data?.user.email, email, 'createSession');

      const before = api.tokens();
      t.equal(await api.refresh(), true, 'refreshSession');
      if (clientType === 'web') t.ok(api.tokens().csrfToken, 'the web session keeps a CSRF token');
      else t.not(api.tokens().refreshToken, before.refreshToken, 'the refresh token is rotated');

      // The access token lives two seconds here: the next call meets 401 AUTH_UNAUTHORIZED, and the
      // client refreshes once and repeats it. (A token's expiry is a whole second: with one second
      // the refreshed token could expire before the repeated call arrived on a busy machine.)
      const expired = api.tokens().accessToken;
      await pause(3_100);
      const permissions = await api.GET('/api/realtime/permissions');
      t.equal(permissions.response.status, 200, 'getRealtimePermissions after a transparent refresh');
      t.ok(permissions.data?.subscribe.policies.length);
      t.not(api.tokens().accessToken, expired, 'with a refreshed access token');

      const embeddings = await api.POST('/api/ai/embeddings', {
        body: { model: 'local/lexical-v1', input: 'hi', dimensions: 4 },
      });
      t.same(
        embeddings.data?.metadata.usage,
        { promptTokens: 1, completionTokens: 0, totalTokens: 1 },
        'createEmbeddings',
      );
      t.equal(embeddings.data?.data.length, 1);

      const forbidden = await api.GET('/api/auth/users');
      t.equal(forbidden.response.status, 403, 'listUsers is for administrators');
      t.equal(forbidden.error?.error, 'FORBIDDEN', 'a typed error from the Error schema');

      const bad = await api.POST('/api/ai/embeddings', { body: { model: 'local/lexical-v1', input: '' } });
      t.equal(bad.error?.error, 'INVALID_INPUT');
      t.equal(bad.error?.statusCode, 400);

      const out = await api.logout();
      t.equal(out.response.status, 204, 'logout');
      t.equal(api.tokens().accessToken, undefined, 'the tokens are forgotten');
      const after = await api.GET('/api/auth/sessions/current');
      t.equal(after.error?.error, 'UNAUTHORIZED', 'no session any more');
      t.equal(await api.refresh(), false, 'and nothing to refresh');
    });
  }

  t.test('an administrator lists users through the client', async (t) => {
    const api = createClient({ baseUrl, clientType: 'desktop' });
    const signIn = await api.POST('/api/auth/sessions', {
      params: { query: { client_type: 'desktop' } },
      body: { email: admin.email, password: admin.password },
    });
    t.equal(signIn.response.status, 200);
    const list = await api.GET('/api/auth/users', { params: { query: { search: 'sdk-', limit: '5' } } });
    t.equal(list.response.status, 200, 'listUsers');
    t.equal(list.data?.pagination.total, 3, 'the two accounts made above and the administrator');
  });

  t.test('a refresh token that is refused ends the session in the client', async (t) => {
    const api = createClient({
      baseUrl,
      clientType: 'mobile',
      tokens: { accessToken: 'x.y.z', refreshToken: 'not-a-token' },
    });
    const res = await api.GET('/api/realtime/permissions');
    t.equal(res.response.status, 401, 'the original 401 comes back');
    t.same(api.tokens(), { accessToken: undefined, refreshToken: undefined, csrfToken: undefined });
  });

  t.test('a refresh that fails for another reason (429, 503, no network) keeps the session', async (t) => {
    for (const outcome of [429, 503, 'network'] as const) {
      const tokens = { accessToken: 'x.y.z', refreshToken: 'kept-refresh-token', csrfToken: undefined };
      const api = createClient({
        baseUrl,
        clientType: 'mobile',
        tokens,
        fetch: async (request: Request) => {
          if (!request.url.includes('/api/auth/refresh')) return fetch(request);
          if (outcome === 'network') throw new TypeError('fetch failed');
          return new Response(JSON.stringify({ error: 'RATE_LIMITED', message: 'x', statusCode: outcome }), {
            status: outcome,
          });
        },
      });
      t.equal(await api.refresh(), false, `${outcome}: the refresh did not happen`);
      t.same(api.tokens(), tokens, `${outcome}: the tokens are kept for a later try`);
    }
  });
});
