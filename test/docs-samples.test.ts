/**
 * Every code sample of README.md, docs/*.md and the SDK package's README (sdk/README.md) runs against
 * the real service, so the docs cannot drift.
 *
 * The service is started once as a child process (as `npm start` does: `node <its V8 flags> src/start.mjs`) on a free port,
 * on `memory://` or, with TEST_DATABASE_URL, on a fresh PostgreSQL database of its own, without
 * SMTP_URL (so every email is written to its log), with the variables of the README's start command
 * (the block after `<!-- sample: service -->`). Per-IP rate limits are raised: every sample comes from
 * 127.0.0.1. The files run in the order of docs/README.md's index, README.md first and sdk/README.md
 * last, each block in its own subtest named `<file>:<line>`, in the order it appears.
 *
 * Conventions of the samples (docs/development.md says the same for writers):
 *
 * - Fences `sh`/`bash`/`shell` run with bash, `ts` with node (types stripped) from a file inside the
 *   repository (so `openai`, `@insforge/sdk` and `socket.io-client` resolve; the SDK's package name
 *   `accounts-embeddings-realtime-client` resolves to `src/client/index.ts`, which it is built from).
 *   `text` fences are illustrations (a layout, a URL shape) and are not run. Any other fence must be
 *   preceded by `<!-- sample: not run (reason) -->`, which is also how a runnable block is excused.
 * - `localhost:7130` and `127.0.0.1:7130` become the port of the service under test.
 * - The shell blocks of all files are one reader's shell session: variables set in one block (and
 *   exported ones) are there in the next. TypeScript blocks see them as environment variables
 *   (`process.env.ACCESS_TOKEN`).
 * - A comment right after a command that starts with `{`, `[`, `HTTP/` or a 3-digit status shows the
 *   command's answer: `# 201 {"id":"…",…}`. The status, when shown, must be the status of the
 *   command's last HTTP exchange (none shown: any 2xx); the body must match exactly, where `…` matches
 *   anything. Comment lines that start with two or more spaces continue the line before them. A shown
 *   `HTTP/1.1 …` answer (from `curl -i`) is a list of lines, one per comment line, each of which must be
 *   found in the answer, in order.
 * - Values a reader gets elsewhere are written as an assignment with a comment saying where from, which
 *   the runner fills in:
 *     `CODE=123456   # the code from /dev/inbox`          the 6-digit code of the email sent since the last request
 *     `TOKEN=4f1e…   # the link token from /dev/inbox`    the 64-hex link token of that email
 *     `ACCESS_TOKEN=eyJ…   # accessToken from the answer above`   a field (dotted path) of the last answer
 *   and in TypeScript a string literal on a line ending in `// the code from /dev/inbox` (or
 *   `link token`) is replaced by the code read at that moment.
 * - `# the service logs: <message>` right after a command: a line of the service's log written after
 *   the command has that message (`…` matches anything), within 3 s.
 * - `sql` blocks run with psql (ON_ERROR_STOP) on the service's database: PostgreSQL's, or the
 *   embedded one through PGLITE_SOCKET_PORT, which the runner sets.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { freePort, NPM_START, SERVICE_NODE_FLAGS, waitFor200 } from '../scripts/lib/service-process.ts';
import { createTestDatabase, usingPostgres } from './helpers/database.ts';
import {
  type Block,
  compare,
  extractBlocks,
  ILLUSTRATIONS,
  isRunnable,
  isShell,
  isSql,
  isTypeScript,
  loggedAfter,
  serviceEnv,
  shellScript,
  typeScriptModule,
} from './helpers/docs-samples.ts';

const root = path.resolve(import.meta.dirname, '..');
const helper = path.join(root, 'test/helpers/docs-samples.ts');

/** README.md first, then the docs in the order of their index, then the SDK package's README. */
function markdownFiles(): string[] {
  const index = readFileSync(path.join(root, 'docs/README.md'), 'utf8');
  const listed = [...index.matchAll(/\]\(\.?\/?([\w-]+\.md)\)/g)].map((m) => `docs/${m[1]}`);
  const all = new Set(['README.md', 'docs/README.md', ...listed]);
  for (const f of spawnSync('ls', ['docs'], { cwd: root, encoding: 'utf8' }).stdout.split('\n')) {
    if (f.endsWith('.md')) all.add(`docs/${f}`);
  }
  all.add('sdk/README.md');
  return [...all].filter((f) => existsSync(path.join(root, f)));
}

const blocks: Block[] = markdownFiles().flatMap((f) => extractBlocks(f, readFileSync(path.join(root, f), 'utf8')));

t.test('every fenced block is runnable, an illustration, or an explicit exception', async (t) => {
  for (const b of blocks) {
    const ok = isRunnable(b) || b.notRun !== undefined || b.service === true || ILLUSTRATIONS.has(b.lang);
    t.ok(ok, `${b.file}:${b.line}: a \`${b.lang || '(no language)'}\` block needs <!-- sample: not run (reason) -->`);
  }
  t.equal(blocks.filter((b) => b.service).length, 1, 'one block starts the service');
});

const service = blocks.find((b) => b.service);
if (!service) throw new Error('no <!-- sample: service --> block');

const work = path.join(root, '.tap', `docs-samples-${process.pid}`);
rmSync(work, { recursive: true, force: true });
mkdirSync(work, { recursive: true });
const logFile = path.join(work, 'service.log');

const db = await createTestDatabase();
const port = await freePort();
// psql reaches the service's database: PostgreSQL directly, the embedded one through PGLITE_SOCKET_PORT.
const psqlPort = usingPostgres ? undefined : await freePort();
const psqlUrl = psqlPort === undefined ? db.url : `postgresql://postgres@127.0.0.1:${psqlPort}/postgres`;
const logFd = openSync(logFile, 'w');
const child: ChildProcess = spawn(process.execPath, [...SERVICE_NODE_FLAGS, NPM_START.script], {
  cwd: root,
  env: {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '',
    NODE_ENV: 'development',
    LOG_LEVEL: 'info',
    ...serviceEnv(service),
    HOST: '127.0.0.1',
    PORT: String(port),
    DATABASE_URL: db.url,
    RATE_LIMIT_SIGN_UP: '1000',
    RATE_LIMIT_SIGN_IN: '1000',
    RATE_LIMIT_VERIFY: '1000',
    RATE_LIMIT_SEND_VERIFICATION: '1000',
    RATE_LIMIT_REFRESH: '1000',
    ...(psqlPort === undefined ? {} : { PGLITE_SOCKET_PORT: String(psqlPort) }),
  },
  stdio: ['ignore', logFd, logFd],
});
closeSync(logFd);
t.teardown(async () => {
  if (child.exitCode === null) {
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
  }
  await db.drop();
  if (!process.env.DOCS_SAMPLES_KEEP) rmSync(work, { recursive: true, force: true });
});
try {
  await waitFor200(`http://127.0.0.1:${port}/api/health`, 30_000);
} catch (err) {
  throw new Error(`${(err as Error).message}\n${readFileSync(logFile, 'utf8')}`);
}

const state = path.join(work, 'state.sh');
const env = {
  PATH: process.env.PATH ?? '',
  HOME: process.env.HOME ?? '',
  DOCS_SERVICE_LOG: logFile,
  DOCS_INBOX: `http://127.0.0.1:${port}/dev/inbox.json`,
  DOCS_MAIL_READ: path.join(work, 'mails-read'),
  DOCS_REQUEST_MARK: path.join(work, 'request-mark'),
};

const prelude = (dir: string) => `set -a
[ -f '${state}' ] && . '${state}'
__D='${dir}'
trap 'export -p >"${state}"' EXIT
set -e
curl() { wc -l <"$DOCS_SERVICE_LOG" >"$DOCS_REQUEST_MARK"; command curl -D "$__D/h" "$@" | tee "$__D/b"; return "\${PIPESTATUS[0]}"; }
__docs_json() { node '${helper}' json "$1" <"$__D/b"; }
__docs_header() { grep -ai "^$1:" "$__D/h" | tail -n 1 | cut -d ' ' -f 2- | tr -d '\r'; }
__docs_mail() { node '${helper}' mail "$1"; }
__docs_logmark() { wc -l <"$DOCS_SERVICE_LOG" >"$__D/logmark.$1"; }
__docs_status() { grep -a '^HTTP/' "$__D/h" | tail -n 1 | cut -d ' ' -f 2 >"$__D/status.$1" || true; }
`;

let n = 0;
// DOCS_SAMPLES_ONLY=<file> runs the blocks of one file (README.md's too, for the session they start).
const only = process.env.DOCS_SAMPLES_ONLY;
for (const b of blocks.filter((b) => isRunnable(b) && (!only || b.file === only || b.file === 'README.md'))) {
  const name = `${b.file}:${b.line}`;
  const dir = path.join(work, `block-${++n}`);
  t.test(name, { timeout: 30_000 }, async (t) => {
    mkdirSync(dir, { recursive: true });
    if (isShell(b)) {
      const { script, checks } = shellScript(b, port);
      writeFileSync(path.join(dir, 'script.sh'), `${prelude(dir)}${script}\n`);
      const run = spawnSync('bash', [path.join(dir, 'script.sh')], {
        cwd: work,
        env,
        encoding: 'utf8',
        timeout: 25_000,
      });
      t.equal(run.status, 0, `${name}: the block exits 0`, { stdout: run.stdout, stderr: run.stderr });
      for (const [i, check] of checks.entries()) {
        if (check.log) {
          const markFile = path.join(dir, `logmark.${check.mark}`);
          if (!existsSync(markFile)) {
            t.fail(`${b.file}:${check.line}: not reached`);
            continue;
          }
          const why = await loggedAfter(
            logFile,
            Number(readFileSync(markFile, 'utf8').trim()),
            check.expected[0] ?? '',
          );
          t.notOk(
            why,
            `${b.file}:${check.line}: the service logs what the docs show`,
            why ? { diagnostic: true, why } : {},
          );
          continue;
        }
        const outFile = path.join(dir, `out.${i}`);
        if (!existsSync(outFile)) {
          t.fail(`${b.file}:${check.line}: not reached`);
          continue;
        }
        const statusFile = path.join(dir, `status.${i}`);
        const status = existsSync(statusFile)
          ? Number(readFileSync(statusFile, 'utf8').trim()) || undefined
          : undefined;
        const why = compare(check, readFileSync(outFile, 'utf8'), status);
        t.notOk(why, `${b.file}:${check.line}: the answer is the one shown`, why ? { diagnostic: true, why } : {});
      }
    } else if (isSql(b)) {
      const file = path.join(dir, 'sample.sql');
      writeFileSync(file, `${b.lines.join('\n')}\n`);
      const run = spawnSync('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-f', file, psqlUrl], {
        cwd: work,
        env: { PATH: process.env.PATH ?? '', PGCONNECT_TIMEOUT: '10' },
        encoding: 'utf8',
        timeout: 25_000,
      });
      t.equal(run.status, 0, `${name}: psql runs it without an error`, { stdout: run.stdout, stderr: run.stderr });
    } else if (isTypeScript(b)) {
      const file = path.join(dir, 'sample.ts');
      writeFileSync(file, typeScriptModule(b, port, helper, path.join(root, 'src/client/index.ts')));
      const run = spawnSync('bash', ['-c', `set -a; [ -f '${state}' ] && . '${state}'; exec node '${file}'`], {
        cwd: work,
        env,
        encoding: 'utf8',
        timeout: 25_000,
      });
      t.equal(run.status, 0, `${name}: the program exits 0`, { stdout: run.stdout, stderr: run.stderr });
    }
  });
}

t.test('the service is still running', async (t) => {
  t.equal(child.exitCode, null, readFileSync(logFile, 'utf8').slice(-2000));
});
