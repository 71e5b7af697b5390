// Sessions people can see and end: their own (GET/DELETE /api/auth/sessions, DELETE
// /api/auth/sessions/{sessionId}) and, for administrators, an account's (/api/auth/users/{userId}/sessions).
// Ending is a revocation: the access token is refused, the socket disconnected, on every instance
// within 2 s (PostgreSQL: a second instance on the same database).
import type { LightMyRequestResponse } from 'fastify';
import { sql } from 'kysely';
import t, { type Test } from 'tap';
import { bearer, buildAccountsApp, type MobileSession } from './helpers/accounts.ts';
import { buildAnotherInstance } from './helpers/app.ts';
import { decodeClaims, newEmail, PASSWORD } from './helpers/auth.ts';
import { usingPostgres } from './helpers/database.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { disconnection, nextEvent, RealtimeClients, urlOf } from './helpers/realtime-client.ts';

const BOUND_MS = 2_000;

interface SessionInfo {
  id: string;
  clientType: string;
  createdAt: string;
  lastRefreshedAt: string;
  expiresAt: string;
  ip: string | null;
  userAgent: string | null;
  aal: string;
  current: boolean;
}

async function setup(t: Test) {
  const built = await buildAccountsApp(t, { label: 'own-sessions' });
  const { app } = built;
  const signInAs = async (email: string, clientType: 'web' | 'mobile' | 'desktop', userAgent: string) => {
    const res = await app.inject({
      method: 'POST',
      url: `/api/auth/sessions?client_type=${clientType}`,
      headers: { 'user-agent': userAgent },
      payload: { email, password: PASSWORD },
    });
    if (res.statusCode !== 200) throw new Error(`sign-in: ${res.statusCode} ${res.body}`);
    const accessToken = (res.json() as { accessToken: string }).accessToken;
    return { accessToken, sessionId: String(decodeClaims(accessToken).sid) };
  };
  const list = (accessToken: string) => app.inject({ url: '/api/auth/sessions', headers: bearer(accessToken) });
  const sessionsOf = async (accessToken: string) => {
    const res = await list(accessToken);
    if (res.statusCode !== 200) throw new Error(`list: ${res.statusCode} ${res.body}`);
    return (res.json() as { sessions: SessionInfo[] }).sessions;
  };
  const endOne = (accessToken: string, sessionId: string) =>
    app.inject({ method: 'DELETE', url: `/api/auth/sessions/${sessionId}`, headers: bearer(accessToken) });
  const endMine = (accessToken: string, scope: string) =>
    app.inject({ method: 'DELETE', url: `/api/auth/sessions?scope=${scope}`, headers: bearer(accessToken) });
  const auditRows = async (userId: string, type: string) =>
    (
      await sql<{
        actor_id: string | null;
        session_id: string | null;
        details: Record<string, unknown>;
        outcome: string;
      }>`select actor_id, session_id, details, outcome from audit_log where user_id = ${userId} and type = ${type} order by id`.execute(
        built.database.handle.db,
      )
    ).rows;
  return { ...built, signInAs, list, sessionsOf, endOne, endMine, auditRows };
}

t.test('own sessions: three client types listed; one ended from another device', async (t) => {
  const s = await setup(t);
  const account = await s.signUp(newEmail('three'));
  const web = await s.signInAs(account.email, 'web', 'Browser/1.0');
  const mobile = await s.signInAs(account.email, 'mobile', 'Phone/2.0');
  const desktop = await s.signInAs(account.email, 'desktop', 'Desktop/3.0');

  const seen = await s.sessionsOf(mobile.accessToken);
  t.equal(seen.length, 4, 'the sign-up session and the three sign-ins');
  const byId = new Map(seen.map((x) => [x.id, x]));
  t.match(byId.get(web.sessionId), { clientType: 'web', userAgent: 'Browser/1.0', aal: 'aal1', current: false });
  t.match(byId.get(mobile.sessionId), { clientType: 'mobile', userAgent: 'Phone/2.0', current: true });
  t.match(byId.get(desktop.sessionId), { clientType: 'desktop', userAgent: 'Desktop/3.0', current: false });
  t.equal(seen.filter((x) => x.current).length, 1, 'exactly one is current');
  for (const x of seen) {
    t.ok(Date.parse(x.expiresAt) > Date.parse(x.createdAt), 'expires after it opened');
    t.equal(x.ip, '127.0.0.1', 'the address it opened from');
  }

  // The mobile device signs the web one out.
  const ended = await s.endOne(mobile.accessToken, web.sessionId);
  t.equal(ended.statusCode, 204, 'ended');
  assertErrorBody(t, await s.current(web.accessToken), 401, 'SESSION_REVOKED');
  t.equal((await s.current(mobile.accessToken)).statusCode, 200, 'the caller goes on');
  t.notOk(
    (await s.sessionsOf(desktop.accessToken)).some((x) => x.id === web.sessionId),
    'the ended session is no longer listed',
  );
  assertErrorBody(t, await s.endOne(mobile.accessToken, web.sessionId), 404, 'NOT_FOUND');
  const rows = await s.auditRows(account.userId, 'session_ended');
  t.match(rows, [{ actor_id: account.userId, session_id: web.sessionId, details: { by: 'self' }, outcome: 'success' }]);

  // Ending its own session is a logout.
  t.equal((await s.endOne(desktop.accessToken, desktop.sessionId)).statusCode, 204, 'the current one too');
  assertErrorBody(t, await s.current(desktop.accessToken), 401, 'SESSION_REVOKED');
});

t.test("another account's session, an unknown id and a malformed one", async (t) => {
  const s = await setup(t);
  const alice = await s.signUp(newEmail('alice'));
  const bob = await s.signUp(newEmail('bob'));
  const foreign = await s.endOne(alice.accessToken, bob.sessionId);
  const unknown = await s.endOne(alice.accessToken, '00000000-0000-4000-8000-000000000000');
  assertErrorBody(t, foreign, 404, 'NOT_FOUND');
  assertErrorBody(t, unknown, 404, 'NOT_FOUND');
  t.equal(foreign.body, unknown.body, "another account's session is answered as an unknown one");
  t.equal((await s.current(bob.accessToken)).statusCode, 200, "bob's session goes on");
  assertErrorBody(t, await s.endOne(alice.accessToken, 'not-a-uuid'), 400, 'INVALID_INPUT');
  assertErrorBody(t, await s.endMine(alice.accessToken, 'everyone'), 400, 'INVALID_INPUT');
  assertErrorBody(
    t,
    await s.app.inject({ method: 'DELETE', url: '/api/auth/sessions', headers: bearer(alice.accessToken) }),
    400,
    'INVALID_INPUT',
  );
  assertErrorBody(t, await s.app.inject({ url: '/api/auth/sessions' }), 401, 'UNAUTHORIZED');
  t.notOk(
    (await s.sessionsOf(alice.accessToken)).some((x) => x.id === bob.sessionId),
    "bob's sessions are not in alice's list",
  );
});

t.test('scope=others keeps the current session; scope=all ends it and forgets the known devices', async (t) => {
  const s = await setup(t);
  const account = await s.signUp(newEmail('scope'));
  const other = await s.signIn(account.email);
  const third = await s.signIn(account.email);
  t.equal((await s.endMine(third.accessToken, 'others')).statusCode, 204);
  assertErrorBody(t, await s.current(account.accessToken), 401, 'SESSION_REVOKED');
  assertErrorBody(t, await s.current(other.accessToken), 401, 'SESSION_REVOKED');
  t.equal((await s.current(third.accessToken)).statusCode, 200, 'the current one goes on');
  t.same(
    (await s.sessionsOf(third.accessToken)).map((x) => x.id),
    [third.sessionId],
    'only the current one is left',
  );
  const refreshed = await s.refresh(other.refreshToken);
  t.equal(refreshed.statusCode, 401, "an ended session's refresh token is refused");

  const epoch = async () =>
    (
      await sql<{ device_epoch: number }>`select device_epoch from users where id = ${account.userId}`.execute(
        s.database.handle.db,
      )
    ).rows[0]?.device_epoch;
  const before = await epoch();
  t.equal((await s.endMine(third.accessToken, 'all')).statusCode, 204);
  assertErrorBody(t, await s.current(third.accessToken), 401, 'SESSION_REVOKED');
  t.equal(await epoch(), (before ?? 0) + 1, 'the known devices stop counting');
  const rows = await s.auditRows(account.userId, 'session_ended');
  t.equal(rows.length, 3, 'one audit row per ended session');
  t.ok(
    rows.every((r) => r.details.by === 'self'),
    'ended by their owner',
  );

  // A session that has ended cannot end the others.
  const again = await s.signIn(account.email);
  assertErrorBody(t, await s.endMine(third.accessToken, 'others'), 401, 'SESSION_REVOKED');
  t.equal((await s.current(again.accessToken)).statusCode, 200, 'untouched');
});

t.test("administrators see and end an account's sessions; the directory shows role and disabled", async (t) => {
  const s = await setup(t);
  const user = await s.signUp(newEmail('user'));
  const second = await s.signIn(user.email);
  const listOf = (token: string, userId: string) =>
    s.app.inject({ url: `/api/auth/users/${userId}/sessions`, headers: bearer(token) });
  const endAllOf = (token: string, userId: string) =>
    s.app.inject({ method: 'DELETE', url: `/api/auth/users/${userId}/sessions`, headers: bearer(token) });

  const listed = await listOf(s.admin.accessToken, user.userId);
  t.equal(listed.statusCode, 200);
  t.same(
    (listed.json() as { sessions: SessionInfo[] }).sessions.map((x) => x.id).sort(),
    [user.sessionId, second.sessionId].sort(),
  );
  t.ok(
    (listed.json() as { sessions: SessionInfo[] }).sessions.every((x) => !x.current),
    "none is the administrator's",
  );
  assertErrorBody(t, await listOf(user.accessToken, user.userId), 403, 'FORBIDDEN');
  assertErrorBody(t, await endAllOf(user.accessToken, user.userId), 403, 'FORBIDDEN');
  assertErrorBody(t, await listOf(s.admin.accessToken, '00000000-0000-4000-8000-000000000000'), 404, 'NOT_FOUND');
  assertErrorBody(t, await endAllOf(s.admin.accessToken, '00000000-0000-4000-8000-000000000000'), 404, 'NOT_FOUND');

  t.equal((await endAllOf(s.admin.accessToken, user.userId)).statusCode, 204);
  assertErrorBody(t, await s.current(user.accessToken), 401, 'SESSION_REVOKED');
  assertErrorBody(t, await s.current(second.accessToken), 401, 'SESSION_REVOKED');
  const rows = await s.auditRows(user.userId, 'session_ended');
  t.equal(rows.length, 2);
  t.ok(
    rows.every((r) => r.actor_id === s.admin.userId && r.details.by === 'administrator'),
    'recorded as ended by the administrator',
  );
  t.same((await listOf(s.admin.accessToken, user.userId)).json(), { sessions: [] }, 'none left');
  // In the person's own history, the ends show, not who ended them or from where.
  const back = await s.signIn(user.email);
  const own = await s.app.inject({
    url: '/api/auth/audit-log/me?type=session_ended',
    headers: { ...bearer(back.accessToken), 'user-agent': 'Phone/2.0' },
  });
  t.equal(own.statusCode, 200);
  const ends = (
    own.json() as {
      events: { actorId: string | null; ip: string | null; userAgent: string | null; details: { by?: string } }[];
    }
  ).events;
  t.equal(ends.length, 2);
  t.ok(
    ends.every((e) => e.details.by === 'administrator' && e.actorId === null && e.ip === null && e.userAgent === null),
    "the administrator's id, address and user agent stay out",
  );

  const disabled = await s.updateUser(s.admin.accessToken, user.userId, { disabled: true });
  t.equal(disabled.statusCode, 200);
  const directory = await s.app.inject({ url: '/api/auth/users?limit=100', headers: bearer(s.admin.accessToken) });
  const rowsOf = (directory.json() as { data: { id: string; role: string; disabled: boolean }[] }).data;
  t.match(
    rowsOf.find((r) => r.id === user.userId),
    { role: 'user', disabled: true },
  );
  t.match(
    rowsOf.find((r) => r.id === s.admin.userId),
    { role: 'admin', disabled: false },
  );
});

t.test(
  'ending a session on one instance: a second instance refuses its token and disconnects its socket within 2 s',
  { skip: !usingPostgres && 'PostgreSQL only' },
  async (t) => {
    const s = await setup(t);
    await s.app.listen({ port: 0, host: '127.0.0.1' });
    const b = await buildAnotherInstance(t, s, { ownConnection: true });
    await b.app.listen({ port: 0, host: '127.0.0.1' });
    const clientsB = new RealtimeClients(t, urlOf(b.app));
    const account: MobileSession = await s.signUp(newEmail('instances'));
    const phone = await s.signIn(account.email);

    const measure = async (label: string, end: () => Promise<LightMyRequestResponse>, victim: MobileSession) => {
      const currentOnB = () => b.app.inject({ url: '/api/auth/sessions/current', headers: bearer(victim.accessToken) });
      t.equal((await currentOnB()).statusCode, 200, `${label}: B accepts the token first`);
      const socket = await clientsB.connect(victim.accessToken);
      const told = nextEvent(socket, 'realtime:error', BOUND_MS * 2);
      const closed = disconnection(socket, BOUND_MS * 2);
      const res = await end();
      const from = Date.now();
      t.equal(res.statusCode, 204, `${label}: ended on A`);
      let refusedAfter: number | undefined;
      while (Date.now() - from <= BOUND_MS * 2) {
        const answer = await currentOnB();
        if (answer.statusCode === 401) {
          refusedAfter = Date.now() - from;
          break;
        }
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      t.ok(refusedAfter !== undefined && refusedAfter <= BOUND_MS, `${label}: B refused it after ${refusedAfter} ms`);
      t.match(await told, { code: 'SESSION_REVOKED' }, `${label}: B's socket is told`);
      t.equal(await closed, 'io server disconnect', `${label}: and disconnected`);
    };

    await measure('one session', () => s.endOne(account.accessToken, phone.sessionId), phone);
    const tablet = await s.signIn(account.email);
    await measure('scope=others', () => s.endMine(account.accessToken, 'others'), tablet);
    const laptop = await s.signIn(account.email);
    await measure(
      'an administrator',
      () =>
        s.app.inject({
          method: 'DELETE',
          url: `/api/auth/users/${account.userId}/sessions`,
          headers: bearer(s.admin.accessToken),
        }),
      laptop,
    );
  },
);
