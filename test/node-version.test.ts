// An unsupported Node gets one line naming the fix, at once: from `npm install` (engine-strict in
// .npmrc, before anything is installed) and from `npm test` and `npm start` (scripts/check-node.cjs).
// Node 20 comes from the npm registry through scripts/use-node.sh, as a user would get Node 24.
import { execFile } from 'node:child_process';
import { copyFile, mkdir, mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import t from 'tap';

const root = path.resolve(import.meta.dirname, '..');
const OLD_NODE = '20.20.2';
const { satisfies } = createRequire(import.meta.url)('../scripts/check-node.cjs') as {
  satisfies: (version: string, range: string) => boolean;
};
const engines = JSON.parse(await readFile(path.join(root, 'package.json'), 'utf8')).engines as {
  node: string;
  fix: string;
};

interface Run {
  code: number;
  stdout: string;
  stderr: string;
  ms: number;
}

/** Runs `command` in bash with Node `version` first on PATH (installed into .cache/node on first use). */
function withNode(version: string, command: string, cwd: string): Promise<Run> {
  const started = performance.now();
  return new Promise((resolve) => {
    execFile(
      'bash',
      ['-c', `. "${root}/scripts/use-node.sh" ${version} 2>/dev/null && cd "${cwd}" && ${command}`],
      { env: { ...process.env, npm_config_update_notifier: 'false', CONTRACT_COVERAGE: '' }, timeout: 120_000 },
      (error, stdout, stderr) =>
        resolve({
          code: error ? (typeof error.code === 'number' ? error.code : 1) : 0,
          stdout,
          stderr,
          ms: performance.now() - started,
        }),
    );
  });
}

t.test('the engines range, as scripts/check-node.cjs reads it', async (t) => {
  t.equal(engines.node, '^22.19.0 || >=24.11.0');
  for (const [version, ok] of [
    ['20.20.2', false],
    ['22.18.0', false],
    ['22.19.0', true],
    ['22.23.3', true],
    ['23.11.0', false],
    ['24.10.0', false],
    ['24.11.0', true],
    ['24.21.0', true],
    ['25.0.0', true],
  ] as const) {
    t.equal(satisfies(version, engines.node), ok, `${version}: ${ok ? 'supported' : 'refused'}`);
  }
  t.throws(
    () => satisfies('24.0.0', '~24.1.0'),
    /unsupported range "~24.1.0"/,
    'a range form it cannot read is an error',
  );
});

t.test(`Node ${OLD_NODE}: npm install, npm test and npm start stop at once with the fix`, async (t) => {
  // A copy of what npm reads, without node_modules: as a fresh clone.
  const dir = await mkdtemp(path.join(tmpdir(), 'node-version-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  await mkdir(path.join(dir, 'scripts'));
  for (const file of ['package.json', 'package-lock.json', '.npmrc', 'scripts/check-node.cjs']) {
    await copyFile(path.join(root, file), path.join(dir, file));
  }
  const fix = '. scripts/use-node.sh';

  const install = await withNode(OLD_NODE, 'node --version && npm install --no-audit --no-fund', dir);
  t.equal(install.stdout.trim().split('\n')[0], `v${OLD_NODE}`, `npm ran on Node ${OLD_NODE}`);
  t.not(install.code, 0, 'npm install fails');
  t.ok(install.ms < 15_000, `within 15 s (${Math.round(install.ms)} ms)`);
  t.match(install.stderr, /EBADENGINE/);
  t.equal(install.stderr.split('\n').filter((l) => l.includes(fix)).length, 1, 'one line names the fix');
  await t.rejects(stat(path.join(dir, 'node_modules')), { code: 'ENOENT' }, 'nothing was installed');

  for (const script of ['test', 'start']) {
    const run = await withNode(OLD_NODE, `npm ${script}`, dir);
    t.equal(run.code, 1, `npm ${script} fails`);
    const lines = run.stderr.split('\n').filter((l) => l.trim() !== '');
    t.same(
      lines.filter((l) => !l.startsWith('npm ')),
      [`Node ${OLD_NODE} cannot run this project (it needs ${engines.node}): ${engines.fix}`],
      `npm ${script}: one line, naming the fix`,
    );
    t.notMatch(run.stderr + run.stdout, /\n\s+at /, 'no stack trace');
  }
});

t.test('the supported Node: the check passes silently', async (t) => {
  const run = await withNode('', 'node scripts/check-node.cjs', root);
  t.same([run.code, run.stdout, run.stderr], [0, '', ''], `Node ${process.versions.node}`);
});
