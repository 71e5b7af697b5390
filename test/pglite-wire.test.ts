// PGLITE_SOCKET_PORT: the embedded database over the PostgreSQL protocol, for psql in development.
// A client's statements take turns with the service's own transactions on PGlite's one session: none
// lands inside the other's transaction, and a client that leaves mid-transaction is rolled back.
// The embedded database is opened here on both suites (this is about PGlite, whatever the suite's database).
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { sql } from 'kysely';
import pg from 'pg';
import t, { type Test } from 'tap';
import { freePort } from '../scripts/lib/service-process.ts';
import { buildApp } from '../src/app.ts';
import { ConfigError, loadConfig } from '../src/config.ts';
import { openDatabase } from '../src/db/database.ts';
import { serveDatabaseToPsql } from '../src/db/pglite-wire.ts';
import { newEmail, PASSWORD } from './helpers/auth.ts';
import { migratedPGlite } from './helpers/database.ts';

async function start(t: Test) {
  const port = await freePort();
  const config = loadConfig({
    NODE_ENV: 'test',
    LOG_LEVEL: 'silent',
    DATABASE_URL: 'memory://',
    PGLITE_SOCKET_PORT: String(port),
  });
  const database = await openDatabase(config.database, { loadDataDir: await migratedPGlite() });
  const app = await buildApp(config, { database, logger: false });
  const wire = await serveDatabaseToPsql(app, config, database);
  await app.ready();
  t.teardown(async () => {
    await app.close();
    await database.close();
  });
  const client = async () => {
    const c = new pg.Client({ host: '127.0.0.1', port, user: 'psql', database: 'postgres' });
    await c.connect();
    return c;
  };
  return { app, port, wire, client, database };
}

/** An app whose wire server disconnects a client that holds the session over `holdLimitMs`. */
async function startWithHoldLimit(t: Test, holdLimitMs: number) {
  const port = await freePort();
  const config = loadConfig({ NODE_ENV: 'test', LOG_LEVEL: 'silent', DATABASE_URL: 'memory://' });
  const database = await openDatabase(config.database, { loadDataDir: await migratedPGlite() });
  const app = await buildApp(config, { database, logger: false });
  await app.ready();
  const wire = await database.serveOverWire?.(port, { holdLimitMs });
  t.teardown(async () => {
    await wire?.close();
    await app.close();
    await database.close();
  });
  return { app, port, database };
}

/**
 * One app and wire server for the cases that leave nothing behind: each connects, runs its statements,
 * and its clients leave idle (no transaction, no sequence without its Sync, no message unanswered) with
 * no setting of their own. Such a case uses keys and e-mail addresses of its own, so these cases depend
 * on no order among themselves and on no state another case left. Started by the first case that asks,
 * closed when the file ends.
 *
 * A case keeps an app of its own (`start(t)`, `startWithHoldLimit`) when:
 * - one of its clients leaves something open: the wire server's net for such a departure rolls back
 *   whatever transaction holds the session some 100 ms later, and that could be the next case's;
 * - it asserts the clean-up after a client left (settings, session user, temporary tables, a renamed
 *   role), which runs in full only with no client left: a client of an earlier case whose departure
 *   the server has not seen yet would count;
 * - it fills the client limit, which such a client would also change.
 */
let sharedApp: ReturnType<typeof start> | undefined;
const shared = () => {
  sharedApp ??= start(t);
  return sharedApp;
};

const signUp = (app: Awaited<ReturnType<typeof start>>['app'], email: string) =>
  app.inject({ method: 'POST', url: '/api/auth/users', payload: { email, password: PASSWORD } });

t.test("a client reads and writes the service's data", async (t) => {
  const { app, port, wire, client } = await shared();
  t.equal(wire?.port, port, 'served on PGLITE_SOCKET_PORT');
  const c = await client();
  t.teardown(() => c.end());
  const email = newEmail('wire');
  t.equal((await signUp(app, email)).statusCode, 202);
  const { rows } = await c.query('select email, email_verified from users where email = $1', [email]);
  t.same(rows, [{ email, email_verified: false }], 'the account the service made');
  // The policy stays in the shared app's database: no other case reads realtime.channels.
  await c.query(
    "create policy wire_test on realtime.channels for select to anon using (enabled and pattern like 'wire:%')",
  );
  const policies = await app.inject({ url: '/api/realtime/permissions' });
  t.equal(policies.statusCode, 401, 'the service goes on answering');
  const listed = await c.query("select policyname from pg_policies where policyname = 'wire_test'");
  t.equal(listed.rowCount, 1, 'DDL from the client is in the database');
});

t.test("the client's open transaction holds the service back until it ends, and the reverse", async (t) => {
  const { app, client } = await shared();
  const c = await client();
  t.teardown(() => c.end());
  await c.query('begin');
  await c.query("insert into app_settings (key, value) values ('wire-test', 'uncommitted')");
  let answered = false;
  const email = newEmail('held');
  const pending = signUp(app, email).then((res) => {
    answered = true;
    return res;
  });
  await new Promise((r) => setTimeout(r, 500));
  t.equal(answered, false, 'the service waits while the client is inside its transaction');
  await c.query('rollback');
  t.equal((await pending).statusCode, 202, 'and goes on once it ends');
  const { rows } = await c.query("select value from app_settings where key = 'wire-test'");
  t.same(rows, [], "the client's rolled-back insert is not there: the service's statements did not run inside it");
  t.equal((await c.query('select 1 from users where email = $1', [email])).rowCount, 1, "the service's sign-up is");
});

t.test('a client that leaves inside a transaction is rolled back, and the service goes on', async (t) => {
  // An app of its own: its client leaves inside a transaction.
  const { app, client } = await start(t);
  const c = await client();
  await c.query('begin');
  await c.query("insert into app_settings (key, value) values ('wire-left', 'never committed')");
  await c.end();
  const res = await signUp(app, newEmail('after'));
  t.equal(res.statusCode, 202, 'the service is not held by a client that is gone');
  const other = await client();
  t.teardown(() => other.end());
  t.same((await other.query("select 1 from app_settings where key = 'wire-left'")).rows, [], 'rolled back');
});

t.test("the clean-up of a client that left inside a transaction never rolls back the next client's", async (t) => {
  // An app of its own: its first client leaves inside a transaction. The next client begins its own
  // at once, within the moment the clean-up waits before its safety-net rollback.
  const { client, database } = await start(t);
  const a = await client();
  await a.query('begin');
  await a.query("insert into app_settings (key, value) values ('wire-first', 'never committed')");
  const connecting = client(); // answered only once the first client has let go of the session
  await a.end();
  const b = await connecting;
  t.teardown(() => b.end());
  await b.query('begin');
  await b.query("insert into app_settings (key, value) values ('wire-next', 'committed')");
  await new Promise((r) => setTimeout(r, 500)); // past the clean-up's wait
  await b.query('commit');
  const keys = await sql<{ key: string }>`select key from app_settings where key like 'wire-%' order by key`.execute(
    database.db,
  );
  t.same(
    keys.rows.map((r) => r.key),
    ['wire-next'],
    "the first client's insert is rolled back, the next client's is committed",
  );
});

t.test('PGLITE_SOCKET_PORT: refused with PostgreSQL, in production, on a used port', async (t) => {
  t.throws(
    () => loadConfig({ DATABASE_URL: 'postgres://127.0.0.1/x', PGLITE_SOCKET_PORT: '5433' }),
    new ConfigError(
      'PGLITE_SOCKET_PORT serves the embedded database, and DATABASE_URL names PostgreSQL: connect psql to that server instead',
    ),
  );
  t.throws(
    () =>
      loadConfig({
        NODE_ENV: 'production',
        JWT_SECRET: randomBytes(48).toString('base64'),
        SMTP_URL: 'smtp://127.0.0.1:25',
        PGLITE_SOCKET_PORT: '5433',
      }),
    { message: /^PGLITE_SOCKET_PORT is refused when NODE_ENV=production/ },
  );
  t.throws(() => loadConfig({ PORT: '7130', PGLITE_SOCKET_PORT: '7130' }), {
    message: 'PGLITE_SOCKET_PORT must differ from PORT and METRICS_PORT (it is 7130)',
  });
  const blocker = net.createServer().listen(0, '127.0.0.1');
  await new Promise((r) => blocker.once('listening', r));
  t.teardown(() => blocker.close());
  const taken = (blocker.address() as net.AddressInfo).port;
  const config = loadConfig({ NODE_ENV: 'test', DATABASE_URL: 'memory://', PGLITE_SOCKET_PORT: String(taken) });
  const database = await openDatabase(config.database);
  t.teardown(() => database.close());
  await t.rejects(database.serveOverWire?.(taken) ?? Promise.reject(new Error('no serveOverWire')), {
    name: 'ConfigError',
    message: `PGLITE_SOCKET_PORT ${taken} on 127.0.0.1 cannot be opened (address already in use): set PGLITE_SOCKET_PORT to a free port`,
  });
  t.equal(loadConfig({ DATABASE_URL: 'memory://' }).pgliteSocketPort, undefined, 'off by default');
});

/** Sends raw bytes to the port; resolves with what came back once the server closed the connection (or 3 s passed). */
function sendRaw(port: number, ...chunks: Buffer[]): Promise<{ closed: boolean; received: number }> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    let received = 0;
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ closed: false, received });
    }, 3_000);
    socket.on('data', (d) => {
      received += d.length;
    });
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ closed: true, received });
    });
    socket.on('error', () => {});
    socket.on('connect', () => {
      for (const chunk of chunks) socket.write(chunk);
    });
  });
}

/** A well-formed startup message for `user`. */
const startup = (user = 'psql') => {
  const body = Buffer.from(`user\0${user}\0database\0postgres\0\0`);
  const head = Buffer.alloc(8);
  head.writeInt32BE(body.length + 8, 0);
  head.writeInt32BE(196608, 4);
  return Buffer.concat([head, body]);
};

t.test('malformed protocol bytes close that connection and leave the service and other clients alone', async (t) => {
  // An app of its own: a connection cut after its startup leaves that startup unanswered.
  const { app, port, client } = await start(t);
  const hex = (h: string) => Buffer.from(h, 'hex');
  const cases: Array<[string, Buffer[]]> = [
    ['an unknown message type before any startup', [hex('7a00000004')]],
    ['a startup without its terminator', [hex('0000000800030000')]],
    ['an unknown message type after the startup', [startup(), hex('7a00000004')]],
    ['a query with a negative length', [startup(), hex('51ffffffec')]],
    ['a query with a length under 4', [startup(), hex('5100000002')]],
    ['a startup without a user', [Buffer.concat([hex('0000001300030000'), Buffer.from('database\0x\0\0')])]],
  ];
  for (const [what, bytes] of cases) {
    const outcome = await sendRaw(port, ...bytes);
    t.ok(outcome.closed, `${what}: the connection is closed`);
    t.ok(outcome.received < 4096, `${what}: without a flood of answers (${outcome.received} bytes)`);
  }
  t.equal((await signUp(app, newEmail('after-garbage'))).statusCode, 202, 'the service goes on');
  t.equal((await app.inject({ url: '/api/health' })).statusCode, 200, 'and its health check');
  const c = await client();
  t.teardown(() => c.end());
  t.equal((await c.query('select 1 as one')).rows[0]?.one, 1, 'a well-formed client is served');
});

t.test("a departed client's settings are not in force for the service's next statement", async (t) => {
  // An app of its own: it asserts the clean-up with no client left, at once after each departure.
  const { app, client, database } = await start(t);
  for (let round = 0; round < 5; round++) {
    const c = await client();
    await c.query('set default_transaction_read_only = on; set search_path = pg_catalog; set role anon');
    await c.end();
    // At once: no pause for a clean-up to catch up.
    const key = `after-set-${round}`;
    await sql`insert into public.app_settings (key, value) values (${key}, 'x')`.execute(database.db);
    const { rows } = await sql<{ user: string; path: string }>`
      select current_user as user, current_setting('search_path') as path`.execute(database.db);
    t.same(
      rows,
      [{ user: 'postgres', path: 'public,pg_temp' }],
      `round ${round}: the service writes, as itself, in its schema`,
    );
  }
  t.equal((await signUp(app, newEmail('after-set'))).statusCode, 202, 'and answers');
});

t.test(
  'Terminate ends the connection: nothing after it runs, an unsynced statement before it is rolled back',
  async (t) => {
    // An app of its own: its client leaves inside an unsynced sequence.
    const { port, database } = await start(t);
    const s = await rawSession(port);
    s.send(
      parse("insert into app_settings (key, value) values ('terminated', 'x')"),
      bind(),
      execute(),
      frame('X', Buffer.alloc(0)),
      frame('S', Buffer.alloc(0)),
      wireQuery("insert into app_settings (key, value) values ('after-terminate', 'x')"),
    );
    await s.gone;
    const { rows } = await sql`select key from app_settings where key in ('terminated', 'after-terminate')`.execute(
      database.db,
    );
    t.same(rows, [], 'neither insert is there');
  },
);

t.test("one client's Sync does not commit another client's unsynced statement", async (t) => {
  // An app of its own: its first client leaves inside an unsynced sequence.
  const { port, database } = await start(t);
  const a = await rawSession(port);
  a.send(parse("insert into app_settings (key, value) values ('not-yours', 'x')"), bind(), execute());
  t.ok(await a.until(() => a.text().includes('INSERT 0 1')), 'the insert ran');
  // Its startup is not answered while the first client holds the session (only that client is served
  // meanwhile): waiting for it, as rawSession does, only ran into the 5 s deadline.
  const b = await rawConnection(port);
  b.send(frame('S', Buffer.alloc(0)), wireQuery('select 1'));
  await new Promise((r) => setTimeout(r, 300));
  t.notMatch(b.text(), /SELECT 1/, 'the other client waits while the first is inside its sequence');
  a.socket.destroy();
  t.ok(await b.until(() => b.text().includes('SELECT 1')), 'and is served once it left');
  b.socket.destroy();
  const { rows } = await sql`select 1 from app_settings where key = 'not-yours'`.execute(database.db);
  t.same(rows, [], "the first client's insert was rolled back");
});

t.test('a client that keeps a transaction open past the limit is disconnected and rolled back', async (t) => {
  // An app of its own: its client is cut off inside a transaction.
  const { app, port, database } = await startWithHoldLimit(t, 1_000);
  const c = new pg.Client({ host: '127.0.0.1', port, user: 'psql', database: 'postgres' });
  c.on('error', () => {});
  await c.connect();
  await c.query('begin');
  await c.query("insert into app_settings (key, value) values ('left-open', 'x')");
  const started = performance.now();
  const res = await signUp(app, newEmail('waits'));
  t.equal(res.statusCode, 202, 'the service goes on once the limit ends the transaction');
  t.ok(performance.now() - started < 5_000, 'within seconds');
  await t.rejects(c.query('commit'), 'the client was disconnected');
  const { rows } = await sql`select 1 from app_settings where key = 'left-open'`.execute(database.db);
  t.same(rows, [], 'its insert was rolled back');
});

/** Protocol messages as a client writes them. */
const frame = (type: string, body: Buffer) => {
  const head = Buffer.alloc(5);
  head.write(type, 0);
  head.writeInt32BE(body.length + 4, 1);
  return Buffer.concat([head, body]);
};
const text = (s: string) => Buffer.from(`${s}\0`);
const wireQuery = (sql: string) => frame('Q', text(sql));
const parse = (sql: string) => frame('P', Buffer.concat([text(''), text(sql), Buffer.from([0, 0])]));
const bind = () => frame('B', Buffer.concat([text(''), text(''), Buffer.alloc(6)]));
const execute = () => frame('E', Buffer.concat([text(''), Buffer.alloc(4)]));
const request = (code: number) => {
  const b = Buffer.alloc(8);
  b.writeInt32BE(8, 0);
  b.writeInt32BE(code, 4);
  return b;
};

/** A raw connection, its startup sent: what it received so far, and whether the server closed it. */
async function rawConnection(port: number, ...before: Buffer[]) {
  const socket = net.connect(port, '127.0.0.1');
  let received = Buffer.alloc(0);
  let closed = false;
  socket.on('data', (d) => {
    received = Buffer.concat([received, d]);
  });
  socket.on('error', () => {});
  const gone = new Promise<void>((resolve) =>
    socket.on('close', () => {
      closed = true;
      resolve();
    }),
  );
  await new Promise<void>((resolve) => socket.on('connect', resolve));
  for (const bytes of before) socket.write(bytes);
  socket.write(startup());
  const until = async (what: () => boolean, ms = 5_000) => {
    const deadline = Date.now() + ms;
    while (!what() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    return what();
  };
  return {
    socket,
    gone,
    until,
    ready: () => received.includes(Buffer.from('Z\0\0\0\x05I')),
    closed: () => closed,
    text: () => received.toString('latin1'),
    send: (...messages: Buffer[]) => socket.write(Buffer.concat(messages)),
  };
}

/** A raw connection past its startup (waited for up to 5 s). */
async function rawSession(port: number, ...before: Buffer[]) {
  const session = await rawConnection(port, ...before);
  await session.until(session.ready);
  return session;
}

t.test('SSL and GSS encryption requests are declined, and the client goes on in the clear', async (t) => {
  const { port } = await shared();
  for (const [what, code] of [
    ['SSL', 80877103],
    ['GSS', 80877104],
  ] as const) {
    const s = await rawSession(port, request(code));
    t.ok(s.text().startsWith('N'), `${what}: answered N`);
    s.send(wireQuery('select 41 + 1 as answer'));
    t.ok(await s.until(() => s.text().includes('42')), `${what}: then served`);
    s.socket.destroy();
  }
});

t.test('COPY from the client is refused before it reaches the database, however it is quoted', async (t) => {
  // An app of its own: one client turns standard_conforming_strings off and is cut off, for the clean-up to reset.
  const { app, port } = await start(t);
  const refused: Array<[string, ...string[]]> = [
    ['plain', 'copy app_settings (key, value) from stdin'],
    ['after another statement', 'select 1; COPY app_settings FROM STDIN WITH (format csv)'],
    // With standard_conforming_strings off, \' ends no string: the COPY is a statement of its own.
    [
      'behind a backslash quote',
      'set standard_conforming_strings = off',
      "select 'x\\' , ' ; copy app_settings (key, value) from stdin; -- '",
    ],
  ];
  for (const [what, ...statements] of refused) {
    const s = await rawSession(port);
    for (const sql of statements) s.send(wireQuery(sql));
    await s.gone;
    t.match(s.text(), /FATAL.*C0A000.*COPY FROM STDIN.*not available on the embedded database/s, `refused: ${what}`);
  }
  const s = await rawSession(port);
  s.send(parse('copy app_settings from stdin'));
  await s.gone;
  t.match(s.text(), /COPY FROM STDIN/, 'refused in a Parse message too');
  t.equal((await signUp(app, newEmail('after-copy'))).statusCode, 202, 'the service goes on');
  const out = await rawSession(port);
  out.send(wireQuery('copy (select 41 + 1) to stdout'));
  t.ok(await out.until(() => out.text().includes('COPY 1')), 'COPY … TO STDOUT is served');
  t.match(out.text(), /42/, 'with its rows');
  out.socket.destroy();
});

t.test('COPY with a program fails as a plain error, even built at run time, and the service goes on', async (t) => {
  const { app, client } = await shared();
  const c = await client();
  t.teardown(() => c.end());
  for (const sql of [
    "copy app_settings to program 'cat'",
    "copy app_settings from program 'true'",
    "do $$ begin execute 'co' || 'py (select 1) to pro' || 'gram ''true'''; end $$",
  ]) {
    await t.rejects(c.query(sql), { message: /could not execute command/ }, sql);
  }
  t.equal((await c.query('select 1 as one')).rows[0]?.one, 1, 'the client is served after');
  t.equal((await signUp(app, newEmail('after-program'))).statusCode, 202, 'and the service');
  t.equal((await app.inject({ url: '/api/health' })).statusCode, 200, 'its health check too');
});

t.test('extended-protocol messages without their Sync hold the session, and are rolled back', async (t) => {
  // An app of its own: its client leaves inside an unsynced sequence.
  const { app, port, database } = await start(t);
  const s = await rawSession(port);
  s.send(parse("insert into app_settings (key, value) values ('unsynced', 'x')"), bind(), execute());
  t.ok(await s.until(() => s.text().includes('INSERT 0 1')), 'the insert ran');
  let answered = false;
  const pending = signUp(app, newEmail('after-unsynced')).then((res) => {
    answered = true;
    return res;
  });
  await new Promise((r) => setTimeout(r, 400));
  t.equal(answered, false, 'the service waits: its statements would land inside the implicit transaction');
  s.socket.destroy();
  t.equal((await pending).statusCode, 202, 'and goes on once the client left');
  const { rows } = await sql`select 1 from app_settings where key = 'unsynced'`.execute(database.db);
  t.same(rows, [], 'the unsynced insert was rolled back');
});

t.test('a simple query answered does not end the hold of an unsynced BEGIN behind it', async (t) => {
  // An app of its own: its client is cut off inside an unsynced BEGIN.
  const { app, port } = await startWithHoldLimit(t, 1_000);
  const s = await rawSession(port);
  s.send(wireQuery('select 1'), parse('begin'), bind(), execute());
  const started = performance.now();
  t.equal((await signUp(app, newEmail('after-dodge'))).statusCode, 202, 'the service goes on');
  t.ok(performance.now() - started < 5_000, 'within seconds: the limit ended the hold');
  await s.gone;
  t.match(s.text(), /C57014.*held for more than 1 s/s, 'the client is told why it was disconnected');
});

t.test('a departed client leaves no session state behind', async (t) => {
  // An app of its own: it asserts the clean-up with no client left (no temporary table of any client).
  const { app, client, database } = await start(t);
  const c = await client();
  await c.query('create role wire_intruder; set session authorization wire_intruder');
  await c.query('create temp table app_settings (key text, value text)');
  await c.end();
  t.equal((await signUp(app, newEmail('after-authorization'))).statusCode, 202, 'the service writes, as itself');
  const { rows } = await sql<{ user: string }>`select session_user as user`.execute(database.db);
  t.same(rows, [{ user: 'postgres' }], 'the session user is the service own again');
  const temp = await sql`select 1 from pg_tables where schemaname like 'pg_temp%'`.execute(database.db);
  t.same(temp.rows, [], 'the temporary table is gone');
});

t.test('clients beyond the limit are told so', async (t) => {
  // An app of its own: it fills the client limit, which a client of an earlier case still counted would change.
  const { port, client } = await start(t);
  const held = await Promise.all(Array.from({ length: 8 }, () => client()));
  const extra = new pg.Client({ host: '127.0.0.1', port, user: 'psql', database: 'postgres' });
  await t.rejects(extra.connect(), { code: '53300', message: /serves 8 clients at once/ });
  await Promise.all(held.map((c) => c.end()));
});

t.test('a message split into many small chunks is whole when it arrives', async (t) => {
  const { port } = await shared();
  const s = await rawSession(port);
  const bytes = wireQuery(`select length('${'x'.repeat(200_000)}') as n`);
  for (let i = 0; i < bytes.length; i += 1_000) s.socket.write(bytes.subarray(i, i + 1_000));
  t.ok(await s.until(() => s.text().includes('200000')), 'answered');
  s.socket.destroy();
});

t.test('replication connections are refused: they broke the session', async (t) => {
  const { app, port } = await shared();
  const body = Buffer.from('user\0psql\0database\0postgres\0replication\0true\0\0');
  const head = Buffer.alloc(8);
  head.writeInt32BE(body.length + 8, 0);
  head.writeInt32BE(196608, 4);
  const s = await new Promise<{ text: string }>((resolve) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.write(Buffer.concat([head, body])));
    let text = '';
    socket.on('data', (d) => {
      text += d.toString('latin1');
    });
    socket.on('error', () => {});
    socket.on('close', () => resolve({ text }));
  });
  t.match(s.text, /FATAL.*replication connections are not available/s, 'told why');
  t.equal((await signUp(app, newEmail('after-replication'))).statusCode, 202, 'the service goes on');
});

t.test("a client's temporary table never hides the service's table, even while it stays", async (t) => {
  // An app of its own: its client leaves a temporary table for the clean-up to discard.
  const { app, client } = await start(t);
  const c = await client();
  t.teardown(() => c.end());
  await c.query('create temp table users (like public.users including all)');
  t.equal((await signUp(app, newEmail('beside-temp'))).statusCode, 202, 'the service writes to its own table');
  t.equal((await c.query('select count(*)::int as n from pg_temp.users')).rows[0]?.n, 0, 'not to the client one');
});

t.test("the clean-up finds the service's role even when a client renamed it", async (t) => {
  // An app of its own: the service's role is renamed for good, and the clean-up is asserted with no client left.
  const { client, database } = await start(t);
  const c = await client();
  await c.query('create role wire_renamer superuser');
  await c.query('set session authorization wire_renamer');
  await c.query('alter role postgres rename to postgres_renamed');
  await c.query('set default_transaction_read_only = on');
  await c.end();
  await sql`insert into app_settings (key, value) values ('after-rename', 'x')`.execute(database.db);
  const { rows } = await sql<{ user: string }>`select current_user as user`.execute(database.db);
  t.same(rows, [{ user: 'postgres_renamed' }], 'the service is its own role again, under its new name');
});
