// GET /api/auth/public-config: what a sign-in page needs, without authentication, in the shape
// InsForge's SDK expects; the password rules are the ones the service enforces; the answer follows
// the configuration and is revalidated by ETag (304), never served stale.
import { createClient } from '@insforge/sdk';
import { getPublicAuthConfigResponseSchema } from '@insforge/shared-schemas';
import t from 'tap';
import { specDocument } from '../src/spec.ts';
import { buildAuthTestApp, newEmail } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { urlOf } from './helpers/realtime-client.ts';
import { assertMatchesSchema } from './helpers/spec-schema.ts';

const URL_PATH = '/api/auth/public-config' as const;

t.test('the defaults, in the SDK’s shape, cacheable but revalidated', async (t) => {
  const { app, api, config } = await buildAuthTestApp(t, { label: 'public-config' });
  const res = await api.get(URL_PATH);
  t.equal(res.statusCode, 200);
  const body = res.json();
  t.same(body, {
    oAuthProviders: [],
    customOAuthProviders: [],
    requireEmailVerification: true,
    passwordMinLength: 8,
    passwordMaxLength: 256,
    requireNumber: false,
    requireLowercase: false,
    requireUppercase: false,
    requireSpecialChar: false,
    verifyEmailMethod: 'code',
    resetPasswordMethod: 'code',
    disableSignup: false,
    redirectUrl: null,
    verifyEmailUrl: `${config.publicUrl}/auth/verify-email`,
    resetPasswordUrl: `${config.publicUrl}/auth/reset-password`,
    mfaFactorTypes: ['totp'], // the test's PUBLIC_URL is on 127.0.0.1: no passkeys there
    mfaRequiredForAdmins: false,
  });
  assertMatchesSchema(t, body, 'PublicAuthConfig');
  const parsed = getPublicAuthConfigResponseSchema.safeParse(body);
  t.ok(parsed.success, 'valid for the SDK’s own schema (@insforge/shared-schemas)', {
    issues: parsed.success ? [] : parsed.error.issues,
  });
  t.equal(res.headers['cache-control'], 'public, no-cache', 'caches may keep it, but revalidate');
  const etag = String(res.headers.etag);
  t.match(etag, /^"[A-Za-z0-9_-]{22}"$/, 'a strong ETag');
  t.equal(res.headers['x-content-type-options'], 'nosniff');
  assertErrorBody(t, await app.inject({ method: 'POST', url: URL_PATH }), 405, 'METHOD_NOT_ALLOWED');

  // Needs no token, and ignores one.
  const withToken = await api.get(URL_PATH, { headers: { authorization: 'Bearer not-a-token' } });
  t.equal(withToken.statusCode, 200, 'a bad Authorization header does not matter');

  for (const ifNoneMatch of [etag, `W/${etag}`, `"other", ${etag}`, '*']) {
    const notModified = await api.get(URL_PATH, { headers: { 'if-none-match': ifNoneMatch } });
    t.equal(notModified.statusCode, 304, `If-None-Match: ${ifNoneMatch} -> 304`);
    t.equal(notModified.body, '', 'without a body');
    t.equal(notModified.headers.etag, etag, 'with the ETag');
    t.equal(notModified.headers['cache-control'], 'public, no-cache');
  }
  for (const ifNoneMatch of ['"stale"', etag.slice(0, -2), '']) {
    const fresh = await api.get(URL_PATH, { headers: { 'if-none-match': ifNoneMatch } });
    t.equal(fresh.statusCode, 200, `If-None-Match: ${ifNoneMatch || '(empty)'} -> 200 with the body`);
    t.same(fresh.json(), body);
  }
  const tooLong = await api.get(URL_PATH, { headers: { 'if-none-match': `"${'x'.repeat(1100)}"` } });
  assertErrorBody(t, tooLong, 400, 'INVALID_INPUT');
  t.equal(tooLong.headers['cache-control'], 'no-store', 'an error is never cached');
});

t.test('passkeys are offered where browsers can use them: a relying party named by a domain', async (t) => {
  const { api } = await buildAuthTestApp(t, {
    label: 'pc-passkeys',
    env: { PUBLIC_URL: 'http://localhost:7130' },
  });
  t.same((await api.get(URL_PATH)).json().mfaFactorTypes, ['totp', 'passkey']);
});

t.test('the password rules are those the password-setting operations enforce', async (t) => {
  const schemas = (specDocument.components as { schemas: Record<string, { properties: Record<string, object> }> })
    .schemas;
  const lengths = (schema: string, field: string) => {
    const rule = (schemas[schema]?.properties[field] ?? {}) as { minLength?: number; maxLength?: number };
    const { minLength, maxLength } = rule;
    return { minLength, maxLength };
  };
  const { api } = await buildAuthTestApp(t, { label: 'public-config-rules' });
  const rules = (await api.get(URL_PATH)).json();
  const announced = { minLength: rules.passwordMinLength, maxLength: rules.passwordMaxLength };
  t.same(lengths('SignUpRequest', 'password'), announced, 'sign-up');
  t.same(lengths('ChangePasswordRequest', 'newPassword'), announced, 'password change');
  if (schemas.ResetPasswordRequest !== undefined) {
    t.same(lengths('ResetPasswordRequest', 'newPassword'), announced, 'password reset');
  }
  const signUp = (password: string) => api.post('/api/auth/users', { body: { email: newEmail('rules'), password } });
  assertErrorBody(t, await signUp('a'.repeat(rules.passwordMinLength - 1)), 400, 'INVALID_INPUT');
  t.equal((await signUp('a'.repeat(rules.passwordMinLength))).statusCode, 202, 'the minimum length is accepted');
  t.equal((await signUp('1'.repeat(rules.passwordMaxLength))).statusCode, 202, 'so is the maximum, digits only');
  assertErrorBody(t, await signUp('a'.repeat(rules.passwordMaxLength + 1)), 400, 'INVALID_INPUT');
});

t.test('the answer follows the configuration, and so does its ETag', async (t) => {
  const first = await buildAuthTestApp(t, { label: 'public-config-a' });
  const before = await first.api.get(URL_PATH);
  const { api } = await buildAuthTestApp(t, {
    label: 'public-config-b',
    env: {
      REQUIRE_EMAIL_VERIFICATION: 'false',
      ALLOW_SIGN_UP: 'false',
      AUTH_REDIRECT_URL: 'https://app.example.com/welcome',
      EMAIL_VERIFY_URL: 'https://app.example.com/verify',
      RESET_PASSWORD_URL: 'https://app.example.com/reset',
    },
  });
  const res = await api.get(URL_PATH, { headers: { 'if-none-match': String(before.headers.etag) } });
  t.equal(res.statusCode, 200, 'the ETag of the other configuration does not match');
  t.not(res.headers.etag, before.headers.etag, 'another ETag');
  t.match(res.json(), {
    requireEmailVerification: false,
    disableSignup: true,
    redirectUrl: 'https://app.example.com/welcome',
    verifyEmailUrl: 'https://app.example.com/verify',
    resetPasswordUrl: 'https://app.example.com/reset',
  });
  assertMatchesSchema(t, res.json(), 'PublicAuthConfig');
  const again = await buildAuthTestApp(t, { label: 'public-config-c' });
  t.equal(
    (await again.api.get(URL_PATH)).headers.etag,
    before.headers.etag,
    'the same configuration has the same ETag on another instance',
  );
});

t.test('InsForge’s SDK reads it: getPublicAuthConfig()', async (t) => {
  const { app, api } = await buildAuthTestApp(t, { label: 'public-config-sdk' });
  await app.listen({ port: 0, host: '127.0.0.1' });
  for (const isServerMode of [true, false]) {
    const client = createClient({ baseUrl: urlOf(app), retryCount: 0, isServerMode });
    const { data, error } = await client.auth.getPublicAuthConfig();
    t.equal(error, null, `no error (${isServerMode ? 'server' : 'browser'} mode)`);
    t.same(data, (await api.get(URL_PATH)).json(), 'the data is the answer');
  }
});
