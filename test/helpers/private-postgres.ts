import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import { appendFileSync, chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

/**
 * A PostgreSQL cluster of a test's own, made with the machine's PostgreSQL binaries in a temporary
 * directory, so that a test may stop and start it without disturbing the shared server that other
 * test files use. Trust authentication, 127.0.0.1 only, fsync off (nothing here must survive the
 * machine). PostgreSQL refuses to run as root: as root, initdb and pg_ctl run as the `postgres` user
 * (runuser) in a directory that user owns.
 */
export interface PrivatePostgres {
  /** postgres://postgres@127.0.0.1:<port>/postgres */
  readonly url: string;
  readonly port: number;
  /** The temporary directory: data/, the server log and the socket. */
  readonly dir: string;
  readonly logFile: string;
  /** Milliseconds spent in initdb and in the first start. */
  readonly timings: { initdbMs: number; firstStartMs: number };
  /** The URL of another database of this cluster. */
  urlOf(database: string): string;
  /** Starts the server and waits until it accepts connections; resolves with the milliseconds it took. */
  start(): Promise<number>;
  /** Stops the server (`fast`: sessions are ended cleanly; `immediate`: no shutdown checkpoint, recovery at next start). */
  stop(mode: 'fast' | 'immediate'): Promise<number>;
  /**
   * Suspends every process of the server (SIGSTOP): connections stay open and nothing answers, as
   * with a hung or unreachable host. thaw() resumes them; destroy() does too.
   */
  freeze(): void;
  thaw(): void;
  readonly running: boolean;
  /** A streaming replica only: ends recovery, so that it takes writes (pg_ctl promote); resolves with the milliseconds it took. */
  promote(): Promise<number>;
  /** Stops the server if it runs and removes the directory (idempotent). */
  destroy(): Promise<void>;
}

export interface PrivatePostgresOptions {
  /**
   * Make a streaming replica of this (running) cluster instead of a new one: `pg_basebackup -R`,
   * hot standby, its walreceiver named `replica` (for `synchronous_standby_names`).
   */
  replicaOf?: PrivatePostgres;
}

interface Teardown {
  teardown(fn: () => unknown): void;
}

const run = promisify(execFile);
const POSTGRESQL_LIB = '/usr/lib/postgresql';

/** The bin directory of the newest PostgreSQL installed under /usr/lib/postgresql, if any has initdb and pg_ctl. */
export function findPostgresBinaries(): string | undefined {
  if (!existsSync(POSTGRESQL_LIB)) return undefined;
  const versions = readdirSync(POSTGRESQL_LIB)
    .filter((v) => /^\d+(\.\d+)?$/.test(v))
    .sort((a, b) => Number(b) - Number(a));
  for (const version of versions) {
    const bin = path.join(POSTGRESQL_LIB, version, 'bin');
    if (existsSync(path.join(bin, 'initdb')) && existsSync(path.join(bin, 'pg_ctl'))) return bin;
  }
  return undefined;
}

const runningAsRoot = () => typeof process.getuid === 'function' && process.getuid() === 0;

/** Why a private cluster cannot be made on this machine, or undefined when it can. */
export function privatePostgresUnavailable(): string | undefined {
  if (findPostgresBinaries() === undefined) return `no initdb/pg_ctl under ${POSTGRESQL_LIB}/*/bin`;
  if (runningAsRoot()) {
    try {
      execFileSync('id', ['-u', 'postgres'], { stdio: 'ignore' });
    } catch {
      return 'running as root and there is no postgres user to run PostgreSQL as';
    }
  }
  return undefined;
}

/** A port that nothing listens on, below the ephemeral range so that no outgoing connection takes it meanwhile. */
async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    const free = await new Promise<boolean>((resolve) => {
      const server = net.createServer();
      server.once('error', () => resolve(false));
      server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
    });
    if (free) return port;
  }
  throw new Error('no free port found for a private PostgreSQL');
}

const shellQuote = (s: string) => `'${s.replaceAll("'", "'\\''")}'`;

/** The postmaster's pid and those of its children (Linux /proc). */
function serverProcesses(dataDir: string): number[] {
  const postmaster = Number(readFileSync(path.join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  const children: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // pid (comm) state ppid ...: comm may hold spaces and parentheses, so read after the last ')'.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === postmaster) children.push(Number(entry));
    } catch {
      // the process ended meanwhile
    }
  }
  return [postmaster, ...children];
}

/** Creates and starts a private cluster; it is stopped and removed when `t` ends, or at the latest when the process exits. */
export async function createPrivatePostgres(
  t: Teardown,
  options: PrivatePostgresOptions = {},
): Promise<PrivatePostgres> {
  const bin = findPostgresBinaries();
  if (bin === undefined) throw new Error(`no PostgreSQL binaries (initdb, pg_ctl) under ${POSTGRESQL_LIB}/*/bin`);
  const asRoot = runningAsRoot();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'private-pg-'));
  const dataDir = path.join(dir, 'data');
  const logFile = path.join(dir, 'postgres.log');
  if (asRoot) {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    chownSync(dir, uid, gid);
  }
  /** The command line running a PostgreSQL program, as the postgres user when we are root. */
  const command = (program: string, args: string[]): [string, string[]] =>
    asRoot ? ['runuser', ['-u', 'postgres', '--', path.join(bin, program), ...args]] : [path.join(bin, program), args];
  const pgCtl = async (args: string[]) => {
    const [file, argv] = command('pg_ctl', ['-D', dataDir, ...args]);
    try {
      await run(file, argv, { timeout: 60_000 });
    } catch (err) {
      const e = err as Error & { stderr?: string; stdout?: string };
      throw new Error(`pg_ctl ${args.join(' ')} failed: ${e.stderr || e.stdout || e.message}`);
    }
  };
  const stopArgs = (mode: 'fast' | 'immediate') => ['-m', mode, '-w', '-t', '30', 'stop'];

  let running = false;
  let destroyed = false;
  let frozen: number[] = [];
  const signalAll = (pids: number[], signal: NodeJS.Signals) => {
    for (const pid of pids) {
      try {
        process.kill(pid, signal);
      } catch {
        // already gone
      }
    }
  };
  const thaw = () => {
    signalAll(frozen, 'SIGCONT');
    frozen = [];
  };

  // Last resorts when the test's teardown never runs: the process's exit, and a watchdog shell that
  // outlives a killed process (SIGKILL, a tap timeout) and then stops the cluster and removes it.
  const stopNow = () => {
    if (destroyed) return;
    destroyed = true;
    thaw();
    try {
      if (running) {
        const [file, argv] = command('pg_ctl', ['-D', dataDir, ...stopArgs('immediate')]);
        execFileSync(file, argv, { stdio: 'ignore', timeout: 30_000 });
      }
    } catch {
      // already stopped
    }
    rmSync(dir, { recursive: true, force: true });
  };
  process.on('exit', stopNow);
  const [stopFile, stopArgv] = command('pg_ctl', ['-D', dataDir, ...stopArgs('immediate')]);
  const pidFile = shellQuote(path.join(dataDir, 'postmaster.pid'));
  // A frozen server (freeze()) is resumed first, or it could not act on the stop.
  const watchdogScript =
    `while kill -0 ${process.pid} 2>/dev/null; do sleep 1; done; ` +
    `if [ -f ${pidFile} ]; then pm=$(head -n 1 ${pidFile}); kill -CONT "$pm" 2>/dev/null; ` +
    `for p in /proc/[0-9]*; do [ "$(cut -d ' ' -f 4 "$p/stat" 2>/dev/null)" = "$pm" ] && kill -CONT "\${p#/proc/}" 2>/dev/null; done; ` +
    `${[stopFile, ...stopArgv].map(shellQuote).join(' ')}; fi; ` +
    `rm -rf ${shellQuote(dir)}`;
  const watchdog: ChildProcess = spawn('sh', ['-c', watchdogScript], { detached: true, stdio: 'ignore' });
  watchdog.unref();

  const destroy = async () => {
    if (destroyed) return;
    thaw();
    try {
      if (running) await pgCtl(stopArgs('immediate'));
    } catch {
      // stopNow below tries again
    }
    running = false;
    stopNow();
    process.removeListener('exit', stopNow);
    if (watchdog.pid !== undefined && watchdog.exitCode === null) watchdog.kill();
  };
  t.teardown(destroy);

  try {
    let began = performance.now();
    const source = options.replicaOf;
    const [initdb, initdbArgv] =
      source === undefined
        ? command('initdb', [
            '-D',
            dataDir,
            '-U',
            'postgres',
            '--auth=trust',
            '--encoding=UTF8',
            '--locale=C',
            '--no-sync',
          ])
        : // A copy of the running primary that follows it (-R: standby.signal and primary_conninfo).
          command('pg_basebackup', [
            '-h',
            '127.0.0.1',
            '-p',
            String(source.port),
            '-U',
            'postgres',
            '-D',
            dataDir,
            '-R',
            '-X',
            'stream',
            '--checkpoint=fast',
            '--no-sync',
          ]);
    await run(initdb, initdbArgv, { timeout: 60_000 });
    const initdbMs = performance.now() - began;
    // Appended as root the file keeps its owner. Small buffers: a test cluster holds little data.
    appendFileSync(
      path.join(dataDir, 'postgresql.conf'),
      [
        '',
        '# private test cluster (test/helpers/private-postgres.ts)',
        "listen_addresses = '127.0.0.1'",
        `unix_socket_directories = '${dir}'`,
        'fsync = off',
        'full_page_writes = off',
        'shared_buffers = 32MB',
        'max_connections = 100',
        // A primary: streaming replicas may follow it (wal_level replica is the default); a replica
        // answers reads while it replays, and tells the primary which rows its queries still read.
        'max_wal_senders = 5',
        'hot_standby = on',
        'hot_standby_feedback = on',
        ...(source === undefined ? [] : ["cluster_name = 'replica'"]),
        '',
      ].join('\n'),
    );

    let port = 0;
    const start = async () => {
      const t0 = performance.now();
      await pgCtl(['-l', logFile, '-o', `-p ${port}`, '-w', '-t', '30', 'start']);
      running = true;
      return performance.now() - t0;
    };
    // Another process may take the port between the check and the start: try a few.
    let firstStartMs = 0;
    for (let attempt = 1; ; attempt++) {
      port = await freePort();
      began = performance.now();
      try {
        await start();
        firstStartMs = performance.now() - began;
        break;
      } catch (err) {
        if (attempt >= 3) throw err;
      }
    }
    const urlOf = (database: string) => `postgres://postgres@127.0.0.1:${port}/${database}`;
    return {
      url: urlOf('postgres'),
      port,
      dir,
      logFile,
      timings: { initdbMs, firstStartMs },
      urlOf,
      start,
      async stop(mode) {
        const t0 = performance.now();
        await pgCtl(stopArgs(mode));
        running = false;
        return performance.now() - t0;
      },
      async promote() {
        const t0 = performance.now();
        await pgCtl(['-w', '-t', '30', 'promote']);
        return performance.now() - t0;
      },
      freeze() {
        if (!running || frozen.length > 0) return;
        frozen = serverProcesses(dataDir);
        signalAll(frozen, 'SIGSTOP');
      },
      thaw,
      get running() {
        return running;
      },
      destroy,
    };
  } catch (err) {
    await destroy();
    throw err;
  }
}
