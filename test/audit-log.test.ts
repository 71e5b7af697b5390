// The audit log as administrators and account holders read it (GET /api/auth/audit-log and
// /api/auth/audit-log/me): who may read what, newest first, the filters, keyset paging that neither
// repeats nor skips an entry while entries are being recorded, the retention, and that no entry
// holds a secret. The contract's type list is the code's (AUDIT_EVENT_TYPES).
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { sql } from 'kysely';
import t from 'tap';
import { encodeCursor, parseInstant } from '../src/audit/audit-view.ts';
import { AUDIT_EVENT_TYPES, OWN_HISTORY_TYPES } from '../src/audit/event-types.ts';
import { startAuthHousekeeping, sweepAuditLog } from '../src/auth/housekeeping.ts';
import { insertAuditRow, type NewAuditRow } from '../src/db/repositories/audit-log.ts';
import { specDocument } from '../src/spec.ts';
import { ADMIN_PASSWORD, bearer, buildAccountsApp } from './helpers/accounts.ts';
import { PASSWORD } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { assertMatchesSchema } from './helpers/spec-schema.ts';
import { accessTokenFor } from './helpers/tokens.ts';
import type { QueryOf } from './helpers/typed-inject.ts';

const DAY_MS = 86_400_000;
const RETENTION_DAYS = 30;

// One app and database for the file (each test works on accounts of its own), kept RETENTION_DAYS.
const a = await buildAccountsApp(t, { label: 'audit-log', env: { AUDIT_RETENTION_DAYS: String(RETENTION_DAYS) } });
const db = a.database.handle.db;

/** A row about `userId` at `occurredAt`, the rest made up. */
function row(userId: string | null, occurredAt: Date, more: Partial<NewAuditRow> = {}): NewAuditRow {
  return {
    occurredAt,
    type: 'sign_in',
    outcome: 'success',
    method: 'password',
    actorId: userId,
    userId,
    sessionId: randomUUID(),
    ip: '198.51.100.7',
    userAgent: 'audit-log.test',
    details: { clientType: 'mobile', aal: 'aal1' },
    ...more,
  };
}

// Entries for the app's own housekeeping to sweep (its first run comes 5 s after the start): one
// past AUDIT_RETENTION_DAYS, one within it.
const expiring = randomUUID();
await insertAuditRow(db, row(expiring, new Date(Date.now() - (RETENTION_DAYS + 1) * DAY_MS)));
await insertAuditRow(db, row(expiring, new Date(Date.now() - (RETENTION_DAYS - 1) * DAY_MS)));

type Events = Array<{
  id: string;
  type: string;
  actorId: string | null;
  userId: string | null;
  occurredAt: string;
  sessionId: string | null;
}>;

const adminHeaders = bearer(a.admin.accessToken);
const list = (query: QueryOf<'get', '/api/auth/audit-log'> = {}) =>
  a.api.get('/api/auth/audit-log', { query, headers: adminHeaders });
const listRaw = (rawQuery: string) => a.api.get('/api/auth/audit-log', { rawQuery, headers: adminHeaders });
const own = (token: string, query: QueryOf<'get', '/api/auth/audit-log/me'> = {}) =>
  a.api.get('/api/auth/audit-log/me', { query, headers: bearer(token) });

/** The events of one 200 answer. */
function events(res: { statusCode: number; body: string }): Events {
  if (res.statusCode !== 200) throw new Error(`expected 200, got ${res.statusCode} ${res.body}`);
  return (JSON.parse(res.body) as { events: Events }).events;
}

/** The ids of a page, as numbers, for order checks. */
const ids = (list: Events) => list.map((e) => Number(e.id));
const newestFirst = (list: Events) => ids(list).every((id, i, all) => i === 0 || id < (all[i - 1] as number));

/** The names a pattern of the form ^(a|b|…)(,(a|b|…))*$ admits. */
function patternNames(pattern: string): string[] {
  const m = /^\^\(([a-z_|]+)\)\(,\(([a-z_|]+)\)\)\*\$$/.exec(pattern);
  if (m === null) throw new Error(`not a list pattern: ${pattern}`);
  if (m[1] !== m[2]) throw new Error(`the two alternatives of ${pattern} differ`);
  return (m[1] as string).split('|');
}

/** The types a Markdown table lists in its first column (rows like | `sign_up` | …). */
const tableTypes = (markdown: string) => [...markdown.matchAll(/^\| `([a-z_]+)` \|/gm)].map((m) => m[1] as string);

t.test('the contract lists exactly the audit types of the code', async (t) => {
  const schemas = (
    specDocument.components as { schemas: Record<string, { enum?: string[]; pattern?: string; description?: string }> }
  ).schemas;
  t.same(schemas.AuditEventType?.enum, [...AUDIT_EVENT_TYPES], 'AuditEventType is AUDIT_EVENT_TYPES, in order');
  t.same(patternNames(schemas.AuditEventTypeList?.pattern ?? ''), [...AUDIT_EVENT_TYPES], 'the type filter names them');
  t.same(
    patternNames(schemas.OwnAuditEventTypeList?.pattern ?? ''),
    [...OWN_HISTORY_TYPES],
    'the filter of one’s own history names OWN_HISTORY_TYPES',
  );
  t.same(
    tableTypes(schemas.AuditEventType?.description ?? ''),
    [...AUDIT_EVENT_TYPES],
    'its description says what each means',
  );
  const docs = readFileSync(path.join(import.meta.dirname, '../docs/audit-log-and-webhooks.md'), 'utf8');
  const section = docs.slice(docs.indexOf('## Audit log'), docs.indexOf('\n## ', docs.indexOf('## Audit log') + 1));
  t.same(tableTypes(section), [...AUDIT_EVENT_TYPES], 'so does docs/audit-log-and-webhooks.md');
});

t.test('administrators only: 401 without a token, 403 for a user; any account reads its own', async (t) => {
  assertErrorBody(t, await a.api.get('/api/auth/audit-log'), 401, 'UNAUTHORIZED');
  assertErrorBody(t, await a.api.get('/api/auth/audit-log/me'), 401, 'UNAUTHORIZED');
  const user = await a.signUp();
  assertErrorBody(t, await a.api.get('/api/auth/audit-log', { headers: bearer(user.accessToken) }), 403, 'FORBIDDEN');
  assertErrorBody(
    t,
    await a.api.get('/api/auth/audit-log', { headers: bearer(accessTokenFor(a.app, 'user')) }),
    403,
    'FORBIDDEN',
  );
  t.equal((await own(user.accessToken)).statusCode, 200, 'a user reads its own history');
  t.equal((await list({ limit: '1' })).statusCode, 200, 'an administrator reads the log');
});

t.test('real flows: sign-ins and logouts are recorded, newest first, without a secret', async (t) => {
  const ann = await a.signUp();
  const second = await a.signIn(ann.email);
  const third = await a.signIn(ann.email);
  const out = await a.app.inject({
    method: 'POST',
    url: '/api/auth/logout?client_type=mobile',
    payload: { refreshToken: second.refreshToken },
  });
  t.equal(out.statusCode, 204, 'logged out');
  const refreshed = await a.refresh(third.refreshToken);
  t.equal(refreshed.statusCode, 200, 'refreshed');
  a.clock.advance(a.config.refreshTokenReuseIntervalSeconds + 1);
  t.equal((await a.refresh(third.refreshToken)).statusCode, 401, 'the retired refresh token presented again');

  const res = await list({ userId: ann.userId, type: 'sign_in,logout,refresh_token_reused' });
  assertMatchesSchema(t, res.json(), 'AuditEventList');
  const found = events(res);
  t.ok(newestFirst(found), 'newest first');
  t.same(
    found.map((e) => [e.type, e.sessionId]),
    [
      ['refresh_token_reused', third.sessionId],
      ['logout', second.sessionId],
      ['sign_in', third.sessionId],
      ['sign_in', second.sessionId],
      ['sign_in', ann.sessionId],
    ],
    'each event, about its session',
  );
  t.match(found[3], {
    type: 'sign_in',
    outcome: 'success',
    method: 'password',
    actorId: ann.userId,
    userId: ann.userId,
    ip: '127.0.0.1',
    userAgent: 'lightMyRequest',
    details: { clientType: 'mobile', aal: 'aal1' },
  });
  t.equal(found[0]?.actorId, null, 'a reuse is nobody’s act');
  t.ok(
    found.every((e) => e.userId === ann.userId),
    'only the account asked for',
  );

  // Nothing that opens a session or proves who someone is is ever written, for any account.
  const everything = JSON.stringify((await sql`select * from audit_log`.execute(db)).rows);
  const secrets = {
    password: PASSWORD,
    'administrator password': ADMIN_PASSWORD,
    ...Object.fromEntries(
      [ann, second, third, a.admin].flatMap((s, i) => [
        [`access token ${i}`, s.accessToken],
        [`refresh token ${i}`, s.refreshToken],
      ]),
    ),
    'rotated refresh token': (refreshed.json() as { refreshToken: string }).refreshToken,
  };
  for (const [what, secret] of Object.entries(secrets)) {
    t.notOk(everything.includes(secret), `no ${what} in the audit log`);
  }
});

t.test('filters: by account, by type, by time', async (t) => {
  const [u1, u2] = [randomUUID(), randomUUID()];
  const t0 = new Date(Date.now() - 10 * DAY_MS);
  const at = (hours: number) => new Date(t0.getTime() + hours * 3_600_000);
  await insertAuditRow(db, row(u1, at(0)));
  await insertAuditRow(db, row(u1, at(1), { type: 'logout', method: null }));
  await insertAuditRow(db, row(u2, at(2)));
  await insertAuditRow(db, row(u1, at(3), { type: 'password_changed', method: null, details: {} }));
  await insertAuditRow(db, row(u1, at(4), { outcome: 'failure', details: { reason: 'wrong_password' } }));

  const mine = events(await list({ userId: u1 }));
  t.same(
    mine.map((e) => e.occurredAt),
    [at(4), at(3), at(1), at(0)].map((d) => d.toISOString()),
    'userId: its 4 events, newest first',
  );
  t.ok(newestFirst(mine), 'ids descending');
  t.equal(events(await list({ userId: u1.toUpperCase() })).length, 4, 'the id in any case');
  t.equal(events(await list({ userId: `urn:uuid:${u1}` })).length, 4, 'or as a URN, as the uuid format admits');
  t.same(
    events(await list({ userId: u1, type: 'sign_in' })).map((e) => e.occurredAt),
    [at(4), at(0)].map((d) => d.toISOString()),
    'type: one type (a failure among them)',
  );
  t.same(
    events(await list({ userId: u1, type: 'logout,password_changed,logout' })).map((e) => e.type),
    ['password_changed', 'logout'],
    'type: a list (a repeated name counts once)',
  );
  t.same(
    events(await list({ userId: u1, since: at(1).toISOString(), until: at(3).toISOString() })).map((e) => e.type),
    ['logout'],
    'since is inclusive, until exclusive',
  );
  // at(1), written as the time at +02:00.
  const atPlusTwo = new Date(at(1).getTime() + 2 * 3_600_000).toISOString().replace('Z', '+02:00');
  t.equal(events(await list({ userId: u1, since: atPlusTwo })).length, 3, 'an offset is honoured');
  t.equal(events(await list({ userId: u2, since: at(0).toISOString() })).length, 1, 'another account');
  t.same(
    events(await list({ userId: u1, since: at(3).toISOString(), until: at(1).toISOString() })),
    [],
    'since after until: none',
  );
  t.same(events(await list({ userId: randomUUID() })), [], 'an account without events: none');
  t.equal(
    events(await list({ userId: u1, since: '0000-01-01T00:00:00Z', until: '9999-12-31T23:59:60Z' })).length,
    4,
    'the widest instants the format admits',
  );
  t.same(parseInstant('2016-12-31T23:59:60Z')?.toISOString(), '2017-01-01T00:00:00.000Z', 'a leap second');
  t.same(
    parseInstant('2026-01-01 10:00:00.123456+0130')?.toISOString(),
    '2026-01-01T08:30:00.123Z',
    'the lenient forms',
  );
  t.same(parseInstant('2026-01-01\t10:00:00z')?.toISOString(), '2026-01-01T10:00:00.000Z', 'any white space between');
  t.equal(
    events(await list({ userId: u1, since: at(1).toISOString().replace('T', ' ').replace('Z', '+00') })).length,
    3,
    'the lenient forms, in a query',
  );

  for (const bad of [
    'type=SIGN_IN',
    'type=sign_in,',
    'type=sign_in%2C%20logout',
    'type=nonsense',
    'type=',
    'userId=nope',
    'since=yesterday',
    'until=2026-01-01',
    'limit=0',
    'limit=201',
    'limit=05',
    'offset=10',
  ]) {
    const body = assertErrorBody(t, await listRaw(bad), 400, 'INVALID_INPUT');
    t.match(body.message, /query\./, `${bad}: the message names the parameter`);
  }
});

/** Walks every page of `query` with `limit`, calling `between` after each; returns the ids and the page sizes. */
async function walk(
  query: QueryOf<'get', '/api/auth/audit-log'>,
  limit: number,
  between: () => Promise<unknown> = async () => {},
): Promise<{ ids: number[]; sizes: number[] }> {
  const seen: number[] = [];
  const sizes: number[] = [];
  let cursor: string | undefined;
  for (let pages = 0; pages < 1000; pages++) {
    const res = await list({ ...query, limit: String(limit), ...(cursor === undefined ? {} : { cursor }) });
    const body = res.json() as { events: Events; nextCursor: string | null };
    seen.push(...ids(body.events));
    sizes.push(body.events.length);
    await between();
    if (body.nextCursor === null) return { ids: seen, sizes };
    cursor = body.nextCursor;
  }
  throw new Error('the walk did not end');
}

t.test('cursor paging returns every entry once, while entries are recorded at the front', async (t) => {
  const user = randomUUID();
  const start = Date.now() - DAY_MS;
  for (let i = 0; i < 23; i++) await insertAuditRow(db, row(user, new Date(start + i * 1000)));
  const before = ids(events(await list({ userId: user, limit: '200' })));
  t.equal(before.length, 23);

  let added = 0;
  const quiet = await walk({ userId: user }, 5);
  t.same(quiet.ids, before, 'a walk without writes: every entry once, newest first');
  t.same(quiet.sizes, [5, 5, 5, 5, 3], 'full pages, then the rest; no empty last page');

  const busy = await walk({ userId: user }, 5, async () => {
    // Two more at the front between pages, one of them dated earlier than the walk's entries.
    await insertAuditRow(db, row(user, new Date()));
    await insertAuditRow(db, row(user, new Date(start - DAY_MS)));
    added += 2;
  });
  t.same(busy.ids, before, 'entries recorded meanwhile neither shift the pages nor show up in them');
  t.ok(added >= 10, 'entries were recorded during the walk');

  // Writers racing the reader.
  const racing = randomUUID();
  for (let i = 0; i < 40; i++) await insertAuditRow(db, row(racing, new Date(start + i * 1000)));
  const existing = ids(events(await list({ userId: racing, limit: '200' })));
  let writing = true;
  const writer = (async () => {
    for (let i = 0; writing && i < 500; i++) await insertAuditRow(db, row(racing, new Date()));
  })();
  const raced = await walk({ userId: racing }, 7);
  writing = false;
  await writer;
  t.same(
    raced.ids.filter((id) => id <= (existing[0] as number)),
    existing,
    'with a concurrent writer: every entry of before the walk, once, in order',
  );
  t.equal(new Set(raced.ids).size, raced.ids.length, 'and no entry twice');

  // Enough entries for ids of every length from 2 to 3 digits, whatever the writer managed.
  const filler = randomUUID();
  for (let i = 0; i < 100; i++) await insertAuditRow(db, row(filler, new Date(start + i * 1000)));
  const whole = (await walk({}, 200)).ids;
  t.ok(
    whole.some((id) => id < 100) && whole.some((id) => id >= 100),
    'the whole log has ids of 2 and 3 digits or more',
  );
  t.ok(
    whole.every((id, i) => i === 0 || id < (whole[i - 1] as number)),
    'and comes in the numeric order of its ids, not their text',
  );

  const exact = randomUUID();
  for (let i = 0; i < 10; i++) await insertAuditRow(db, row(exact, new Date(start + i * 1000)));
  t.same((await walk({ userId: exact }, 5)).sizes, [5, 5], 'a multiple of the limit: no empty page after');
  t.same((await walk({ userId: exact, type: 'logout' }, 5)).sizes, [0], 'nothing matches: one empty page');

  const first = await list({ userId: user, limit: '2' });
  t.equal(first.json().events.length, 2);
  t.match(first.json().nextCursor, /^[A-Za-z0-9_-]{11}$/, 'an opaque cursor');
  const defaults = await list();
  t.equal(defaults.json().events.length, 50, 'limit 50 by default');
  const widest = await list({ userId: user, limit: '200' });
  t.equal(widest.json().nextCursor, null, 'the last page has no cursor');
});

t.test('a malformed cursor is 400 INVALID_INPUT; a well-formed one past every entry is an empty page', async (t) => {
  for (const cursor of [
    'abc',
    'AAAAAAAAAA',
    'AAAAAAAAAAAA',
    'gAAAAAAAAAA',
    '_AAAAAAAAAA',
    'AAAAAAAAAAB',
    'AAAAAAAA+AA',
    'AAAAAAAAAA=',
    'AAAAAAAAAA%3D',
  ]) {
    const body = assertErrorBody(t, await listRaw(`cursor=${cursor}`), 400, 'INVALID_INPUT');
    t.match(body.message, /query\.cursor/, `${cursor}: refused`);
  }
  const body = assertErrorBody(
    t,
    await a.api.get('/api/auth/audit-log/me', { rawQuery: 'cursor=!', headers: adminHeaders }),
    400,
    'INVALID_INPUT',
  );
  t.match(body.message, /query\.cursor/, 'the same on /me');
  t.same(events(await list({ cursor: encodeCursor('1') })), [], 'before the first entry: nothing');
  t.same(events(await list({ cursor: 'AAAAAAAAAAA' })), [], 'the smallest cursor: nothing');
  t.ok(events(await list({ cursor: 'f_________8', limit: '1' })).length === 1, 'the largest: from the newest');
});

t.test('/me: the caller’s own sign-ins and session ends, nothing else', async (t) => {
  const ann = await a.signUp();
  const bob = await a.signUp();
  const again = await a.signIn(ann.email);
  await a.signIn(bob.email);
  const now = Date.now();
  // Of ann, but not of the types one sees of oneself; of bob, of those types.
  await insertAuditRow(db, row(ann.userId, new Date(now), { type: 'password_changed', method: null }));
  await insertAuditRow(db, row(ann.userId, new Date(now), { type: 'user_disabled', actorId: a.admin.userId }));
  await insertAuditRow(db, row(bob.userId, new Date(now), { type: 'session_ended' }));
  await insertAuditRow(db, row(null, new Date(now), { type: 'sign_in', outcome: 'failure' }));
  await insertAuditRow(
    db,
    row(ann.userId, new Date(now), { type: 'session_ended', details: { by: 'password_change' } }),
  );

  const res = await own(again.accessToken);
  assertMatchesSchema(t, res.json(), 'AuditEventList');
  const mine = events(res);
  t.ok(newestFirst(mine), 'newest first');
  t.ok(
    mine.every((e) => e.userId === ann.userId && (OWN_HISTORY_TYPES as readonly string[]).includes(e.type)),
    'only ann’s, only sign-ins and session ends',
  );
  t.same(
    mine.map((e) => [e.type, e.sessionId]).filter(([type]) => type === 'sign_in'),
    [
      ['sign_in', again.sessionId],
      ['sign_in', ann.sessionId],
    ],
    'her sign-ins',
  );
  t.equal(mine[0]?.type, 'session_ended', 'and the session end recorded last');
  t.same(
    events(await own(again.accessToken, { type: 'session_ended' })).map((e) => e.type),
    ['session_ended'],
    'type narrows them',
  );
  const paged = await own(again.accessToken, { limit: '1' });
  t.equal(paged.json().events.length, 1);
  const next = await own(again.accessToken, { limit: '1', cursor: paged.json().nextCursor ?? '' });
  t.equal(next.json().events[0]?.type, 'sign_in', 'paging, as for the whole log');
  const bobs = events(await own(bob.accessToken));
  t.ok(
    bobs.every((e) => e.userId === bob.userId),
    'bob sees only his',
  );
  t.ok(
    bobs.some((e) => e.type === 'session_ended'),
    'his session end',
  );

  for (const bad of ['type=password_changed', 'type=sign_in,user_disabled', `userId=${bob.userId}`, 'type=sign_up']) {
    assertErrorBody(
      t,
      await a.api.get('/api/auth/audit-log/me', { rawQuery: bad, headers: bearer(again.accessToken) }),
      400,
      'INVALID_INPUT',
    );
  }
});

t.test('retention: entries older than AUDIT_RETENTION_DAYS are deleted, in bounded runs', async (t) => {
  // The app's own housekeeping (its first run 5 s after the start) swept the expired entry above.
  const count = async (userId: string) =>
    Number(
      (await sql<{ n: number | string }>`select count(*) as n from audit_log where user_id = ${userId}`.execute(db))
        .rows[0]?.n,
    );
  // The app's own first run may have come before the entries were written (a slow start): a
  // housekeeping of the same kind, started now, runs 5 s from now whatever the app's did.
  if ((await count(expiring)) > 1) {
    const stop = startAuthHousekeeping(db, () => new Date(), a.app.log, { auditRetentionDays: RETENTION_DAYS });
    for (let i = 0; i < 120 && (await count(expiring)) > 1; i++) await new Promise((r) => setTimeout(r, 250));
    await stop();
  }
  t.equal(await count(expiring), 1, 'the housekeeping deleted the entry past the retention and kept the younger');
  const kept = events(await list({ userId: expiring }));
  t.ok(Date.parse(kept[0]?.occurredAt ?? '') > Date.now() - RETENTION_DAYS * DAY_MS, 'the one kept is the younger');

  const user = randomUUID();
  const now = new Date();
  for (let i = 0; i < 25; i++) await insertAuditRow(db, row(user, new Date(now.getTime() - (91 + i) * DAY_MS)));
  for (let i = 0; i < 3; i++) await insertAuditRow(db, row(user, new Date(now.getTime() - (89 - i) * DAY_MS)));
  const first = await sweepAuditLog(db, now, 90, { batch: 10, maxBatches: 2 });
  t.same(first, { deleted: 20, more: true }, 'one run deletes at most batch × maxBatches, and says more remain');
  t.equal(await count(user), 8);
  const second = await sweepAuditLog(db, now, 90, { batch: 10, maxBatches: 2 });
  t.same(second, { deleted: 5, more: false }, 'the next run the rest');
  t.equal(await count(user), 3, 'the entries within the retention stay');
  t.same(await sweepAuditLog(db, now, 90), { deleted: 0, more: false }, 'nothing left to delete');
  const left = events(await list({ userId: user }));
  t.ok(
    left.every((e) => Date.parse(e.occurredAt) >= now.getTime() - 90 * DAY_MS),
    'only the young ones are left',
  );
});
