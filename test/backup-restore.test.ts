// npm run backup and npm run restore: the embedded database written to a file and made again in a
// new data directory, with every account, session and realtime message; what they refuse.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import t from 'tap';
import { buildApp } from '../src/app.ts';
import { loadConfig } from '../src/config.ts';
import { type DatabaseHandle, openDatabase } from '../src/db/database.ts';
import { migrateToLatest } from '../src/db/migrate.ts';
import { newEmail, PASSWORD } from './helpers/auth.ts';

const root = path.resolve(import.meta.dirname, '..');
const work = mkdtempSync(path.join(os.tmpdir(), 'backup-restore-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

const ADMIN = { email: 'backup-admin@example.com', password: 'backup admin passphrase' };
const envOf = (dataDir: string) => ({
  NODE_ENV: 'test',
  LOG_LEVEL: 'silent',
  DATA_DIR: dataDir,
  REQUIRE_EMAIL_VERIFICATION: 'false',
  ADMIN_EMAIL: ADMIN.email,
  ADMIN_PASSWORD: ADMIN.password,
  JWT_SECRET: 'b'.repeat(20) + 'k'.repeat(20),
});

/** Runs an npm script's file as `npm run <name> -- <file>` would, with DATA_DIR and any other variables. */
function run(script: 'backup' | 'restore', file: string, env: Record<string, string>) {
  const done = spawnSync(process.execPath, [path.join(root, 'scripts', `${script}.ts`), file], {
    cwd: root,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...env },
    encoding: 'utf8',
    timeout: 120_000,
  });
  return { status: done.status, out: done.stdout, err: done.stderr };
}

/** Everything a restore must bring back, in a stable order. */
async function contents(database: DatabaseHandle) {
  const db = database.db;
  return {
    users: (await sql`select id, email, password_hash, role from users order by id`.execute(db)).rows,
    sessions: (await sql`select id, user_id, refresh_token_hash, revoked_at from sessions order by id`.execute(db))
      .rows,
    messages: (await sql`select id, channel_name, event, payload from realtime.messages order by id`.execute(db)).rows,
    channels: (await sql`select id, pattern from realtime.channels order by id`.execute(db)).rows,
  };
}

async function withApp<T>(
  dataDir: string,
  work: (app: Awaited<ReturnType<typeof buildApp>>, db: DatabaseHandle) => Promise<T>,
) {
  const config = loadConfig(envOf(dataDir));
  const database = await openDatabase(config.database);
  try {
    await migrateToLatest(database.db);
    const app = await buildApp(config, { database, logger: false });
    try {
      return await work(app, database);
    } finally {
      await app.close();
    }
  } finally {
    await database.close();
  }
}

t.test('a backup restores into a new data directory with every account, session and message', async (t) => {
  const source = path.join(work, 'source');
  const email = newEmail('backup');
  const before = await withApp(source, async (app, database) => {
    const signUp = await app.inject({
      method: 'POST',
      url: '/api/auth/users?client_type=mobile',
      payload: { email, password: PASSWORD },
    });
    t.equal(signUp.statusCode, 201);
    const user = signUp.json() as { accessToken: string; refreshToken: string };
    const admin = await app.inject({
      method: 'POST',
      url: '/api/auth/sessions?client_type=mobile',
      payload: ADMIN,
    });
    const adminToken = (admin.json() as { accessToken: string }).accessToken;
    const channel = await app.inject({
      method: 'POST',
      url: '/api/realtime/channels',
      headers: { authorization: `Bearer ${adminToken}` },
      payload: { pattern: 'backup:%' },
    });
    t.equal(channel.statusCode, 201, 'a channel');
    for (const n of [1, 2, 3]) {
      const published = await app.inject({
        method: 'POST',
        url: '/api/realtime/messages',
        headers: { authorization: `Bearer ${user.accessToken}` },
        payload: { channel: 'backup:room', event: 'note', payload: { n } },
      });
      t.equal(published.statusCode, 201, `message ${n}`);
    }
    return { ...(await contents(database)), refreshToken: user.refreshToken };
  });
  t.equal(before.users.length, 2, 'the user and the administrator');
  t.equal(before.sessions.length, 2);
  t.equal(before.messages.length, 3);

  const file = path.join(work, 'backup.tgz');
  const backup = run('backup', file, { DATA_DIR: source });
  t.equal(backup.status, 0, 'npm run backup succeeds', backup);
  t.match(backup.out, /wrote .*backup\.tgz \([\d.]+ MiB\): 2 accounts, 2 live sessions, 3 realtime messages/);
  t.ok(existsSync(file));

  const target = path.join(work, 'restored');
  const restore = run('restore', file, { DATA_DIR: target });
  t.equal(restore.status, 0, 'npm run restore succeeds', restore);
  t.match(restore.out, /done: 2 accounts, 2 live sessions, 3 realtime messages/);

  await withApp(target, async (app, database) => {
    const after = await contents(database);
    t.same(after.users, before.users, 'every account, its password hash and role');
    t.same(after.sessions, before.sessions, 'every session');
    t.same(after.messages, before.messages, 'every message');
    t.same(after.channels, before.channels, 'every channel');
    const signIn = await app.inject({
      method: 'POST',
      url: '/api/auth/sessions?client_type=mobile',
      payload: { email, password: PASSWORD },
    });
    t.equal(signIn.statusCode, 200, 'the restored service signs the account in');
    const refreshed = await app.inject({
      method: 'POST',
      url: '/api/auth/refresh?client_type=mobile',
      payload: { refreshToken: before.refreshToken },
    });
    t.equal(refreshed.statusCode, 200, 'and a session from before the backup goes on');
  });
});

t.test('what backup and restore refuse, each in one line', async (t) => {
  const dir = path.join(work, 'refusals');
  const file = path.join(work, 'refusals.tgz');
  const none = run('backup', file, { DATA_DIR: path.join(work, 'nothing-here') });
  t.equal(none.status, 1);
  t.match(
    none.err,
    /^backup: there is no embedded database in .*nothing-here\/pglite \(DATA_DIR\): nothing to back up\n$/,
  );

  // The data directory open here, as a running service holds it.
  const config = loadConfig(envOf(dir));
  const open = await openDatabase(config.database);
  await migrateToLatest(open.db);
  const busy = run('backup', file, { DATA_DIR: dir });
  t.equal(busy.status, 1, 'refused while the database is open');
  t.match(
    busy.err,
    new RegExp(`in use by process ${process.pid}\\. Stop the service first, then run the backup again\\.`),
  );
  t.notOk(existsSync(file), 'and nothing written');
  await open.close();

  t.equal(run('backup', file, { DATA_DIR: dir }).status, 0, 'once it is closed');
  const again = run('backup', file, { DATA_DIR: dir });
  t.equal(again.status, 1);
  t.match(again.err, /refusals\.tgz exists already: name a new file/, 'an existing file is never overwritten');

  const occupied = run('restore', file, { DATA_DIR: dir });
  t.equal(occupied.status, 1);
  t.match(occupied.err, /holds a database already: move it away, or set DATA_DIR to a new directory/);

  const postgres = run('backup', path.join(work, 'pg.tgz'), { DATABASE_URL: 'postgres://127.0.0.1:1/x' });
  t.match(postgres.err, /DATABASE_URL names PostgreSQL: back it up with pg_dump/);
  const usage = run('restore', '', {});
  t.equal(usage.status, 1);
  t.match(usage.err, /name the backup to restore: npm run restore -- <file>/);
  writeFileSync(path.join(work, 'not-a-backup.tgz'), 'this is not a tarball');
  const broken = run('restore', path.join(work, 'not-a-backup.tgz'), { DATA_DIR: path.join(work, 'from-broken') });
  t.equal(broken.status, 1, 'a file that is not a backup fails');
  t.match(
    broken.err,
    /^restore: .*not-a-backup\.tgz is not a backup of this service's database \(.*\); nothing was restored\n$/,
  );
  t.notOk(existsSync(path.join(work, 'from-broken', 'pglite')), 'and leaves no half-made database behind');

  // A PGlite dump, but of another database (no accounts table).
  const foreign = await openDatabase({ kind: 'pglite-memory' });
  await sql`create table notes (x text)`.execute(foreign.db);
  const foreignDump = await foreign.dumpDataDir?.('gzip');
  await foreign.close();
  writeFileSync(path.join(work, 'foreign.tgz'), Buffer.from(await (foreignDump as Blob).arrayBuffer()));
  const other = run('restore', path.join(work, 'foreign.tgz'), { DATA_DIR: path.join(work, 'from-foreign') });
  t.equal(other.status, 1, "another database's dump is refused");
  t.match(
    other.err,
    /is not a backup of this service's database \(relation "users" does not exist\); nothing was restored/,
  );
  t.notOk(existsSync(path.join(work, 'from-foreign', 'pglite')), 'and leaves nothing behind');
  const nowhere = run('backup', path.join(work, 'no-such-dir', 'b.tgz'), { DATA_DIR: dir });
  t.match(
    nowhere.err,
    /no-such-dir does not exist: create it, or name a file elsewhere/,
    'a missing directory, before any dump',
  );
});
