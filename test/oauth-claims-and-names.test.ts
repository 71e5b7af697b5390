/**
 * What an OpenID Provider's token may claim, how often it signs in, and which characters a profile
 * name may hold, against the real loopback OpenID Provider (oidc-provider):
 *
 * - `xms_edov` vouches for an address only from Microsoft (the built-in `microsoft`, here pointed at
 *   the test provider); from any other issuer it is just a claim, in an ID token and in the
 *   redirect flow alike.
 * - An ID token opens one session: a second presentation (here or on a second instance over the
 *   same database, the signature re-encoded or not) is `401 ID_TOKEN_INVALID`, concurrent
 *   presentations open exactly one session, a presentation refused for another reason does not use
 *   the token up, and the housekeeping deletes the records once the tokens have expired.
 * - A nonce: compared when the request sends one; a token that carries one is refused without it.
 * - Profile names (sign-up, email-code sign-up, profile update) with control, bidirectional or
 *   invisible format characters are `400 INVALID_INPUT` naming the field; names from providers
 *   lose them; the contract's pattern and the service's list are the same characters.
 */
import { readFileSync } from 'node:fs';
import { sql } from 'kysely';
import t from 'tap';
import type { components } from '../generated/openapi.ts';
import { freePort } from '../scripts/lib/service-process.ts';
import { startAuthHousekeeping } from '../src/auth/housekeeping.ts';
import { vouchesWithXmsEdov } from '../src/auth/oauth/provider-clients.ts';
import { PROFILE_NAME_PATTERN, REFUSED_NAME_CHARACTERS } from '../src/auth/profile-name.ts';
import { buildAnotherInstance } from './helpers/app.ts';
import { buildAuthTestApp, decodeClaims } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { followAuthorization } from './helpers/oauth-browser.ts';
import { SERVICE_CLIENT, startOidcProvider } from './helpers/oidc-provider.ts';

const APP = 'https://app.example.com';
const REDIRECT = `${APP}/auth/callback`;
const port = await freePort();
const base = `http://127.0.0.1:${port}`;
const callbackOf = (name: string) => `${base}/api/auth/oauth/${name}/callback`;

const idp = await startOidcProvider({
  clients: [{ ...SERVICE_CLIENT, redirectUris: [callbackOf('testidp'), callbackOf('microsoft')] }],
});
t.teardown(() => idp.close());

const env = {
  PUBLIC_URL: base,
  COOKIE_SECURE: 'false',
  AUTH_REDIRECT_ALLOWLIST: `${APP}/auth/`,
  OAUTH_PROVIDERS: 'microsoft,testidp',
  OAUTH_MICROSOFT_CLIENT_ID: SERVICE_CLIENT.clientId,
  OAUTH_MICROSOFT_CLIENT_SECRET: SERVICE_CLIENT.clientSecret,
  OAUTH_MICROSOFT_ISSUER: idp.issuer,
  OAUTH_TESTIDP_CLIENT_ID: SERVICE_CLIENT.clientId,
  OAUTH_TESTIDP_CLIENT_SECRET: SERVICE_CLIENT.clientSecret,
  OAUTH_TESTIDP_ISSUER: idp.issuer,
};
const first = await buildAuthTestApp(t, { label: 'oauth-claims', env });
const { app, api, clock, database, signUp } = first;
await app.listen({ port, host: '127.0.0.1' });
const db = database.handle.db;

/** A second instance on the same database, with sign-ups closed. */
const { api: second } = await buildAnotherInstance(t, first, {
  env: { RATE_LIMIT_SIGN_IN: '1000', ...env, ALLOW_SIGN_UP: 'false' },
  clock,
});

const idTokenSignIn = (body: components['schemas']['IdTokenSignInRequest'], on = api) =>
  on.post('/api/auth/id-token', { query: { client_type: 'mobile' }, body });
const issue = (login: string, nonce?: string) =>
  idp.issueIdToken({ clientId: SERVICE_CLIENT.clientId, login, ...(nonce === undefined ? {} : { nonce }) });

/** The redirect flow through the service, as a browser: the URL the app's page is sent to. */
async function redirectFlow(provider: string, login: string): Promise<URL> {
  const path = provider === 'microsoft' ? '/api/auth/oauth/{provider}' : '/api/auth/oauth/custom/{provider}';
  const started = await api.get(path, {
    params: { provider },
    query: { redirect_uri: REDIRECT, code_challenge: 'c'.repeat(43) },
  });
  if (started.statusCode !== 200) throw new Error(`start: ${started.body}`);
  const { finalUrl } = await followAuthorization(started.json().authUrl, { login, stopAt: (u) => u.origin === APP });
  return finalUrl;
}

const sessionsOf = async (email: string) => {
  const { rows } = await sql<{ n: number | string }>`
    select count(*) as n from sessions s join users u on u.id = s.user_id where u.email = ${email}`.execute(db);
  return Number(rows[0]?.n);
};

t.test('xms_edov vouches for an address only from Microsoft', async (t) => {
  // Claims as Microsoft sends them: no email_verified, the optional xms_edov.
  const claims = (sub: string) => ({ aud: SERVICE_CLIENT.clientId, sub, email: `${sub}@example.test` });
  const other = await idp.signIdToken({ ...claims('edov-other'), xms_edov: true });
  assertErrorBody(t, await idTokenSignIn({ provider: 'testidp', token: other }), 403, 'OAUTH_EMAIL_UNVERIFIED');
  const asString = await idp.signIdToken({ ...claims('edov-other2'), xms_edov: '1' });
  assertErrorBody(t, await idTokenSignIn({ provider: 'testidp', token: asString }), 403, 'OAUTH_EMAIL_UNVERIFIED');

  const microsoft = await idp.signIdToken({ ...claims('edov-ms'), xms_edov: true });
  const signedIn = await idTokenSignIn({ provider: 'microsoft', token: microsoft });
  t.equal(signedIn.statusCode, 200, 'from Microsoft it vouches');
  t.equal(signedIn.json().user.email, 'edov-ms@example.test');
  const unvouched = await idp.signIdToken({ ...claims('edov-ms2'), xms_edov: false });
  assertErrorBody(t, await idTokenSignIn({ provider: 'microsoft', token: unvouched }), 403, 'OAUTH_EMAIL_UNVERIFIED');

  // The redirect flow: the provider's ID token carries xms_edov and no email_verified.
  idp.accounts.set('edov-flow', { email: 'edov-flow@example.test', email_verified: null, xms_edov: true });
  const refused = await redirectFlow('testidp', 'edov-flow');
  t.equal(refused.searchParams.get('error'), 'OAUTH_EMAIL_UNVERIFIED', 'the redirect flow of another issuer: refused');
  const accepted = await redirectFlow('microsoft', 'edov-flow');
  t.match(accepted.searchParams.get('insforge_code'), /^\S{43}$/, "Microsoft's redirect flow: accepted");

  // Which providers are Microsoft's: the built-in name, or an issuer on login.microsoftonline.com.
  const oidc = (name: string, issuer: string) =>
    ({
      kind: 'oidc',
      name,
      issuer,
      builtIn: false,
      clientId: 'c',
      clientSecret: 's',
      scopes: ['openid'],
      linkByEmail: true,
    }) as const;
  t.ok(vouchesWithXmsEdov(oidc('microsoft', idp.issuer)));
  t.ok(vouchesWithXmsEdov(oidc('entra', 'https://login.microsoftonline.com/0000-tenant/v2.0')));
  t.notOk(vouchesWithXmsEdov(oidc('google', 'https://accounts.google.com')));
  t.notOk(vouchesWithXmsEdov(oidc('corp', 'https://login.microsoftonline.com.evil.test/v2.0')));
});

t.test('an ID token opens one session: replays, re-encoded signatures, another instance', async (t) => {
  const token = await issue('replay');
  const first = await idTokenSignIn({ provider: 'testidp', token });
  t.equal(first.statusCode, 200, 'the first presentation signs in');
  const again = assertErrorBody(t, await idTokenSignIn({ provider: 'testidp', token }), 401, 'ID_TOKEN_INVALID');
  t.match(again.message, /already been used/);
  assertErrorBody(t, await idTokenSignIn({ provider: 'testidp', token }, second), 401, 'ID_TOKEN_INVALID');
  // The same issuer and client under another provider name: the same token, still used.
  assertErrorBody(t, await idTokenSignIn({ provider: 'microsoft', token }), 401, 'ID_TOKEN_INVALID');
  t.equal(await sessionsOf('replay@example.test'), 1, 'one session in all');

  // The signature's last base64url character carries unused bits: another string, the same signature.
  const fresh = await issue('reencoded');
  const last = fresh.at(-1) as string;
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  const sibling = fresh.slice(0, -1) + alphabet[alphabet.indexOf(last) ^ 1];
  t.not(sibling, fresh);
  t.equal(
    (await idTokenSignIn({ provider: 'testidp', token: sibling })).statusCode,
    200,
    'the re-encoded one verifies',
  );
  assertErrorBody(t, await idTokenSignIn({ provider: 'testidp', token: fresh }), 401, 'ID_TOKEN_INVALID');

  // Recorded until the token could no longer be taken: its expiry plus the 30 s clock tolerance.
  const { rows } = await sql<{ expires_at: Date }>`select expires_at from oauth_id_token_uses`.execute(db);
  const exp = Number(decodeClaims(token).exp);
  t.ok(
    rows.some((r) => new Date(r.expires_at).getTime() === (exp + 30) * 1000),
    'the record expires with the token',
  );
  const stored = JSON.stringify(rows) + JSON.stringify((await sql`select * from oauth_id_token_uses`.execute(db)).rows);
  t.notOk(stored.includes(token.split('.')[1] as string), 'the token itself is not stored');
});

t.test('concurrent presentations of one ID token open exactly one session', async (t) => {
  const token = await issue('racer');
  const answers = await Promise.all(Array.from({ length: 8 }, () => idTokenSignIn({ provider: 'testidp', token })));
  const also = await Promise.all(
    Array.from({ length: 4 }, () => idTokenSignIn({ provider: 'testidp', token }, second)),
  );
  const all = [...answers, ...also];
  t.equal(all.filter((r) => r.statusCode === 200).length, 1, 'one 200');
  t.same(
    [...new Set(all.filter((r) => r.statusCode !== 200).map((r) => `${r.statusCode} ${r.json<401>().error}`))],
    ['401 ID_TOKEN_INVALID'],
    'the others are refused',
  );
  t.equal(await sessionsOf('racer@example.test'), 1, 'one session in the database');
});

t.test('a presentation that opens no session does not use the token up', async (t) => {
  const token = await issue('newcomer');
  // The second instance has sign-ups closed: refused, and the token stays unused.
  assertErrorBody(t, await idTokenSignIn({ provider: 'testidp', token }, second), 403, 'SIGN_UP_DISABLED');
  t.equal((await idTokenSignIn({ provider: 'testidp', token })).statusCode, 200, 'then it signs in');
  assertErrorBody(t, await idTokenSignIn({ provider: 'testidp', token }, second), 401, 'ID_TOKEN_INVALID');
});

t.test('the nonce: compared when sent; a token that carries one needs it', async (t) => {
  const withNonce = await issue('noncer', 'n-123');
  const missing = assertErrorBody(
    t,
    await idTokenSignIn({ provider: 'testidp', token: withNonce }),
    401,
    'ID_TOKEN_INVALID',
  );
  t.match(missing.message, /nonce/);
  assertErrorBody(
    t,
    await idTokenSignIn({ provider: 'testidp', token: withNonce, nonce: 'n-456' }),
    401,
    'ID_TOKEN_INVALID',
  );
  t.equal(
    (await idTokenSignIn({ provider: 'testidp', token: withNonce, nonce: 'n-123' })).statusCode,
    200,
    'refusals before the checks passed did not use it up',
  );
  const without = await issue('noncer');
  assertErrorBody(
    t,
    await idTokenSignIn({ provider: 'testidp', token: without, nonce: 'n-123' }),
    401,
    'ID_TOKEN_INVALID',
  );
  t.equal((await idTokenSignIn({ provider: 'testidp', token: without })).statusCode, 200, 'no nonce on either side');
});

const REFUSED = [
  '\u0000',
  '\u0007',
  '\t',
  '\n',
  '\u001B',
  '\u007F',
  '\u0085',
  '\u009F',
  '\u00AD',
  '\u061C',
  '\u180E',
  '\u200B',
  '\u200E',
  '\u200F',
  '\u2028',
  '\u2029',
  '\u202A',
  '\u202B',
  '\u202C',
  '\u202D',
  '\u202E',
  '\u2060',
  '\u2063',
  '\u2066',
  '\u2067',
  '\u2068',
  '\u2069',
  '\u206F',
  '\uFEFF',
  '\uFFF9',
  '\uFFFB',
];
const hex = (c: string) => `U+${(c.codePointAt(0) as number).toString(16).toUpperCase().padStart(4, '0')}`;
// A woman technologist (ZWJ), Persian with a ZWNJ, Hebrew and Arabic letters, accents.
const ACCEPTED = ['👩\u200D💻 Ada', 'می\u200Cخواهم', 'דוד כהן', 'محمد', 'Zoë Ångström'];

t.test('profile names: control, bidirectional and invisible characters are refused, naming the field', async (t) => {
  const session = (await idTokenSignIn({ provider: 'testidp', token: await issue('namer') })).json();
  const authorization = { authorization: `Bearer ${session.accessToken}` };
  const patch = (name: string) =>
    api.patch('/api/auth/profiles/current', { headers: authorization, body: { profile: { name } } });
  let n = 0;
  for (const c of REFUSED) {
    const name = `Eve${c}lyn`;
    const updated = assertErrorBody(t, await patch(name), 400, 'INVALID_INPUT');
    t.match(updated.message, /^body\.profile\.name (must not contain|contains a NUL)/, `profile update: ${hex(c)}`);
    const signedUp = assertErrorBody(t, await signUp(`refused-${n++}@example.test`, { name }), 400, 'INVALID_INPUT');
    t.match(signedUp.message, /^body\.name (must not contain|contains a NUL)/, `sign-up: ${hex(c)}`);
  }
  const byCode = await api.post('/api/auth/sessions', {
    query: { client_type: 'mobile' },
    body: { method: 'otp', email: 'code@example.test', otp: '123456', name: 'Mallory\u202Egnp.exe' },
  });
  t.match(
    assertErrorBody(t, byCode, 400, 'INVALID_INPUT').message,
    /^body\.name must not contain/,
    'email-code sign-up',
  );
  const current = await api.get('/api/auth/sessions/current', { headers: authorization });
  t.equal(current.json().user.profile.name, 'namer', 'nothing was stored');

  for (const name of ACCEPTED) {
    const res = await patch(name);
    t.equal(res.statusCode, 200, `accepted: ${name}`);
    t.equal(res.json().profile.name, name);
    t.equal((await signUp(`accepted-${n++}@example.test`, { name })).statusCode, 202, `sign-up accepts ${name}`);
  }
});

t.test("names from providers lose those characters (the provider's name is not refused)", async (t) => {
  idp.accounts.set('spoofer', { name: `\u202EEve\u2066 \u200BMallory\u0007\uFEFF${'\u2069'}` });
  const token = await issue('spoofer');
  const res = await idTokenSignIn({ provider: 'testidp', token });
  t.equal(res.statusCode, 200);
  t.equal(res.json().user.profile.name, 'Eve Mallory');
  idp.accounts.set('invisible', { name: '\u202E\u200B\u2060' });
  const empty = await idTokenSignIn({ provider: 'testidp', token: await issue('invisible') });
  t.equal(empty.json().user.profile.name, null, 'nothing left: no name');
  idp.accounts.set('emoji', { name: '👩\u200D💻 Ada' });
  const kept = await idTokenSignIn({ provider: 'testidp', token: await issue('emoji') });
  t.equal(kept.json().user.profile.name, '👩\u200D💻 Ada', 'the joiner stays');
});

t.test("the contract's name pattern and the service's list are the same characters", async (t) => {
  const spec = JSON.parse(readFileSync(new URL('../generated/openapi.json', import.meta.url), 'utf8'));
  const schemas = spec.components.schemas;
  const patterns = [
    schemas.SignUpRequest.properties.name.pattern,
    schemas.OtpSignInRequest.properties.name.pattern,
    schemas.ProfileUpdate.properties.name.pattern,
  ];
  t.same(patterns, [PROFILE_NAME_PATTERN, PROFILE_NAME_PATTERN, PROFILE_NAME_PATTERN], 'one pattern on every name');
  const contract = new RegExp(PROFILE_NAME_PATTERN, 'u');
  const withoutUnicodeFlag = new RegExp(PROFILE_NAME_PATTERN);
  const one = new RegExp(REFUSED_NAME_CHARACTERS.source, 'u');
  const disagreements: string[] = [];
  for (let cp = 0; cp <= 0xffff; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    const c = String.fromCodePoint(cp);
    const refused = one.test(c);
    if (contract.test(c) === refused || withoutUnicodeFlag.test(c) === refused) disagreements.push(hex(c));
    // Every control (Cc) and every bidirectional override and isolate is refused.
    if ((/\p{Cc}/u.test(c) || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069)) && !refused) {
      disagreements.push(`${hex(c)} accepted`);
    }
  }
  t.same(disagreements, [], 'no code point on which they differ');
  for (const c of REFUSED) t.ok(one.test(c), `${hex(c)} is refused`);
  for (const name of ACCEPTED) t.ok(contract.test(name), `${name} is accepted`);
});

t.test('expired records of used ID tokens are deleted by the housekeeping', async (t) => {
  const count = async () =>
    Number((await sql<{ n: number | string }>`select count(*) as n from oauth_id_token_uses`.execute(db)).rows[0]?.n);
  t.ok((await count()) > 0, 'records of the tokens used above');
  const late = await issue('late');
  clock.advance(3600 + 31); // every token above has expired, with the clock tolerance
  assertErrorBody(t, await idTokenSignIn({ provider: 'testidp', token: late }), 401, 'ID_TOKEN_INVALID');
  const log = { debug() {}, info() {}, warn() {}, error() {} } as unknown as Parameters<
    typeof startAuthHousekeeping
  >[2];
  const stop = startAuthHousekeeping(db, () => clock.now(), log);
  t.teardown(stop);
  // Its first run comes 5 s after it starts.
  for (let i = 0; i < 60 && (await count()) > 0; i++) await new Promise((resolve) => setTimeout(resolve, 250));
  t.equal(await count(), 0, 'all deleted');
});
