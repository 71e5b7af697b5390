// Profiles: any signed-in user reads any account's public part (id and profile, nothing else);
// the signed-in user merges changes into its own, within the limits the contract states, and can
// never set an account field there. Unknown, malformed and disabled ids get one and the same 404.
import { randomUUID } from 'node:crypto';
import { createClient } from '@insforge/sdk';
import { getProfileResponseSchema } from '@insforge/shared-schemas';
import t from 'tap';
import { MAX_PROFILE_BYTES, MAX_PROFILE_FIELDS } from '../src/auth/user-view.ts';
import { buildAccountsApp } from './helpers/accounts.ts';
import { newEmail, PASSWORD } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { urlOf } from './helpers/realtime-client.ts';
import { assertMatchesSchema } from './helpers/spec-schema.ts';
import { accessTokenFor } from './helpers/tokens.ts';

t.test('GET /api/auth/profiles/{userId}: the public part only, to any signed-in user', async (t) => {
  const { api, signUp, getProfile, setProfile, updateUser, admin } = await buildAccountsApp(t, {
    label: 'profiles',
  });
  const ada = await signUp(newEmail('ada'), { name: 'Ada Lovelace' });
  const bob = await signUp(newEmail('bob'));

  const res = await getProfile(bob.accessToken, ada.userId);
  t.equal(res.statusCode, 200);
  t.same(res.json(), { id: ada.userId, profile: { name: 'Ada Lovelace', avatar_url: null } }, 'id and profile');
  t.same(Object.keys(res.json()).sort(), ['id', 'profile'], 'no email, role, dates or anything else');
  assertMatchesSchema(t, res.json(), 'UserProfile');
  t.equal((await getProfile(ada.accessToken, ada.userId)).statusCode, 200, 'one reads one’s own too');
  t.equal(
    (await getProfile(bob.accessToken, ada.userId.toUpperCase())).json().id,
    ada.userId,
    'an upper-case id names the same account (the answer gives it in lower case)',
  );
  t.equal((await setProfile(ada.accessToken, { bio: 'Analyst' })).statusCode, 200);
  t.same(
    (await getProfile(bob.accessToken, ada.userId)).json().profile,
    { name: 'Ada Lovelace', avatar_url: null, bio: 'Analyst' },
    'free-form fields are public',
  );

  const params = { userId: ada.userId };
  assertErrorBody(t, await api.get('/api/auth/profiles/{userId}', { params }), 401, 'UNAUTHORIZED');
  assertErrorBody(
    t,
    await api.get('/api/auth/profiles/{userId}', { params, headers: { authorization: 'Bearer x.y.z' } }),
    401,
    'AUTH_UNAUTHORIZED',
  );

  const unknown = await getProfile(bob.accessToken, randomUUID());
  const body = assertErrorBody(t, unknown, 404, 'NOT_FOUND');
  // (GET /api/auth/profiles/current is 405, a path of its own: test/operation-rules.test.ts.)
  for (const id of ['not-a-uuid', '123', `${ada.userId}x`, '%27%20or%201%3D1', 'x'.repeat(3000)]) {
    const res = await getProfile(bob.accessToken, id);
    assertErrorBody(t, res, 404, 'NOT_FOUND');
    t.same(res.json(), body, `a malformed id (${id.slice(0, 20)}) gets the answer of an unknown one`);
  }

  t.equal((await updateUser(admin.accessToken, ada.userId, { disabled: true })).statusCode, 200, 'Ada is disabled');
  const disabled = await getProfile(bob.accessToken, ada.userId);
  assertErrorBody(t, disabled, 404, 'NOT_FOUND');
  t.same(disabled.json(), body, "a disabled account's profile gets the answer of an unknown one");
  t.equal((await updateUser(admin.accessToken, ada.userId, { disabled: false })).statusCode, 200, 'enabled again');
  t.equal((await getProfile(bob.accessToken, ada.userId)).statusCode, 200, 'and readable again');
});

t.test('PATCH /api/auth/profiles/current merges, shows everywhere, and removes with null', async (t) => {
  const { api, signUp, setProfile, getProfile, current, refresh, admin } = await buildAccountsApp(t, {
    label: 'profiles-set',
  });
  const ada = await signUp(newEmail('ada'), { name: 'Ada' });

  const set = await setProfile(ada.accessToken, {
    avatar_url: 'https://cdn.example.com/avatars/ada.png',
    bio: 'Analyst',
    birth_year: 1815,
    verified_author: true,
  });
  t.equal(set.statusCode, 200);
  const expected = {
    name: 'Ada',
    avatar_url: 'https://cdn.example.com/avatars/ada.png',
    bio: 'Analyst',
    birth_year: 1815,
    verified_author: true,
  };
  t.same(set.json(), { id: ada.userId, profile: expected }, '{id, profile} with the merge result');
  assertMatchesSchema(t, set.json(), 'UserProfile');

  const renamed = await setProfile(ada.accessToken, { name: 'Ada Lovelace', bio: 'Mathematician' });
  t.same(
    renamed.json().profile,
    { ...expected, name: 'Ada Lovelace', bio: 'Mathematician' },
    'fields not sent are kept, fields sent replace',
  );
  t.same(
    (await setProfile(ada.accessToken, {})).json().profile,
    renamed.json().profile,
    'an empty patch changes nothing',
  );

  // Everywhere the account's User appears.
  const shown = { ...expected, name: 'Ada Lovelace', bio: 'Mathematician' };
  t.same((await current(ada.accessToken)).json().user.profile, shown, 'the current session');
  const signedIn = await api.post('/api/auth/sessions', {
    query: { client_type: 'mobile' },
    body: { email: ada.email, password: PASSWORD },
  });
  t.same(signedIn.json().user.profile, shown, 'a new session result');
  t.same((await refresh(ada.refreshToken)).json().user.profile, shown, 'a refreshed session result');
  const asAdmin = { authorization: `Bearer ${admin.accessToken}` };
  const listed = await api.get('/api/auth/users', { query: { search: ada.email }, headers: asAdmin });
  t.same(listed.json().data[0]?.profile, shown, 'the user directory');
  t.equal(
    (await api.get('/api/auth/users', { query: { search: 'Lovelace' }, headers: asAdmin })).json().pagination.total,
    1,
    'the directory searches the new name',
  );

  const removed = await setProfile(ada.accessToken, { bio: null, avatar_url: null, name: null, unknown_field: null });
  t.same(
    removed.json().profile,
    { name: null, avatar_url: null, birth_year: 1815, verified_author: true },
    'null removes a field (name and avatar_url then read null; removing an absent one is no error)',
  );
  t.same((await getProfile(ada.accessToken, ada.userId)).json().profile, removed.json().profile, 'as stored');
});

t.test('PATCH /api/auth/profiles/current refuses account fields and bad values', async (t) => {
  const { app, api, signUp, setProfile, current, database } = await buildAccountsApp(t, { label: 'profiles-refused' });
  const ada = await signUp(newEmail('ada'), { name: 'Ada' });
  const before = (await current(ada.accessToken)).json().user;

  const refused: [string, unknown][] = [
    ['email', { email: 'mallory@example.com' }],
    ['role', { role: 'admin' }],
    ['id', { id: randomUUID() }],
    ['emailVerified', { emailVerified: true }],
    ['password', { password: 'x' }],
    ['metadata', { metadata: 'x' }],
    ['createdAt', { createdAt: '2020-01-01' }],
    ['Email (another case)', { Email: 'mallory@example.com' }],
    ['ROLE', { ROLE: 'admin' }],
    ['e_mail (with an underscore)', { e_mail: 'mallory@example.com' }],
    ['Disabled_At', { Disabled_At: false }],
    ['an object value', { address: { city: 'London' } }],
    ['an array value', { tags: ['a'] }],
    ['a name starting with a digit', { '1st': 'x' }],
    ['a name with a hyphen', { 'favourite-colour': 'blue' }],
    ['a name starting with _', { _private: 'x' }],
    ['__proto__-like name', { constructor_: 'x', __proto: 'x' }],
    ['a name of 65 characters', { [`a${'b'.repeat(64)}`]: 'x' }],
    ['a string of 1001 characters', { bio: 'x'.repeat(1001) }],
    ['an empty name', { name: '' }],
    ['a name of 101 characters', { name: 'n'.repeat(101) }],
    ['a name that is a number', { name: 42 }],
    ['a javascript: avatar', { avatar_url: 'javascript:alert(1)' }],
    ['an ftp avatar', { avatar_url: 'ftp://example.com/a.png' }],
    ['a data: avatar', { avatar_url: 'data:image/png;base64,AAAA' }],
    ['an avatar that is no URL', { avatar_url: 'not a url' }],
    ['an avatar of 2049 characters', { avatar_url: `https://example.com/${'a'.repeat(2030)}` }],
    ['51 fields in one patch', Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`f${i}`, i]))],
  ];
  for (const [what, profile] of refused) {
    const res = await setProfile(ada.accessToken, profile);
    const body = assertErrorBody(t, res, 400, 'INVALID_INPUT');
    t.match(body.message, /^body\.profile/, `${what}: the message names the field (${body.message})`);
  }
  for (const payload of [{}, { profile: null }, { profile: 'x' }, { profile: {}, email: 'x@example.com' }]) {
    assertErrorBody(
      t,
      await api.patch('/api/auth/profiles/current', {
        headers: { authorization: `Bearer ${ada.accessToken}` },
        rawBody: payload,
      }),
      400,
      'INVALID_INPUT',
    );
  }
  const after = (await current(ada.accessToken)).json().user;
  t.same(after, before, 'nothing changed: not the email, not the profile');
  const row = await database.handle.db
    .selectFrom('users')
    .select(['email', 'role', 'email_verified'])
    .where('id', '=', ada.userId)
    .executeTakeFirstOrThrow();
  t.same(row, { email: ada.email, role: 'user', email_verified: false }, 'the account fields in the database too');

  assertErrorBody(t, await api.patch('/api/auth/profiles/current', { body: { profile: {} } }), 401);
  const ghost = accessTokenFor(app);
  assertErrorBody(t, await setProfile(ghost, { bio: 'x' }), 401, 'UNAUTHORIZED');
  assertErrorBody(
    t,
    await api.patch('/api/auth/profiles/current', {
      headers: { authorization: `Bearer ${ada.accessToken}`, 'content-type': 'text/plain' },
      rawBody: 'bio=x',
    }),
    415,
    'UNSUPPORTED_MEDIA_TYPE',
  );
  assertErrorBody(
    t,
    await api.patch('/api/auth/profiles/current', {
      headers: { authorization: `Bearer ${ada.accessToken}` },
      body: { profile: { bio: 'x'.repeat(17_000) } },
    }),
    413,
    'PAYLOAD_TOO_LARGE',
  );
});

t.test('the limits hold on the merged profile: 50 fields and 4096 bytes', async (t) => {
  const { signUp, setProfile, getProfile } = await buildAccountsApp(t, { label: 'profiles-limits' });
  const ada = await signUp(newEmail('ada'));
  const free = MAX_PROFILE_FIELDS - 2;

  const fields = (from: number, n: number) =>
    Object.fromEntries(Array.from({ length: n }, (_, i) => [`f${from + i}`, 1]));
  t.equal((await setProfile(ada.accessToken, fields(0, 30))).statusCode, 200, '30 free-form fields');
  const over = await setProfile(ada.accessToken, fields(30, free - 30 + 1));
  t.match(assertErrorBody(t, over, 400, 'INVALID_INPUT').message, /at most 50 fields/, 'one field too many in all');
  t.equal(Object.keys((await getProfile(ada.accessToken, ada.userId)).json().profile).length, 32, 'nothing was stored');
  const exact = await setProfile(ada.accessToken, fields(30, free - 30));
  t.equal(exact.statusCode, 200, `exactly ${MAX_PROFILE_FIELDS} fields, name and avatar_url included`);
  t.equal(Object.keys(exact.json().profile).length, MAX_PROFILE_FIELDS);
  t.equal((await setProfile(ada.accessToken, { name: 'Ada' })).statusCode, 200, 'setting name adds no field');
  assertErrorBody(t, await setProfile(ada.accessToken, { f100: 1 }), 400, 'INVALID_INPUT');
  t.equal(
    (await setProfile(ada.accessToken, { f0: null, f100: 1 })).statusCode,
    200,
    'a field removed in the same patch makes room',
  );

  // Bytes: the stored JSON (UTF-8, so é counts two), exactly at the limit and one byte over.
  const bob = await signUp(newEmail('bob'));
  const size = (p: object) => Buffer.byteLength(JSON.stringify(p), 'utf8');
  t.same((await setProfile(bob.accessToken, { a: 'x' })).json().profile, { name: null, avatar_url: null, a: 'x' });
  // {"a":"x"} is 9 bytes; each field ,"sN":"…" adds 8 bytes and its value's.
  const filler = {
    s0: 'x'.repeat(1000),
    s1: 'x'.repeat(1000),
    s2: 'x'.repeat(1000),
    s3: 'x'.repeat(1000),
    s4: `${'é'.repeat(23)}x`,
  };
  t.equal(size({ a: 'x', ...filler }), MAX_PROFILE_BYTES, 'the filler makes exactly the limit');
  const atLimit = await setProfile(bob.accessToken, filler);
  t.equal(atLimit.statusCode, 200, `exactly ${MAX_PROFILE_BYTES} bytes of JSON is accepted`);
  const oneMore = await setProfile(bob.accessToken, { a: 'xy' });
  t.match(
    assertErrorBody(t, oneMore, 400, 'INVALID_INPUT').message,
    /at most 4096 bytes/,
    'one byte more is refused (counted in bytes, not characters)',
  );
  t.equal((await getProfile(bob.accessToken, bob.userId)).json().profile.a, 'x', 'and nothing was stored');
});

t.test('two patches at once cannot together pass the limits each one checked', async (t) => {
  const { signUp, setProfile, getProfile } = await buildAccountsApp(t, { label: 'profiles-race' });
  for (let round = 0; round < 5; round++) {
    const ada = await signUp(newEmail(`race${round}`));
    const patch = (prefix: string) => Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`${prefix}${i}`, i]));
    const results = await Promise.all([
      setProfile(ada.accessToken, patch('a')),
      setProfile(ada.accessToken, patch('b')),
    ]);
    const statuses = results.map((r) => r.statusCode).sort();
    t.same(statuses, [200, 400], `round ${round}: one merged, the other refused (${statuses.join(', ')})`);
    const fields = Object.keys((await getProfile(ada.accessToken, ada.userId)).json().profile).length;
    t.equal(fields, 32, 'the stored profile holds one patch’s fields');
  }
});

t.test('InsForge’s SDK: setProfile and getProfile', async (t) => {
  const { app, signUp } = await buildAccountsApp(t, { label: 'profiles-sdk' });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const ada = await signUp(newEmail('ada'), { name: 'Ada' });
  const bob = await signUp(newEmail('bob'));
  const asAda = createClient({ baseUrl: urlOf(app), retryCount: 0, accessToken: ada.accessToken });
  const set = await asAda.auth.setProfile({
    avatar_url: 'https://cdn.example.com/ada.png',
    bio: 'Analyst',
    year: 1815,
  });
  t.equal(set.error, null, 'setProfile: no error');
  t.same(set.data, {
    id: ada.userId,
    profile: { name: 'Ada', avatar_url: 'https://cdn.example.com/ada.png', bio: 'Analyst', year: 1815 },
  });
  const asBob = createClient({ baseUrl: urlOf(app), retryCount: 0, accessToken: bob.accessToken });
  const got = await asBob.auth.getProfile(ada.userId);
  t.equal(got.error, null, 'getProfile: no error');
  t.same(got.data, set.data, 'the same {id, profile}');
  const parsed = getProfileResponseSchema.safeParse(got.data);
  t.ok(parsed.success, 'valid for the SDK’s own schema (@insforge/shared-schemas)');
  const missing = await asBob.auth.getProfile(randomUUID());
  t.match(missing.error, { statusCode: 404, error: 'NOT_FOUND' }, 'an unknown id: the SDK returns the 404');
});
