/**
 * The typed client as the package an application installs: it is built (scripts/build-sdk.ts) and
 * packed with `npm pack`, its tarball is checked, and it is installed into two fresh projects outside
 * the repository, plain JavaScript and strict TypeScript (compiled with tsc; any type error fails).
 * Each runs its example of sdk/examples against the service listening on loopback, with a real SMTP
 * capture from which the test reads the emailed code and hands it to the example on standard input:
 * sign-up, verification, the user directory as an administrator, embeddings (and, in TypeScript,
 * a realtime round trip with socket.io-client typed by the package). Every response the examples
 * get is checked against openapi.yaml (buildAuthTestApp).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { buildAuthTestApp, newEmail, PASSWORD } from './helpers/auth.ts';

// Building, packing, two installs, a strict compile and two runs: minutes on a busy 2-core machine.
t.setTimeout(15 * 60_000);

const root = path.resolve(import.meta.dirname, '..');
const PACKAGE_NAME = 'accounts-embeddings-realtime-client';
const STEP_TIMEOUT_MS = 5 * 60_000;
const MAIL_TIMEOUT_MS = 60_000;

interface Manifest {
  name: string;
  version: string;
  type?: string;
  sideEffects?: boolean;
  engines?: Record<string, string>;
  exports?: Record<string, unknown>;
  dependencies?: Record<string, string>;
}

const readJson = <T>(file: string) => JSON.parse(readFileSync(file, 'utf8')) as T;
const service = readJson<Manifest>(path.join(root, 'package.json'));
const installedVersion = (name: string) =>
  readJson<Manifest>(path.join(root, 'node_modules', name, 'package.json')).version;

/** The environment of the processes the test starts, without what npm and tap put in its own. */
function childEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  const keep = /^npm_config_(cache|registry|userconfig)$/i;
  const drop = /^(npm_|_?tap|node_options$|node_v8_coverage$|node_test_context$|init_cwd$)/i;
  for (const [key, value] of Object.entries(process.env)) {
    if (keep.test(key) || !drop.test(key)) env[key] = value;
  }
  // npm, and anything it starts, runs on this Node.
  env.PATH = [path.dirname(process.execPath), process.env.PATH ?? ''].join(path.delimiter);
  return env;
}

/** npm's command line on this Node: npm-cli.js when it can be found, else `npm` on PATH. */
function npmCommand(): { command: string; prefix: string[] } {
  const candidates = [process.env.npm_execpath];
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (dir !== '' && existsSync(path.join(dir, 'npm'))) candidates.push(realpathSync(path.join(dir, 'npm')));
  }
  const cli = candidates.find((file) => file?.endsWith('npm-cli.js') && existsSync(file));
  return cli === undefined ? { command: 'npm', prefix: [] } : { command: process.execPath, prefix: [cli] };
}

interface Finished {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

const running = new Set<ChildProcess>();
t.teardown(() => {
  for (const child of running) child.kill('SIGKILL');
});

/**
 * Runs a process to its end (killed after STEP_TIMEOUT_MS). `onStdoutLine` sees each line of its
 * standard output as it comes, with its stdin to answer on.
 */
function run(
  command: string,
  args: string[],
  options: { cwd: string; env?: NodeJS.ProcessEnv; onStdoutLine?: (line: string, child: ChildProcess) => void },
): Promise<Finished> {
  const started = Date.now();
  const child = spawn(command, args, { cwd: options.cwd, env: options.env ?? childEnv(), stdio: 'pipe' });
  running.add(child);
  let stdout = '';
  let stderr = '';
  let pending = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk;
    pending += chunk;
    for (let eol = pending.indexOf('\n'); eol !== -1; eol = pending.indexOf('\n')) {
      const line = pending.slice(0, eol);
      pending = pending.slice(eol + 1);
      options.onStdoutLine?.(line, child);
    }
  });
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  child.stdin.on('error', () => {}); // the process may exit before reading its input
  if (options.onStdoutLine === undefined) child.stdin.end();
  const timer = setTimeout(() => {
    stderr += `\n[killed after ${STEP_TIMEOUT_MS} ms]`;
    child.kill('SIGKILL');
  }, STEP_TIMEOUT_MS);
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      running.delete(child);
      resolve({ code, stdout, stderr, ms: Date.now() - started });
    });
  });
}

const npm = npmCommand();
const npmRun = (args: string[], cwd: string) => run(npm.command, [...npm.prefix, ...args], { cwd });
const INSTALL_FLAGS = ['--prefer-offline', '--no-audit', '--no-fund', '--no-update-notifier', '--loglevel=error'];

/** Fails the test with the process's output unless it exited 0. */
function succeeded(t: Test, what: string, result: Finished): boolean {
  const ok = result.code === 0;
  t.ok(ok, `${what} (${result.ms} ms)`, ok ? {} : { code: result.code, stdout: result.stdout, stderr: result.stderr });
  return ok;
}

const work = mkdtempSync(path.join(os.tmpdir(), 'sdk-package-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

const admin = { email: 'sdk-package-admin@example.com', password: 'sdk-package-admin-password' };
const { app, smtp } = await buildAuthTestApp(t, {
  label: 'sdk-package',
  env: { ADMIN_EMAIL: admin.email, ADMIN_PASSWORD: admin.password },
});
await app.listen({ port: 0, host: '127.0.0.1' });
const baseUrl = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;

interface Step {
  step: string;
  [key: string]: unknown;
}

/**
 * Runs an example of the SDK in `project` for a new address: answers its question for the code with
 * the one the service emailed, and returns the JSON lines it printed, by step.
 */
async function runExample(t: Test, project: string, script: string, email: string) {
  const steps = new Map<string, Step>();
  const env = {
    ...childEnv(),
    SERVICE_URL: baseUrl,
    EMAIL: email,
    PASSWORD,
    ADMIN_EMAIL: admin.email,
    ADMIN_PASSWORD: admin.password,
  };
  const result = await run(process.execPath, [script], {
    cwd: project,
    env,
    onStdoutLine: (line, child) => {
      let parsed: Step;
      try {
        parsed = JSON.parse(line) as Step;
      } catch {
        t.fail('the example prints JSON lines only', { line });
        return;
      }
      steps.set(parsed.step, parsed);
      if (parsed.step !== 'signUp') return;
      smtp.waitFor(email, 1, MAIL_TIMEOUT_MS).then(
        (mails) => child.stdin?.end(`${mails[0]?.code ?? ''}\n`),
        (error: unknown) => {
          t.fail('the verification email arrives', { error: String(error) });
          child.stdin?.end('\n');
        },
      );
    },
  });
  succeeded(t, `${script} ran every step`, result);
  return steps;
}

/** The checks both examples share: sign-up -> verification -> user directory -> embeddings -> logout. */
function checkCommonSteps(t: Test, steps: Map<string, Step>, email: string) {
  t.match(steps.get('signUp'), { requireEmailVerification: true }, 'signed up (202)');
  t.match(
    steps.get('verifyEmail'),
    { email, emailVerified: true, userId: String, accessToken: true, refreshToken: true },
    'verified with the emailed code: a mobile session whose tokens the client keeps',
  );
  t.match(steps.get('listUsersAsUser'), { status: 403, error: 'FORBIDDEN' }, 'the directory refuses a user');
  t.same(
    steps.get('listUsers'),
    { step: 'listUsers', total: 1, users: [{ email, emailVerified: true }] },
    'an administrator finds the new, verified user',
  );
  const embeddings = steps.get('embeddings');
  t.match(embeddings, { model: 'local/lexical-v1', count: 2, dimensions: 8 }, 'two embeddings of 8 dimensions');
  const usage = embeddings?.usage as { promptTokens: number; completionTokens: number; totalTokens: number };
  t.ok(usage?.promptTokens > 0 && usage.completionTokens === 0 && usage.totalTokens === usage.promptTokens, 'usage');
  t.same(steps.get('logout'), { step: 'logout', status: 204, accessToken: null }, 'logged out');
}

interface Packed {
  filename: string;
  files: { path: string }[];
}

/** Builds the package into a copy of sdk/ (the checkout's sdk/dist is left alone) and packs it. */
async function buildAndPack(t: Test): Promise<Packed | undefined> {
  const staged = path.join(work, 'package');
  const build = path.join(root, 'scripts', 'build-sdk.ts');
  const built = await run(process.execPath, [build, '--package-dir', staged], { cwd: root });
  if (!succeeded(t, 'scripts/build-sdk.ts builds the package', built)) return undefined;
  const packed = await npmRun(['pack', '--json', '--pack-destination', work], staged);
  if (!succeeded(t, 'npm pack', packed)) return undefined;
  const [pack] = JSON.parse(packed.stdout) as Packed[];
  t.ok(pack, 'npm pack describes the package it packed', { stdout: packed.stdout });
  return pack;
}

t.test('`npm pack ./sdk` in the checkout builds the package first (its prepack)', async (t) => {
  rmSync(path.join(root, 'sdk', 'dist'), { recursive: true, force: true }); // build output, ignored by git
  const packed = await npmRun(['pack', '--dry-run', '--json', './sdk'], root);
  if (!succeeded(t, 'npm pack --dry-run ./sdk', packed)) return;
  // The build's own lines come first on stdout, then npm's JSON.
  const [pack] = JSON.parse(packed.stdout.slice(packed.stdout.indexOf('\n[') + 1)) as Packed[];
  const files = pack?.files.map((file) => file.path) ?? [];
  t.ok(files.includes('dist/src/client/index.js'), 'the tarball would hold the built client');
  t.ok(existsSync(path.join(root, 'sdk', 'dist', 'src', 'client', 'index.js')), 'built into sdk/dist');
  t.match(packed.stdout, /^accounts-embeddings-realtime-client@[\d.]+: \d+ files/m, 'by scripts/build-sdk.ts');
});

t.test('the client SDK as an installable package', async (t) => {
  const pack = await buildAndPack(t);
  if (pack === undefined) return;
  const tarball = path.join(work, pack.filename);

  t.test('the tarball holds the built modules, their declarations, the README and package.json only', async (t) => {
    const files = pack.files.map((file) => file.path).sort();
    t.same(
      files.filter((file) => !/^dist\/.+\.(js|d\.ts)$/.test(file) && file !== 'README.md' && file !== 'package.json'),
      [],
      'nothing else: no sources, tests, examples or compiler settings',
    );
    t.same(
      files.filter((file) => file.endsWith('.ts') && !file.endsWith('.d.ts')),
      [],
      'no TypeScript source',
    );
    for (const file of [
      'README.md',
      'package.json',
      'dist/src/client/index.js',
      'dist/src/client/index.d.ts',
      'dist/src/client/realtime.d.ts',
      'dist/generated/openapi.d.ts',
      'dist/generated/asyncapi.d.ts',
    ]) {
      t.ok(files.includes(file), file);
    }
    t.equal(pack.filename, `${PACKAGE_NAME}-${service.version}.tgz`, 'named and versioned as the service');
  });

  t.test('plain JavaScript (ES modules) installs the tarball and runs the flow', async (t) => {
    const project = path.join(work, 'javascript');
    mkdirSync(project);
    writeFileSync(
      path.join(project, 'package.json'),
      JSON.stringify({ name: 'sdk-javascript-consumer', version: '1.0.0', private: true, type: 'module' }),
    );
    writeFileSync(path.join(project, 'quickstart.js'), readFileSync(path.join(root, 'sdk/examples/quickstart.mjs')));
    if (!succeeded(t, 'npm install <tarball>', await npmRun(['install', tarball, ...INSTALL_FLAGS], project))) return;

    const manifest = readJson<Manifest>(path.join(project, 'node_modules', PACKAGE_NAME, 'package.json'));
    t.match(
      manifest,
      {
        name: PACKAGE_NAME,
        version: service.version,
        type: 'module',
        sideEffects: false,
        engines: { node: '^22.19.0 || >=24.11.0' },
        exports: { '.': { types: './dist/src/client/index.d.ts', default: './dist/src/client/index.js' } },
      },
      'the installed manifest: the service’s version, ES module, exports with types',
    );
    t.equal(manifest.engines?.node, service.engines?.node, 'the service’s engines (Node ^22.19.0 || >=24.11.0)');
    for (const [name, range] of Object.entries(manifest.dependencies ?? {})) {
      t.equal(range, service.dependencies?.[name], `dependency ${name} in the service’s range`);
    }
    t.ok(existsSync(path.join(project, 'node_modules', 'openapi-fetch')), 'its dependency is installed with it');

    const email = newEmail('sdk-js');
    checkCommonSteps(t, await runExample(t, project, 'quickstart.js', email), email);
  });

  t.test('strict TypeScript installs the tarball, compiles against its declarations and runs the flow', async (t) => {
    const project = path.join(work, 'typescript');
    mkdirSync(project);
    writeFileSync(
      path.join(project, 'package.json'),
      JSON.stringify({ name: 'sdk-typescript-consumer', version: '1.0.0', private: true, type: 'module' }),
    );
    writeFileSync(
      path.join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2023',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          noUncheckedIndexedAccess: true,
          exactOptionalPropertyTypes: true,
          skipLibCheck: false,
          noEmitOnError: true,
          types: ['node'],
          rootDir: '.',
          outDir: 'build',
        },
        files: ['quickstart.ts', 'contract-types.ts'],
      }),
    );
    writeFileSync(path.join(project, 'quickstart.ts'), readFileSync(path.join(root, 'sdk/examples/quickstart.ts')));
    // The declarations type the calls: each of these must be a compile error (else @ts-expect-error is one).
    writeFileSync(
      path.join(project, 'contract-types.ts'),
      [
        `import { createClient, type RealtimeClientEvents } from '${PACKAGE_NAME}';`,
        `const api = createClient({ baseUrl: 'http://127.0.0.1:1' });`,
        '// @ts-expect-error: input is required',
        `export const missingInput = () => api.POST('/api/ai/embeddings', { body: { model: 'local/lexical-v1' } });`,
        '// @ts-expect-error: not a path of the contract',
        `export const unknownPath = () => api.GET('/api/nowhere');`,
        '// @ts-expect-error: clientType is web, mobile or desktop',
        `export const tablet = () => createClient({ baseUrl: 'http://127.0.0.1:1', clientType: 'tablet' });`,
        `export const subscribe: Parameters<RealtimeClientEvents['realtime:subscribe']>[0] = { channel: 'chat:1' };`,
        '// @ts-expect-error: a publish names its event',
        `export const publish: Parameters<RealtimeClientEvents['realtime:publish']>[0] = { channel: 'chat:1', payload: {} };`,
        '',
      ].join('\n'),
    );
    const dependencies = [
      tarball,
      `socket.io-client@${installedVersion('socket.io-client')}`,
      `@types/node@${installedVersion('@types/node')}`,
    ];
    const installed = await npmRun(['install', ...dependencies, ...INSTALL_FLAGS], project);
    if (!succeeded(t, 'npm install <tarball> socket.io-client @types/node', installed)) return;

    const tsc = path.join(root, 'node_modules', '.bin', 'tsc');
    const compiled = await run(process.execPath, [tsc, '-p', project], { cwd: project });
    if (!succeeded(t, 'tsc compiles it with no error (strict, noUncheckedIndexedAccess, exactOptional…)', compiled)) {
      return;
    }

    const email = newEmail('sdk-ts');
    const steps = await runExample(t, project, path.join('build', 'quickstart.js'), email);
    checkCommonSteps(t, steps, email);
    const userId = (steps.get('verifyEmail') as { userId?: unknown } | undefined)?.userId;
    t.match(
      steps.get('realtime'),
      {
        subscribed: 'sdk-example:1',
        messageId: String,
        received: { channel: 'sdk-example:1', text: 'hello from the SDK', senderId: userId },
      },
      'subscribed, published, and received its own message over the socket',
    );
  });
});
