import { sql } from 'kysely';
import t from 'tap';
import { hashPassword } from '../src/auth/crypto.ts';
import { buildTestApp } from './helpers/app.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { accessTokenFor } from './helpers/tokens.ts';
import type { QueryOf } from './helpers/typed-inject.ts';

t.test('GET /api/auth/users', async (t) => {
  const { app, api, database } = await buildTestApp(t);
  const db = database.handle.db;
  const admin = { authorization: `Bearer ${accessTokenFor(app, 'admin')}` };
  const list = (query: QueryOf<'get', '/api/auth/users'> = {}) => api.get('/api/auth/users', { query, headers: admin });
  /** The query as given, for values outside the schema. */
  const listRaw = (rawQuery: string) => api.get('/api/auth/users', { rawQuery, headers: admin });

  // 25 users: 20 created at the same instant (to test the id tiebreak), 5 at distinct times.
  const passwordHash = await hashPassword('irrelevant-password');
  const sameInstant = new Date('2026-01-01T00:00:00Z');
  const rows = [
    ...Array.from({ length: 20 }, (_, i) => ({
      email: `same${String(i).padStart(2, '0')}@example.com`,
      name: `Twin ${i}`,
      created_at: sameInstant,
    })),
    { email: 'ann.lee@example.com', name: 'Ann Lee', created_at: new Date('2026-02-01T00:00:00Z') },
    { email: 'bob@example.org', name: 'Robert O’Neil', created_at: new Date('2026-03-01T00:00:00Z') },
    { email: 'percent@example.com', name: '100% Real_Name', created_at: new Date('2026-04-01T00:00:00Z') },
    { email: 'under_score@example.com', name: 'Back\\Slash', created_at: new Date('2026-05-01T00:00:00Z') },
    { email: 'zed@example.net', name: null, created_at: new Date('2026-06-01T00:00:00Z') },
  ];
  for (const r of rows) {
    const user = await db
      .insertInto('users')
      .values({
        email: r.email,
        password_hash: passwordHash,
        profile: JSON.stringify({ name: r.name, avatar_url: null }) as never,
        created_at: r.created_at,
        updated_at: r.created_at,
      })
      .returning('id')
      .executeTakeFirstOrThrow();
    await db
      .insertInto('user_providers')
      .values({ user_id: user.id, provider: 'email', provider_account_id: r.email })
      .execute();
  }

  t.test('no token is 401, a bad token 401, a non-admin token 403', async (t) => {
    assertErrorBody(t, await api.get('/api/auth/users'), 401, 'UNAUTHORIZED');
    assertErrorBody(t, await api.get('/api/auth/users', { headers: { authorization: 'Bearer x.y.z' } }), 401);
    const user = { authorization: `Bearer ${accessTokenFor(app, 'user')}` };
    assertErrorBody(t, await api.get('/api/auth/users', { headers: user }), 403, 'FORBIDDEN');
  });

  t.test('defaults: offset 0, limit 10, newest first, exact total', async (t) => {
    const res = await list();
    t.equal(res.statusCode, 200);
    const body = res.json();
    t.same(body.pagination, { offset: 0, limit: 10, total: 25 });
    t.equal(body.data.length, 10);
    t.same(
      body.data.slice(0, 5).map((u: { email: string }) => u.email),
      ['zed@example.net', 'under_score@example.com', 'percent@example.com', 'bob@example.org', 'ann.lee@example.com'],
    );
  });

  t.test('each item is the spec’s AdminUser: the User, its role and whether it is disabled', async (t) => {
    const ann = (await list({ search: 'ann.lee' })).json().data[0];
    if (ann === undefined) throw new Error('Ann is not listed');
    t.same(Object.keys(ann).sort(), [
      'createdAt',
      'disabled',
      'disabledAt',
      'email',
      'emailVerified',
      'id',
      'metadata',
      'profile',
      'providers',
      'role',
      'updatedAt',
    ]);
    t.equal(ann.role, 'user');
    t.equal(ann.disabled, false);
    t.equal(ann.disabledAt, null);
    t.match(ann.id, /^[0-9a-f-]{36}$/);
    t.same(ann.profile, { name: 'Ann Lee', avatar_url: null });
    t.same(ann.metadata, {});
    t.equal(ann.emailVerified, false);
    t.ok(Array.isArray(ann.providers), 'providers is a JSON array, not a Postgres literal');
    t.same(ann.providers, ['email']);
    t.equal(ann.createdAt, '2026-02-01T00:00:00.000Z');
    t.equal(ann.updatedAt, '2026-02-01T00:00:00.000Z');
  });

  t.test('limit bounds and malformed numbers are 400 naming the parameter', async (t) => {
    const cases: Array<[string, RegExp]> = [
      ['?limit=1001', /^query\.limit must be an integer from 0 to 1000, without leading zeros$/],
      ['?limit=-1', /^query\.limit must be an integer from 0 to 1000/],
      ['?limit=abc', /^query\.limit must be an integer from 0 to 1000/],
      ['?limit=1.5', /^query\.limit must be an integer from 0 to 1000/],
      ['?limit=010', /^query\.limit must be an integer from 0 to 1000, without leading zeros$/],
      ['?limit=5&limit=6', /^query\.limit must be given once$/],
      ['?limt=5', /^query\.limt is not a parameter of this operation$/],
      ['?offset=-5', /^query\.offset must be an integer from 0 to 999999999999999/],
      ['?offset=1e3', /^query\.offset must be an integer from 0 to 999999999999999/],
      ['?offset=9999999999999999', /^query\.offset must be an integer from 0 to 999999999999999/],
      ['?search=a%00b', /^query\.search contains a NUL character/],
      [`?search=${'a'.repeat(257)}`, /^query\.search must have at most 256 characters$/],
    ];
    for (const [query, message] of cases) {
      t.match(assertErrorBody(t, await listRaw(query), 400, 'INVALID_INPUT').message, message, query);
    }
    t.equal((await list({ limit: '1000' })).statusCode, 200, '1000 is allowed');
    const zero = (await list({ limit: '0' })).json();
    t.same(zero, { data: [], pagination: { offset: 0, limit: 0, total: 25 } }, 'limit=0 gives only the total');
    const past = (await list({ offset: '100' })).json();
    t.same(
      past,
      { data: [], pagination: { offset: 100, limit: 10, total: 25 } },
      'past the end: empty page, total kept',
    );
  });

  t.test('search by email or name, any letter case; total follows the filter', async (t) => {
    const byEmail = (await list({ search: 'EXAMPLE.ORG' })).json();
    t.same(
      byEmail.data.map((u: { email: string }) => u.email),
      ['bob@example.org'],
    );
    t.equal(byEmail.pagination.total, 1);
    const byName = (await list({ search: 'robert o' })).json();
    t.same(
      byName.data.map((u: { email: string }) => u.email),
      ['bob@example.org'],
    );
    const twins = (await list({ search: 'twin', limit: '5' })).json();
    t.equal(twins.pagination.total, 20, 'total counts every match, not the page');
    t.equal(twins.data.length, 5);
    const none = (await list({ search: 'nobody-matches-this' })).json();
    t.same(none, { data: [], pagination: { offset: 0, limit: 10, total: 0 } });
    const spanning = (await list({ search: 'example.com ann' })).json();
    t.same(
      spanning.pagination.total,
      0,
      'text spanning the end of the email and the start of the name matches nothing',
    );
    const blank = (await list({ search: '  ' })).json();
    t.equal(blank.pagination.total, 25, 'a blank search is no filter');
  });

  t.test('%, _ and \\ in the search match themselves', async (t) => {
    const emails = async (q: string) => (await list({ search: q })).json().data.map((u: { email: string }) => u.email);
    t.same(await emails('%'), ['percent@example.com'], '% is literal');
    t.same(await emails('0% r'), ['percent@example.com']);
    t.same(await emails('_'), ['under_score@example.com', 'percent@example.com'], '_ is literal (email and name)');
    t.same(await emails('\\'), ['under_score@example.com'], 'a backslash is literal');
    t.same(await emails('s_m'), [], '_ does not match any single character');
  });

  t.test('every search path (scan, trigrams, four-character grams) agrees with a plain substring match', async (t) => {
    const everyone = await db.selectFrom('users').select(['email', 'profile']).execute();
    const expected = (term: string) => {
      const needle = term.toLowerCase();
      return everyone
        .filter((u) => {
          const name = (u.profile as { name?: string | null }).name ?? '';
          return u.email.toLowerCase().includes(needle) || name.toLowerCase().includes(needle);
        })
        .map((u) => u.email)
        .sort();
    };
    // lengths 1 and 2 scan, 3 uses the trigram index, 4 and more the gram index
    const terms = ['o', 'ZE', 'Bob', 'ROBERT', 'o’ne', 'ann.lee@', 'real_NAM', '100%', 'back\\sl', 'twin 1', 'ple.c'];
    for (const term of terms) {
      const body = (await list({ limit: '1000', search: term })).json();
      const got = body.data.map((u: { email: string }) => u.email).sort();
      t.same(got, expected(term), `search ${JSON.stringify(term)}`);
      t.equal(body.pagination.total, got.length, `total of ${JSON.stringify(term)}`);
    }
  });

  t.test('a renamed user is found by the new name and no longer by the old one', async (t) => {
    const renamed = await db
      .updateTable('users')
      .set({ profile: JSON.stringify({ name: 'Zora Quillfeather', avatar_url: null }) as never })
      .where('email', '=', 'zed@example.net')
      .returning('id')
      .executeTakeFirstOrThrow();
    t.same(
      (await list({ search: 'quillfeather' })).json().data.map((u: { id: string }) => u.id),
      [renamed.id],
    );
    await db
      .updateTable('users')
      .set({ profile: JSON.stringify({ name: null, avatar_url: null }) as never })
      .where('id', '=', renamed.id)
      .execute();
    t.equal((await list({ search: 'quillfeather' })).json().pagination.total, 0);
  });

  t.test('paging across equal creation times never repeats or skips', async (t) => {
    const seen: string[] = [];
    for (let offset = 0; offset < 25; offset += 3) {
      const page = (await list({ offset: String(offset), limit: '3' })).json();
      seen.push(...page.data.map((u: { id: string }) => u.id));
    }
    t.equal(seen.length, 25);
    t.equal(new Set(seen).size, 25, 'every user exactly once');
    const all = (await list({ limit: '1000' })).json().data.map((u: { id: string }) => u.id);
    t.same(seen, all, 'pages concatenate to the full list');
    const twins = all.slice(5);
    t.same(twins, [...twins].sort().reverse(), 'equal creation times are ordered by id, descending');
  });

  t.test('the unfiltered total stays exact through inserts, deletes and truncation', async (t) => {
    await db.insertInto('users').values({ email: 'late@example.com', password_hash: null }).execute();
    t.equal((await list()).json().pagination.total, 26);
    await db.deleteFrom('users').where('email', '=', 'late@example.com').execute();
    t.equal((await list()).json().pagination.total, 25);
    const counted = await sql<{ n: number }>`select count(*)::int as n from users`.execute(db);
    t.equal(counted.rows[0]?.n, 25, 'the counter equals count(*)');
  });
});
