// Signing keys: access tokens signed with asymmetric keys that other services verify through the
// JWKS alone (jose, and jwks-rsa with jsonwebtoken), the keys' states and their management by
// administrators, the sealing of the private halves at rest, the window in which the HS256 tokens of
// an upgraded deployment stay valid, and the spread of rotations and revocations to other instances.
import { createPublicKey } from 'node:crypto';
import { createRemoteJWKSet, decodeProtectedHeader, jwtVerify } from 'jose';
import jsonwebtoken from 'jsonwebtoken';
import jwksClient from 'jwks-rsa';
import { sql } from 'kysely';
import { Migrator } from 'kysely/migration';
import t, { type Test } from 'tap';
import { LEGACY_TOKEN_ISSUER, TOKEN_AUDIENCE } from '../src/auth/access-token.ts';
import { deriveKeys, unseal } from '../src/auth/crypto.ts';
import { migrations } from '../src/db/migrate.ts';
import { describeStartFailure } from '../src/start-failure.ts';
import { ADMIN_PASSWORD, accountCalls, bearer, buildAccountsApp, type MobileSession } from './helpers/accounts.ts';
import { buildAnotherInstance } from './helpers/app.ts';
import { decodeClaims } from './helpers/auth.ts';
import { TestClock } from './helpers/clock.ts';
import { usingPostgres } from './helpers/database.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { disconnection, nextEvent, RealtimeClients, urlOf } from './helpers/realtime-client.ts';
import { accessClaims, currentSigningKey, forgeJwt, TEST_ISSUER } from './helpers/tokens.ts';

const JWT_SECRET = 'signing-keys-test-secret-0c5e9a1d7b3f4e26a8';
const PRIVATE_MEMBERS = ['d', 'p', 'q', 'dp', 'dq', 'qi', 'k'];

const headerOf = (token: string) => decodeProtectedHeader(token);

async function waitFor(condition: () => boolean, what: string, timeoutMs = 2_000): Promise<void> {
  const start = Date.now();
  while (!condition()) {
    if (Date.now() - start > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

interface KeyView {
  kid: string;
  alg: string;
  status: string;
}

async function setup(t: Test) {
  const a = await buildAccountsApp(t, { label: 'signing-keys', env: { JWT_SECRET } });
  await a.app.listen({ port: 0, host: '127.0.0.1' });
  const base = urlOf(a.app);
  const asAdmin = () => bearer(a.admin.accessToken);
  const keys = async (): Promise<KeyView[]> => {
    const res = await a.app.inject({ url: '/api/auth/signing-keys', headers: asAdmin() });
    if (res.statusCode !== 200) throw new Error(`listing keys: ${res.statusCode} ${res.body}`);
    return res.json().keys;
  };
  const post = (url: string, payload?: Record<string, unknown>) =>
    payload === undefined
      ? a.app.inject({ method: 'POST', url, headers: asAdmin() })
      : a.app.inject({ method: 'POST', url, headers: asAdmin(), payload });
  /** A verifier that shares nothing with the service but the JWKS URL, with a fresh copy of it. */
  const joseVerify = (token: string) =>
    jwtVerify(token, createRemoteJWKSet(new URL(`${base}/.well-known/jwks.json`)), {
      issuer: TEST_ISSUER,
      audience: TOKEN_AUDIENCE,
    });
  /** The second, independent verifier: jwks-rsa fetches the key by kid, jsonwebtoken checks the token. */
  const jwksRsaVerify = async (token: string) => {
    const client = jwksClient({ jwksUri: `${base}/.well-known/jwks.json`, cache: false });
    const key = await client.getSigningKey(headerOf(token).kid);
    return jsonwebtoken.verify(token, key.getPublicKey(), {
      issuer: TEST_ISSUER,
      audience: TOKEN_AUDIENCE,
      algorithms: ['ES256', 'RS256'],
    });
  };
  const refreshed = async (s: MobileSession): Promise<MobileSession> => {
    const res = await a.refresh(s.refreshToken);
    if (res.statusCode !== 200) throw new Error(`refresh: ${res.statusCode} ${res.body}`);
    return { ...s, accessToken: res.json().accessToken, refreshToken: res.json().refreshToken };
  };
  return { ...a, base, keys, post, joseVerify, jwksRsaVerify, refreshed };
}

t.test('the JWKS and the discovery document: public halves only, cached at most 10 minutes', async (t) => {
  const s = await setup(t);
  const jwks = await fetch(`${s.base}/.well-known/jwks.json`);
  t.equal(jwks.status, 200);
  t.equal(jwks.headers.get('cache-control'), 'public, max-age=300');
  const body = (await jwks.json()) as { keys: Array<Record<string, string>> };
  t.equal(body.keys.length, 1, 'a fresh deployment has one key');
  const [key] = body.keys as [Record<string, string>];
  t.match(key, { kty: 'EC', crv: 'P-256', alg: 'ES256', use: 'sig' });
  t.equal(key.kid, headerOf(s.admin.accessToken).kid, "the tokens' kid names it");
  for (const member of PRIVATE_MEMBERS) t.notOk(member in key, `no ${member}`);

  const discovery = await fetch(`${s.base}/.well-known/openid-configuration`);
  t.equal(discovery.status, 200);
  t.equal(discovery.headers.get('cache-control'), 'public, max-age=300');
  t.match(await discovery.json(), {
    issuer: TEST_ISSUER,
    jwks_uri: `${TEST_ISSUER}/.well-known/jwks.json`,
    id_token_signing_alg_values_supported: ['ES256'],
  });
});

t.test('rotate and revoke, as two independent verifiers and the service see them', async (t) => {
  const s = await setup(t);
  const user = await s.signUp();
  const oldKid = headerOf(user.accessToken).kid;
  t.equal((await s.joseVerify(user.accessToken)).payload.sub, user.userId, 'jose verifies a token');
  t.match(await s.jwksRsaVerify(user.accessToken), { sub: user.userId }, 'jwks-rsa with jsonwebtoken too');

  const rotated = await s.post('/api/auth/signing-keys/rotate');
  t.equal(rotated.statusCode, 200);
  const states = rotated.json().keys as KeyView[];
  const current = states.find((k) => k.status === 'current') as KeyView;
  t.not(current.kid, oldKid, 'a new key is current (made at once: there was no standby)');
  t.match(
    states.find((k) => k.kid === oldKid),
    { status: 'previous' },
    'the old one is previous',
  );
  const after = await s.refreshed(user);
  t.equal(headerOf(after.accessToken).kid, current.kid, 'new tokens carry the new kid');
  for (const [what, token] of [
    ['the old token', user.accessToken],
    ['the new token', after.accessToken],
  ] as const) {
    t.equal((await s.joseVerify(token)).payload.sub, user.userId, `jose: ${what} verifies`);
    t.match(await s.jwksRsaVerify(token), { sub: user.userId }, `jwks-rsa: ${what} verifies`);
    t.equal((await s.current(token)).statusCode, 200, `the service: ${what} passes`);
  }

  const clients = new RealtimeClients(t, s.base);
  const openBefore = await clients.connect(user.accessToken);
  const openAfter = await clients.connect(after.accessToken);
  const ended = nextEvent<{ code: string; channel: null }>(openBefore, 'realtime:error');
  const gone = disconnection(openBefore);
  const revoked = await s.post(`/api/auth/signing-keys/${oldKid}/revoke`);
  t.equal(revoked.statusCode, 200);
  t.match(await ended, { code: 'UNAUTHORIZED', channel: null }, "the old key's open socket is told");
  t.equal(await gone, 'io server disconnect', 'and disconnected');
  t.ok(openAfter.connected, "the new key's socket stays");
  t.match(revoked.json(), { kid: oldKid, status: 'revoked', revokedAt: String });
  await t.rejects(s.joseVerify(user.accessToken), 'jose, with a fresh JWKS: the old token no longer verifies');
  await t.rejects(s.jwksRsaVerify(user.accessToken), 'jwks-rsa: neither');
  assertErrorBody(t, await s.current(user.accessToken), 401, 'AUTH_UNAUTHORIZED');
  const refusal = await clients.refusal(user.accessToken);
  t.equal(refusal.data?.code, 'UNAUTHORIZED', 'a socket handshake with it is refused');
  t.equal((await s.current(after.accessToken)).statusCode, 200, "the new key's tokens pass");
  await clients.connect(after.accessToken);
  const jwks = (await (await fetch(`${s.base}/.well-known/jwks.json`)).json()) as { keys: KeyView[] };
  t.same(
    jwks.keys.map((k) => k.kid),
    [current.kid],
    'the JWKS no longer lists it',
  );
  // The administrator's own token was signed by the revoked key too: a refresh gets a new one.
  assertErrorBody(t, await s.post(`/api/auth/signing-keys/${oldKid}/revoke`), 401, 'AUTH_UNAUTHORIZED');
  Object.assign(s.admin, await s.refreshed(s.admin));
  const again = await s.post(`/api/auth/signing-keys/${oldKid}/revoke`);
  t.equal(again.statusCode, 200, 'revoking it again changes nothing');
  t.equal(again.json().revokedAt, revoked.json().revokedAt, 'not even when');
  t.same(clients.violations(), []);
});

t.test('standby keys, the algorithms, and the refusals', async (t) => {
  const s = await setup(t);
  const [first] = (await s.keys()) as [KeyView];
  assertErrorBody(t, await s.post(`/api/auth/signing-keys/${first.kid}/revoke`), 409, 'SIGNING_KEY_STATE');
  assertErrorBody(t, await s.post('/api/auth/signing-keys/no-such-kid/revoke'), 404, 'NOT_FOUND');
  assertErrorBody(t, await s.post('/api/auth/signing-keys', { alg: 'HS256' }), 400, 'INVALID_INPUT');

  for (const [alg, kty] of [
    ['RS256', 'RSA'],
    ['EdDSA', 'OKP'],
    ['ES256', 'EC'],
  ] as const) {
    const created = await s.post('/api/auth/signing-keys', { alg });
    t.equal(created.statusCode, 201, `${alg}: created`);
    t.match(created.json(), { alg, status: 'standby', activatedAt: null });
    assertErrorBody(t, await s.post('/api/auth/signing-keys', { alg }), 409, 'SIGNING_KEY_STATE');
    const jwks = (await (await fetch(`${s.base}/.well-known/jwks.json`)).json()) as {
      keys: Array<Record<string, string>>;
    };
    const published = jwks.keys.find((k) => k.kid === created.json().kid);
    t.match(published, { kty, alg }, `${alg}: published before it signs`);
    t.equal(headerOf(s.admin.accessToken).kid === created.json().kid, false, 'and it signs nothing yet');
    t.equal((await s.post('/api/auth/signing-keys/rotate')).statusCode, 200);
    const session = await s.signUp();
    t.equal(headerOf(session.accessToken).alg, alg, `${alg}: the rotation made it sign`);
    t.equal(headerOf(session.accessToken).kid, created.json().kid);
    t.equal((await s.current(session.accessToken)).statusCode, 200, `${alg}: the service verifies its tokens`);
    t.equal((await s.joseVerify(session.accessToken)).payload.sub, session.userId, `${alg}: jose too`);
  }
  // A standby key may be withdrawn before it ever signs.
  const standby = await s.post('/api/auth/signing-keys', {});
  t.match(standby.json(), { alg: 'ES256' }, 'ES256 by default');
  t.match((await s.post(`/api/auth/signing-keys/${standby.json().kid}/revoke`)).json(), { status: 'revoked' });

  const user = await s.signUp();
  for (const [method, url] of [
    ['GET', '/api/auth/signing-keys'],
    ['POST', '/api/auth/signing-keys'],
    ['POST', '/api/auth/signing-keys/rotate'],
    ['POST', `/api/auth/signing-keys/${first.kid}/revoke`],
  ] as const) {
    const res = await s.app.inject({ method, url, headers: bearer(user.accessToken) });
    assertErrorBody(t, res, 403, 'FORBIDDEN');
    assertErrorBody(t, await s.app.inject({ method, url }), 401, 'UNAUTHORIZED');
  }
  t.match(
    (await s.keys()).find((k) => k.kid === first.kid),
    { status: 'previous' },
    'nothing a user tried changed a key',
  );
});

t.test('a stolen key signs nothing that outlives the lifetime of tokens, or a rotation', async (t) => {
  const s = await setup(t);
  const user = await s.signUp();
  const stolen = await currentSigningKey(s.config, s.database.handle.db);
  const now = Math.floor(Date.now() / 1000);
  const claims = (overrides: Record<string, unknown>) =>
    accessClaims(now, { sub: user.userId, sid: user.sessionId, ...overrides });
  t.equal((await s.current(forgeJwt(stolen, claims({ exp: now + 900 })))).statusCode, 200, 'control: 15 minutes pass');
  const decade = forgeJwt(stolen, claims({ exp: now + 10 * 365 * 86_400 }));
  assertErrorBody(t, await s.current(decade), 401, 'AUTH_UNAUTHORIZED');
  const missingIat = forgeJwt(stolen, (({ iat: _iat, ...rest }) => rest)(claims({ exp: now + 600 })));
  assertErrorBody(t, await s.current(missingIat), 401, 'AUTH_UNAUTHORIZED');

  // After a rotation the stolen key is previous: what it signed before still passes, nothing dated later.
  const before = forgeJwt(stolen, claims({ exp: now + 600 }));
  t.equal((await s.post('/api/auth/signing-keys/rotate')).statusCode, 200);
  t.equal((await s.current(before)).statusCode, 200, 'a token it signed before the rotation passes');
  const later = forgeJwt(stolen, claims({ iat: now + 120, exp: now + 720 }));
  assertErrorBody(t, await s.current(later), 401, 'AUTH_UNAUTHORIZED');
  t.pass('one dated after its retirement (and the minute of margin) does not');
});

t.test('the private halves are sealed at rest, bound to their kid', async (t) => {
  const s = await setup(t);
  await s.post('/api/auth/signing-keys', { alg: 'RS256' });
  const rows = await s.database.handle.db.selectFrom('signing_keys').selectAll().execute();
  t.equal(rows.length, 2);
  const sealing = deriveKeys(JWT_SECRET).signingKeys;
  for (const row of rows) {
    const stored = JSON.stringify(row);
    t.notMatch(stored, /PRIVATE KEY|-----BEGIN/, `${row.kid}: no PEM in the row`);
    for (const member of PRIVATE_MEMBERS) t.notOk(member in row.public_jwk, `${row.kid}: no ${member} in the JWK`);
    t.match(row.private_key_sealed, /^v1\.[A-Za-z0-9_-]+$/, 'sealed');
    const pem = unseal(sealing, row.private_key_sealed, row.kid);
    t.equal(
      createPublicKey(pem).export({ format: 'jwk' }).x ?? createPublicKey(pem).export({ format: 'jwk' }).n,
      row.public_jwk.x ?? row.public_jwk.n,
      'it opens to the private half of the published key',
    );
    const other = rows.find((r) => r.kid !== row.kid) as typeof row;
    t.throws(() => unseal(sealing, row.private_key_sealed, other.kid), 'under another kid it does not open');
    t.throws(
      () => unseal(deriveKeys(`${JWT_SECRET}x`).signingKeys, row.private_key_sealed, row.kid),
      'nor another secret',
    );
  }
});

t.test(
  "without PUBLIC_URL, instances on other ports keep the first one's issuer and accept each other's tokens",
  async (t) => {
    const s = await setup(t);
    const b = await buildAnotherInstance(t, s, { env: { JWT_SECRET, PORT: '7131' } });
    t.equal(b.config.publicUrl, 'http://127.0.0.1:7131', "B's own address differs");
    const onB = accountCalls(b.app);
    const fromB = await onB.signIn(s.adminEmail, ADMIN_PASSWORD);
    t.equal(decodeClaims(fromB.accessToken).iss, TEST_ISSUER, "B signs with the first instance's issuer");
    t.equal((await s.current(fromB.accessToken)).statusCode, 200, "A accepts B's token");
    t.equal((await onB.current(s.admin.accessToken)).statusCode, 200, "and B accepts A's");
    const withUrl = await buildAnotherInstance(t, s, {
      env: { JWT_SECRET, PUBLIC_URL: 'https://accounts.example.com/' },
    });
    const discovery = await withUrl.app.inject({ url: '/.well-known/openid-configuration' });
    t.match(
      discovery.json(),
      {
        issuer: 'https://accounts.example.com',
        jwks_uri: 'https://accounts.example.com/.well-known/jwks.json',
      },
      'PUBLIC_URL, when set, is the issuer',
    );
  },
);

t.test('another JWT_SECRET cannot open the keys: the start stops and says why', async (t) => {
  const s = await setup(t);
  const started = buildAnotherInstance(t, s, { env: { JWT_SECRET: `${JWT_SECRET}-another` } });
  await t.rejects(started, { name: 'SealedKeyError', message: /cannot be opened with this JWT_SECRET/ });
  const failure = await started.catch((err: unknown) => describeStartFailure(err, s.config));
  t.match(failure, /^the current signing key \(kid [\w-]+\) cannot be opened/, 'one line for the operator');
});

t.test(
  'an upgraded deployment: HS256 tokens pass for one access-token lifetime by the clock, then never',
  async (t) => {
    const s = await setup(t);
    const user = await s.signUp();
    const db = s.database.handle.db;
    // Back to the version before signing keys, with the session open, and up again: the upgrade.
    const migrator = new Migrator({ db, provider: { getMigrations: async () => migrations } });
    t.error((await migrator.migrateTo('0019_one_time_codes')).error, 'down to 0019');
    t.error((await migrator.migrateToLatest()).error, 'and up: the upgrade');
    const since = await db.selectFrom('app_settings').select('value').where('key', '=', 'legacy_hs256_since').execute();
    t.equal(since.length, 1, 'the upgrade found open sessions and opened the window');

    const clock = new TestClock();
    const b = await buildAnotherInstance(t, s, { clock });
    const onB = accountCalls(b.app);
    const now = Math.floor(Date.now() / 1000);
    // A token as the version before signed it: HS256 with JWT_SECRET, the old issuer.
    const claims = accessClaims(now, {
      sub: user.userId,
      sid: user.sessionId,
      iss: LEGACY_TOKEN_ISSUER,
      exp: now + 900,
    });
    const { jti: _jti, ...oldClaims } = claims;
    const legacy = forgeJwt(JWT_SECRET, oldClaims);
    t.equal((await onB.current(legacy)).statusCode, 200, 'an HS256 token issued before the upgrade passes');
    const farFuture = forgeJwt(JWT_SECRET, { ...oldClaims, iat: now + 10 * 86_400, exp: now + 10 * 86_400 + 900 });
    clock.advance(15 * 60 + 1);
    assertErrorBody(t, await onB.current(legacy), 401, 'AUTH_UNAUTHORIZED');
    assertErrorBody(t, await onB.current(farFuture), 401, 'AUTH_UNAUTHORIZED');
    t.pass('one lifetime after the upgrade (by the clock, whatever the iat), HS256 passes no more');
    const fresh = await onB.signIn(user.email);
    t.equal(headerOf(fresh.accessToken).alg, 'ES256', 'and sessions go on with the signing keys');
  },
);

t.test(
  'automatic rotation: a standby a day ahead, the rotation on time, the previous key revoked after its tokens',
  async (t) => {
    const clock = new TestClock();
    const a = await buildAccountsApp(t, { label: 'signing-keys-auto', env: { JWT_SECRET } });
    const b = await buildAnotherInstance(t, a, { clock, env: { JWT_SECRET, SIGNING_KEY_ROTATION_DAYS: '30' } });
    const step = () => b.app.signingKeys.rotateWhenDue(30, 900);
    const states = async () => (await b.app.signingKeys.list()).map((k) => k.status).sort();
    await step();
    t.same(await states(), ['current'], 'a new key: nothing to do');
    clock.advance(28 * 86_400);
    await step();
    t.same(await states(), ['current'], 'two days before its time: nothing yet');
    clock.advance(86_400 + 60);
    await step();
    t.same(await states(), ['current', 'standby'], 'a day before: the successor is published');
    const standby = (await b.app.signingKeys.list()).find((k) => k.status === 'standby')?.kid;
    await step();
    t.same(await states(), ['current', 'standby'], 'once only');
    clock.advance(86_400);
    await step();
    t.same(await states(), ['current', 'previous'], 'on time: the rotation');
    t.equal(b.app.signingKeys.current().kid, standby, 'to the key published a day before');
    clock.advance(900);
    await step();
    t.same(await states(), ['current', 'previous'], 'the previous key stays while its tokens may live');
    clock.advance(61);
    await step();
    t.same(await states(), ['current', 'revoked'], 'then it is revoked');
  },
);

t.test(
  'an instance whose read of the keys failed reads them again until it succeeds',
  { skip: !usingPostgres && 'PostgreSQL only' },
  async (t) => {
    const s = await setup(t);
    const b = await buildAnotherInstance(t, s, { ownConnection: true });
    const db = s.database.handle.db;
    const standby = (await s.post('/api/auth/signing-keys', {})).json().kid as string;
    await waitFor(() => b.app.signingKeys.verifying(standby) !== undefined, 'B knows the standby key');
    // A notification whose read fails on B (the table is away for a moment)...
    await sql`alter table signing_keys rename to signing_keys_away`.execute(db);
    await sql`select pg_notify('auth_signing_keys', 'x')`.execute(db);
    await new Promise((resolve) => setTimeout(resolve, 300));
    await sql`alter table signing_keys_away rename to signing_keys`.execute(db);
    // ...then a change nobody announces: B learns of it only by reading again.
    await sql`update signing_keys set status = 'revoked', revoked_at = now() where kid = ${standby}`.execute(db);
    await waitFor(() => b.app.signingKeys.verifying(standby) === undefined, 'B reads the keys again', 4_000);
    t.pass('B read the keys again after its failed read, and knows of the revocation');
  },
);

t.test(
  'another instance signs with the new key and refuses the revoked one within 2 s',
  { skip: !usingPostgres && 'PostgreSQL only' },
  async (t) => {
    const s = await setup(t);
    const b = await buildAnotherInstance(t, s, { ownConnection: true });
    await b.app.listen({ port: 0, host: '127.0.0.1' });
    const onB = accountCalls(b.app);
    let session = await onB.signIn(s.adminEmail, ADMIN_PASSWORD);
    const oldToken = session.accessToken;
    const rotatedAt = Date.now();
    const rotated = await s.post('/api/auth/signing-keys/rotate');
    const newKid = (rotated.json().keys as KeyView[]).find((k) => k.status === 'current')?.kid;
    for (;;) {
      const res = await onB.refresh(session.refreshToken);
      session = { ...session, accessToken: res.json().accessToken, refreshToken: res.json().refreshToken };
      if (headerOf(session.accessToken).kid === newKid) break;
      if (Date.now() - rotatedAt > 4_000) throw new Error('B still signs with the old key after 4 s');
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const rotationMs = Date.now() - rotatedAt;
    t.ok(rotationMs <= 2_000, `B signs with the new kid within 2 s (${rotationMs} ms)`);

    t.equal((await onB.current(oldToken)).statusCode, 200, 'B accepts the old key until it is revoked');
    const oldKid = headerOf(oldToken).kid;
    const revokedAt = Date.now();
    t.equal((await s.post(`/api/auth/signing-keys/${oldKid}/revoke`)).statusCode, 200);
    for (;;) {
      const res = await onB.current(oldToken);
      if (res.statusCode === 401) break;
      if (Date.now() - revokedAt > 4_000) throw new Error(`B still answers ${res.statusCode} after 4 s`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const revocationMs = Date.now() - revokedAt;
    t.ok(revocationMs <= 2_000, `B refuses the revoked key's token within 2 s (${revocationMs} ms)`);
    const clients = new RealtimeClients(t, urlOf(b.app));
    t.equal((await clients.refusal(oldToken)).data?.code, 'UNAUTHORIZED', "and B's socket handshake refuses it");
    await clients.connect(session.accessToken);
    t.same(clients.violations(), []);
  },
);
