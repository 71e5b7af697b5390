import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';

export const projectRoot = path.resolve(import.meta.dirname, '..', '..');

/** A free TCP port on loopback. */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

export interface RunningService {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

/** Compiles the service into dist/ (incremental: about 2 s when nothing changed), as `npm start` does. */
export function buildService(): void {
  execFileSync(
    process.execPath,
    [path.join(projectRoot, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.build.json'],
    {
      cwd: projectRoot,
      stdio: 'inherit',
    },
  );
}

/**
 * The V8 flags the service runs with (`npm start`, the Dockerfile): WebAssembly compiled by the baseline
 * compiler only (the optimising tier cost PGlite's Postgres about 40 MB of resident memory and CPU at start,
 * for queries about 5% faster), and the young generation of Node 22 (Node 24's doubled one held about
 * 30 MB more at idle). V8 takes them only on the command line: set at run time, Node 24 ignores them.
 */
export const SERVICE_NODE_FLAGS = ['--liftoff-only', '--max-semi-space-size=16'];

/** The compiled server (see buildService), as production runs it. */
export const BUILT_SERVER = 'dist/src/server.js';

/**
 * Starts `src/server.ts` (or another script) as a child process with the given environment on top
 * of a minimal one. Node runs TypeScript directly (type stripping), as `npm start` does; the service
 * itself runs with SERVICE_NODE_FLAGS.
 */
export function startService(env: Record<string, string>, script = 'src/server.ts'): RunningService {
  const flags = script === 'src/server.ts' || script === BUILT_SERVER ? SERVICE_NODE_FLAGS : [];
  const child = spawn(process.execPath, [...flags, script], {
    cwd: projectRoot,
    env: { PATH: process.env.PATH ?? '', NODE_ENV: 'test', LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout?.on('data', (d) => {
    output += String(d);
  });
  child.stderr?.on('data', (d) => {
    output += String(d);
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, output: () => output, exited };
}

/** Polls a URL until it answers 200; returns the milliseconds it took, or throws after `timeoutMs`. */
export async function waitFor200(url: string, timeoutMs: number, startedAt = Date.now()): Promise<number> {
  while (Date.now() - startedAt < timeoutMs) {
    try {
      const res = await fetch(url);
      if (res.status === 200) return Date.now() - startedAt;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`${url} did not answer 200 within ${timeoutMs} ms`);
}

/** Resident memory of a process in MiB, from /proc (Linux). */
export function residentMiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? Number.NaN);
  return kb / 1024;
}
