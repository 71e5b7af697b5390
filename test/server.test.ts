import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { freePort, projectRoot, SERVICE_NODE_FLAGS, startService, waitFor200 } from '../scripts/lib/service-process.ts';

t.test('the service starts on an empty DATA_DIR, refuses a second process on it, and stops cleanly', async (t) => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'svc-data-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const port = await freePort();
  const first = startService({ DATA_DIR: dataDir, PORT: String(port) });
  t.teardown(() => {
    first.child.kill('SIGKILL');
  });
  const ms = await waitFor200(`http://127.0.0.1:${port}/api/health`, 30_000);
  t.comment(`first 200 after ${ms} ms on an empty DATA_DIR`);
  t.ok(existsSync(path.join(dataDir, 'pglite.lock')), 'the data directory is locked');

  const second = startService({ DATA_DIR: dataDir, PORT: String(await freePort()) });
  const code = await second.exited;
  t.equal(code, 1, 'the second process exits with 1');
  t.match(second.output(), /Cannot start: The embedded database in .* is in use by process \d+/);
  t.equal(second.output().trim().split('\n').length, 1, 'one clear line');

  const health = await fetch(`http://127.0.0.1:${port}/api/health`);
  t.equal(health.status, 200, 'the first process is unharmed');
  t.notMatch(first.output(), /warning|deprecat/i, 'no warning from Node or a library at start or on a request');

  first.child.kill('SIGTERM');
  t.equal(await first.exited, 0, 'SIGTERM: a clean exit');
  t.notOk(existsSync(path.join(dataDir, 'pglite.lock')), 'the lock is released');

  // The same directory opens again, with its data, after a clean stop.
  const again = startService({ DATA_DIR: dataDir, PORT: String(port) });
  t.teardown(() => {
    again.child.kill('SIGKILL');
  });
  const msAgain = await waitFor200(`http://127.0.0.1:${port}/api/health`, 30_000);
  t.comment(`first 200 after ${msAgain} ms on an existing DATA_DIR`);
  again.child.kill('SIGINT');
  t.equal(await again.exited, 0, 'SIGINT: a clean exit');
});

t.test('a lock left by a process that died is taken over', async (t) => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'svc-data-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const port = await freePort();
  const crashed = startService({ DATA_DIR: dataDir, PORT: String(port) });
  await waitFor200(`http://127.0.0.1:${port}/api/health`, 30_000);
  crashed.child.kill('SIGKILL');
  await crashed.exited;
  t.ok(existsSync(path.join(dataDir, 'pglite.lock')), 'the killed process left its lock behind');
  const next = startService({ DATA_DIR: dataDir, PORT: String(port) });
  t.teardown(() => {
    next.child.kill('SIGKILL');
  });
  await waitFor200(`http://127.0.0.1:${port}/api/health`, 30_000);
  t.pass('a new process starts on the stale lock');
  next.child.kill('SIGTERM');
  t.equal(await next.exited, 0);
});

t.test('bad configuration stops the process with one line naming the variable', async (t) => {
  const cases: Array<[Record<string, string>, RegExp]> = [
    [{ PORT: 'abc' }, /^Cannot start: PORT must be a port number \(1-65535\) \(got "abc"\)$/],
    [{ NODE_ENV: 'production', PORT: '7999' }, /^Cannot start: JWT_SECRET is required when NODE_ENV=production/],
    [{ DATABASE_URL: 'mysql://nope' }, /^Cannot start: DATABASE_URL must be/],
  ];
  for (const [env, message] of cases) {
    const run = startService(env);
    t.equal(await run.exited, 1, JSON.stringify(env));
    const out = run.output().trim();
    t.match(out, message);
    t.equal(out.split('\n').length, 1, 'exactly one line');
  }
});

t.test('a port already in use stops the start with one line: what, where, what to do', async (t) => {
  const holder = net.createServer();
  await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise((resolve) => holder.close(resolve)));
  const { port } = holder.address() as net.AddressInfo;
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'svc-data-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const run = startService({ DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1' });
  t.equal(await run.exited, 1);
  const out = run.output().trim();
  t.equal(
    out,
    `Cannot start: port ${port} on 127.0.0.1 is already in use: stop the process that holds it, or set PORT to a free port`,
  );
  t.notOk(existsSync(`${dataDir}.lock`), 'the data directory is released');
});

t.test('an unreachable database stops the start with one line, without the password', async (t) => {
  const closedPort = await freePort();
  const run = startService({
    PORT: String(await freePort()),
    DATABASE_URL: `postgres://app:s3cret-pass@127.0.0.1:${closedPort}/service`,
  });
  t.equal(await run.exited, 1);
  const out = run.output().trim();
  t.equal(
    out,
    `Cannot start: the database at postgres://app@127.0.0.1:${closedPort}/service is unreachable (connection refused): start PostgreSQL there or fix DATABASE_URL`,
  );
  t.notMatch(out, /s3cret/);
});

t.test('npm start and the Dockerfile run the service with the same V8 flags', async (t) => {
  const pkg = JSON.parse(readFileSync(path.join(projectRoot, 'package.json'), 'utf8')) as {
    scripts: { start: string };
  };
  t.equal(pkg.scripts.start, `node ${SERVICE_NODE_FLAGS.join(' ')} src/start.mjs`);
  const dockerfile = readFileSync(path.join(projectRoot, 'Dockerfile'), 'utf8');
  const command = ['node', ...SERVICE_NODE_FLAGS, 'src/start.mjs'].map((word) => JSON.stringify(word)).join(', ');
  t.ok(dockerfile.includes(`\nCMD [${command}]\n`), 'the Dockerfile starts the service the same way');
});
