// Ending a session ends its access at once, on every instance: after logout, refresh-token reuse
// (and the other revocations) the session's access tokens, though validly signed and unexpired and
// already in the verified-token cache, get 401 SESSION_REVOKED, its open sockets receive
// realtime:error SESSION_REVOKED and are disconnected, and a handshake with them is refused. On
// PostgreSQL a second instance on the same database does the same within 2 s (NOTIFY, the catch-up
// load after a lost LISTEN connection, and the poll while it is down).
import type { FastifyBaseLogger, FastifyInstance, LightMyRequestResponse } from 'fastify';
import { type Kysely, sql } from 'kysely';
import t, { type Test } from 'tap';
import { buildApp } from '../src/app.ts';
import { createSessionRevocations, type SessionRevocations } from '../src/auth/session-revocations.ts';
import { openDatabase } from '../src/db/database.ts';
import { LISTENER_APPLICATION_NAME } from '../src/db/notification-listener.ts';
import type { Database } from '../src/db/schema.ts';
import { type AuthTestApp, buildAuthTestApp, decodeClaims, newEmail, PASSWORD } from './helpers/auth.ts';
import { usingPostgres } from './helpers/database.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { disconnection, nextEvent, RealtimeClients, urlOf } from './helpers/realtime-client.ts';

/** The bound the issue sets for every instance to refuse a revoked session. */
const BOUND_MS = 2_000;
const POLL_MS = 20;

interface Session {
  accessToken: string;
  refreshToken: string;
  sessionId: string;
}

function toSession(res: LightMyRequestResponse, expected: number): Session {
  if (res.statusCode !== expected) throw new Error(`expected ${expected}, got ${res.statusCode} ${res.body}`);
  const body = res.json() as { accessToken: string; refreshToken: string };
  return { ...body, sessionId: String(decodeClaims(body.accessToken).sid) };
}

/** A test app that signs up without email verification and listens (for sockets). */
async function setup(t: Test, env: Record<string, string> = {}) {
  const built = await buildAuthTestApp(t, {
    env: { REQUIRE_EMAIL_VERIFICATION: 'false', ...env },
    label: 'revocation',
  });
  await built.app.listen({ port: 0, host: '127.0.0.1' });
  return { ...built, ...calls(built.app) };
}

/** The requests the tests make, on any app (instance). */
function calls(app: FastifyInstance) {
  const bearer = (accessToken: string) => ({ authorization: `Bearer ${accessToken}` });
  return {
    signUp: async (email: string) =>
      toSession(
        await app.inject({
          method: 'POST',
          url: '/api/auth/users?client_type=mobile',
          payload: { email, password: PASSWORD },
        }),
        201,
      ),
    signIn: async (email: string) =>
      toSession(
        await app.inject({
          method: 'POST',
          url: '/api/auth/sessions?client_type=mobile',
          payload: { email, password: PASSWORD },
        }),
        200,
      ),
    refresh: (refreshToken: string) =>
      app.inject({ method: 'POST', url: '/api/auth/refresh?client_type=mobile', payload: { refreshToken } }),
    logout: (refreshToken: string) =>
      app.inject({ method: 'POST', url: '/api/auth/logout?client_type=mobile', payload: { refreshToken } }),
    current: (accessToken: string) => app.inject({ url: '/api/auth/sessions/current', headers: bearer(accessToken) }),
    permissions: (accessToken: string) =>
      app.inject({ url: '/api/realtime/permissions', headers: bearer(accessToken) }),
    changePassword: (accessToken: string, newPassword: string) =>
      app.inject({
        method: 'POST',
        url: '/api/auth/password',
        headers: bearer(accessToken),
        payload: { currentPassword: PASSWORD, newPassword },
      }),
  };
}

/** Watches a socket for what a revocation brings (set up before the revocation, so nothing is missed). */
function watchRevocation(socket: ReturnType<RealtimeClients['open']>) {
  return {
    error: nextEvent(socket, 'realtime:error', BOUND_MS * 2),
    closed: disconnection(socket, BOUND_MS * 2),
  };
}

/** The session's socket was told SESSION_REVOKED (channel null) and disconnected by the server. */
async function assertSocketRevoked(t: Test, watched: ReturnType<typeof watchRevocation>, what: string) {
  t.match(await watched.error, { code: 'SESSION_REVOKED', channel: null }, `${what}: realtime:error SESSION_REVOKED`);
  t.equal(await watched.closed, 'io server disconnect', `${what}: disconnected by the server`);
}

/** A logger that keeps what was logged at warn and above. */
function quietLog(lines: string[] = []): FastifyBaseLogger {
  const keep = (_obj: unknown, msg?: string) => void lines.push(String(msg ?? _obj));
  const log = {
    level: 'silent',
    fatal: keep,
    error: keep,
    warn: keep,
    info: () => {},
    debug: () => {},
    trace: () => {},
    silent: () => {},
    child: () => log,
  };
  return log as unknown as FastifyBaseLogger;
}

t.test('logout: the access token is refused at once, its socket is disconnected, its handshake refused', async (t) => {
  const { app, signUp, signIn, logout, current, permissions } = await setup(t);
  const clients = new RealtimeClients(t, urlOf(app));
  const email = newEmail('logout');
  const s = await signUp(email);
  const other = await signIn(email);

  t.equal((await current(s.accessToken)).statusCode, 200, 'before logout: 200');
  t.equal((await current(s.accessToken)).statusCode, 200, 'again (from the verified-token cache): 200');
  const socket = await clients.connect(s.accessToken);
  const otherSocket = await clients.connect(other.accessToken);
  const watched = watchRevocation(socket);

  t.equal((await logout(s.refreshToken)).statusCode, 204, 'logout: 204');

  assertErrorBody(t, await current(s.accessToken), 401, 'SESSION_REVOKED');
  assertErrorBody(t, await permissions(s.accessToken), 401, 'SESSION_REVOKED');
  await assertSocketRevoked(t, watched, 'the open socket');
  const refused = await clients.refusal(s.accessToken);
  t.equal(refused.data?.code, 'SESSION_REVOKED', 'a new handshake with the token: connect_error SESSION_REVOKED');

  t.equal((await current(other.accessToken)).statusCode, 200, 'another session of the account still works');
  t.ok(otherSocket.connected, 'and its socket stays connected');
  t.same(clients.violations(), [], 'everything sent and received matched asyncapi.yaml');
});

t.test('refresh-token reuse: every access token of the session is refused', async (t) => {
  const { app, signUp, refresh, current, clock } = await setup(t);
  const clients = new RealtimeClients(t, urlOf(app));
  const s = await signUp(newEmail('reuse'));
  const rotated = await refresh(s.refreshToken);
  t.equal(rotated.statusCode, 200, 'refresh: 200');
  const second = toSession(rotated, 200);
  t.equal(second.sessionId, s.sessionId, 'the refreshed access token is of the same session');
  t.equal((await current(s.accessToken)).statusCode, 200, 'the first access token works');
  t.equal((await current(second.accessToken)).statusCode, 200, 'the refreshed one too');
  const socket = await clients.connect(second.accessToken);
  const watched = watchRevocation(socket);

  clock.advance(11); // past the reuse interval
  assertErrorBody(t, await refresh(s.refreshToken), 401, 'REFRESH_TOKEN_REUSED');

  assertErrorBody(t, await current(s.accessToken), 401, 'SESSION_REVOKED');
  assertErrorBody(t, await current(second.accessToken), 401, 'SESSION_REVOKED');
  await assertSocketRevoked(t, watched, 'the socket of the refreshed token');
  t.equal((await clients.refusal(s.accessToken)).data?.code, 'SESSION_REVOKED', 'handshake refused');
  t.same(clients.violations(), [], 'everything sent and received matched asyncapi.yaml');
});

t.test("a password change ends the other sessions of the account, not the caller's", async (t) => {
  const { app, signUp, signIn, current, changePassword } = await setup(t);
  const clients = new RealtimeClients(t, urlOf(app));
  const email = newEmail('password');
  const caller = await signUp(email);
  const other = await signIn(email);
  t.equal((await current(other.accessToken)).statusCode, 200, 'the other session works');
  const socket = await clients.connect(other.accessToken);
  const callerSocket = await clients.connect(caller.accessToken);
  const watched = watchRevocation(socket);

  t.equal((await changePassword(caller.accessToken, 'a new and longer passphrase')).statusCode, 204, 'changed: 204');

  assertErrorBody(t, await current(other.accessToken), 401, 'SESSION_REVOKED');
  await assertSocketRevoked(t, watched, "the other session's socket");
  t.equal((await current(caller.accessToken)).statusCode, 200, "the caller's session still works");
  t.ok(callerSocket.connected, "and the caller's socket stays connected");
  t.same(clients.violations(), [], 'everything sent and received matched asyncapi.yaml');
});

t.test('an instance that starts later learns the recent revocations from the sessions table', async (t) => {
  const { app, database, config, signUp, logout } = await setup(t);
  const s = await signUp(newEmail('restart'));
  const live = await signUp(newEmail('restart-live'));
  t.equal((await logout(s.refreshToken)).statusCode, 204);
  const revocations = createSessionRevocations({
    db: database.handle.db,
    database: config.database,
    accessTokenTtlSeconds: config.accessTokenTtlSeconds,
    log: app.log,
  });
  t.teardown(() => revocations.close());
  t.equal(revocations.isRevoked(s.sessionId), false, 'not known before start');
  await revocations.start();
  t.equal(revocations.isRevoked(s.sessionId), true, 'known after start');
  t.equal(revocations.isRevoked(live.sessionId), false, 'a live session is not revoked');

  // A revocation older than the access-token lifetime has no unexpired token left: not loaded.
  await database.handle.db
    .updateTable('sessions')
    .set({ revoked_at: new Date(Date.now() - (config.accessTokenTtlSeconds + 3_600) * 1000) })
    .where('id', '=', s.sessionId)
    .execute();
  const later = createSessionRevocations({
    db: database.handle.db,
    database: config.database,
    accessTokenTtlSeconds: config.accessTokenTtlSeconds,
    log: app.log,
  });
  t.teardown(() => later.close());
  await later.start();
  t.equal(later.isRevoked(s.sessionId), false, 'a revocation older than the token lifetime is not kept');
});

t.test('the set: expiry with the tokens, one onRevoked per session, bounded', async (t) => {
  let clock = 1_000_000;
  const warnings: string[] = [];
  const revocations: SessionRevocations = createSessionRevocations({
    db: {} as Kysely<Database>,
    database: { kind: 'pglite-memory' },
    accessTokenTtlSeconds: 60,
    log: quietLog(warnings),
    now: () => clock,
    maxEntries: 3,
  });
  const seen: string[] = [];
  const stop = revocations.onRevoked((id) => seen.push(id));
  const ids = ['a', 'b', 'c', 'd'].map((c) => `00000000-0000-4000-8000-00000000000${c}`);
  const [a = '', b = '', c = '', d = ''] = ids;

  revocations.add([a, b]);
  revocations.add([a]);
  t.same(seen, [a, b], 'onRevoked once per newly revoked session');
  t.ok(revocations.isRevoked(a) && revocations.isRevoked(b), 'both revoked');
  t.notOk(revocations.isRevoked(c), 'another session is not');

  clock += 60_000;
  t.ok(revocations.isRevoked(a), 'still revoked when the last token it issued may just expire');
  clock += 61_000;
  t.notOk(revocations.isRevoked(a), 'forgotten once every access token of the session has expired (TTL + margin)');

  clock = 5_000_000;
  revocations.add([a, b, c]);
  revocations.add([d]);
  t.notOk(revocations.isRevoked(a), 'full: the oldest makes room');
  t.ok(
    [b, c, d].every((id) => revocations.isRevoked(id)),
    'the newer ones are kept',
  );
  t.equal(warnings.length, 1, 'a warning when an unexpired revocation is forgotten');

  stop();
  revocations.add(['00000000-0000-4000-8000-00000000000e']);
  t.equal(seen.length, 6, 'no call after unsubscribing');
  await revocations.close();
});

/** Instance B on A's PostgreSQL database, with A's configuration, its own pool; closed before A's database goes. */
async function secondInstance(t: Test, first: Pick<AuthTestApp, 'database' | 'config'>): Promise<FastifyInstance> {
  const database = await openDatabase(first.database.config);
  const b = await buildApp(first.config, { database, logger: false });
  t.teardown(async () => {
    await b.close();
    await database.close();
  });
  await b.listen({ port: 0, host: '127.0.0.1' });
  return b;
}

/** Polls `current` on an instance every POLL_MS until it answers 401; resolves with the delay since `from`. */
async function refusedWithin(check: () => Promise<LightMyRequestResponse>, from: number): Promise<number> {
  for (;;) {
    const res = await check();
    if (res.statusCode === 401) {
      if (res.json().error !== 'SESSION_REVOKED') throw new Error(`refused with ${res.body}`);
      return Date.now() - from;
    }
    if (Date.now() - from > BOUND_MS * 2) throw new Error(`still ${res.statusCode} after ${Date.now() - from} ms`);
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

t.test('two instances on one PostgreSQL database', { skip: !usingPostgres && 'PostgreSQL only' }, async (t) => {
  // A rotated token is reuse at once (no reuse interval): A and B run on the real clock here.
  const first = await setup(t, { REFRESH_TOKEN_REUSE_INTERVAL_SECONDS: '0' });
  const b = await secondInstance(t, first);
  const onB = calls(b);
  const clientsB = new RealtimeClients(t, urlOf(b));

  /** Signs up on A, warms B's verified-token cache and opens a socket on B; ends the session on A; measures B. */
  async function revokeOnAMeasureOnB(
    label: string,
    end: (s: Session, email: string) => Promise<LightMyRequestResponse>,
  ) {
    const email = newEmail(label.replace(/[^a-z]+/gi, '-').slice(0, 24));
    const s = await first.signUp(email);
    t.equal((await onB.current(s.accessToken)).statusCode, 200, `${label}: B accepts the token`);
    const socket = await clientsB.connect(s.accessToken);
    const errorAt = nextEvent(socket, 'realtime:error', BOUND_MS * 2).then((payload) => ({
      payload,
      at: Date.now(),
    }));
    const closed = disconnection(socket, BOUND_MS * 2);
    const ended = await end(s, email);
    const endedAt = Date.now();
    t.ok([204, 401].includes(ended.statusCode), `${label}: ended on A (${ended.statusCode})`);
    const httpDelay = await refusedWithin(() => onB.current(s.accessToken), endedAt);
    const socketError = await errorAt;
    const socketDelay = Math.max(0, socketError.at - endedAt);
    t.match(socketError.payload, { code: 'SESSION_REVOKED', channel: null }, `${label}: B's socket is told`);
    t.equal(await closed, 'io server disconnect', `${label}: B's socket is disconnected`);
    t.ok(httpDelay <= BOUND_MS, `${label}: B refuses the token within ${BOUND_MS} ms (${httpDelay} ms)`);
    t.ok(socketDelay <= BOUND_MS, `${label}: B's socket is told within ${BOUND_MS} ms (${socketDelay} ms)`);
    t.equal(
      (await clientsB.refusal(s.accessToken)).data?.code,
      'SESSION_REVOKED',
      `${label}: B refuses a new handshake`,
    );
    t.comment(`${label}: B refused the token after ${httpDelay} ms, its socket was told after ${socketDelay} ms`);
    return { httpDelay, socketDelay };
  }

  await revokeOnAMeasureOnB('logout on A', (s) => first.logout(s.refreshToken));
  await revokeOnAMeasureOnB('refresh-token reuse on A', async (s) => {
    const rotated = await first.refresh(s.refreshToken);
    if (rotated.statusCode !== 200) throw new Error(`refresh: ${rotated.statusCode}`);
    return first.refresh(s.refreshToken);
  });
  await revokeOnAMeasureOnB('password change on A', async (_s, email) => {
    const caller = await first.signIn(email);
    return first.changePassword(caller.accessToken, 'a new and longer passphrase');
  });

  // The LISTEN connections (one per instance) are cut (a failover, a restarted pooler): what is
  // revoked meanwhile is caught up by the poll while they are down, or the load when they are back.
  const terminated = await sql<{ n: number }>`
    select count(pg_terminate_backend(pid))::int as n from pg_stat_activity
    where datname = current_database() and application_name = ${LISTENER_APPLICATION_NAME}
  `.execute(first.database.handle.db);
  t.equal(terminated.rows[0]?.n, 2, 'both instances lost their LISTEN connection');
  await revokeOnAMeasureOnB('logout on A while the LISTEN connections are down', (s) => first.logout(s.refreshToken));
  t.same(clientsB.violations(), [], 'everything sent and received matched asyncapi.yaml');
});

t.test(
  'without a LISTEN connection, the table is polled every second',
  { skip: !usingPostgres && 'PostgreSQL only' },
  async (t) => {
    const { database, config, signUp, logout } = await setup(t);
    const warnings: string[] = [];
    // A database URL nothing answers on: the listener never connects; queries go through the pool.
    const revocations = createSessionRevocations({
      db: database.handle.db,
      database: { kind: 'postgres', url: 'postgres://postgres@127.0.0.1:1/nothing' },
      accessTokenTtlSeconds: config.accessTokenTtlSeconds,
      log: quietLog(warnings),
    });
    t.teardown(() => revocations.close());
    await revocations.start();
    const s = await signUp(newEmail('poll'));
    let seenAt: number | undefined;
    revocations.onRevoked((id) => {
      if (id === s.sessionId) seenAt = Date.now();
    });
    t.equal((await logout(s.refreshToken)).statusCode, 204);
    const endedAt = Date.now();
    while (seenAt === undefined && Date.now() - endedAt < BOUND_MS * 2) {
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
    t.ok(seenAt !== undefined, 'the revocation was read from the table');
    const delay = (seenAt ?? Number.NaN) - endedAt;
    t.ok(delay <= BOUND_MS, `within ${BOUND_MS} ms (${delay} ms)`);
    t.comment(`without a LISTEN connection, the revocation was seen after ${delay} ms`);
    t.ok(revocations.isRevoked(s.sessionId), 'and is revoked');
    t.ok(
      warnings.some((w) => w.includes('session revocation listener lost')),
      'the lost listener was logged',
    );
  },
);
