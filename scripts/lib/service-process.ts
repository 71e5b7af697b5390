import { type ChildProcess, spawn } from 'node:child_process';
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

/** How `npm start` runs the service: Node's flags and the script, from package.json's `start` script. */
export interface StartCommand {
  flags: string[];
  script: string;
}

/**
 * Reads a `start` script of the form `node [--flag …] <script>.ts` (or `.mjs`) (nothing else: no variables, no
 * quoting, no second command); throws on anything else, so that whatever runs the service "as
 * `npm start` does" fails loudly instead of drifting from it.
 */
export function parseStartScript(start: string): StartCommand {
  const [node, ...rest] = start.trim().split(/\s+/);
  const script = rest.pop();
  const flags = rest;
  if (
    node !== 'node' ||
    script === undefined ||
    !/^[\w./-]+\.(ts|mjs)$/.test(script) ||
    !flags.every((f) => /^--[\w-]+(=[\w.,-]+)?$/.test(f))
  ) {
    throw new Error(
      `package.json's start script is not "node [--flag ...] <script>.ts|.mjs": ${JSON.stringify(start)}`,
    );
  }
  return { flags, script };
}

/** `npm start`, as package.json says (see parseStartScript). */
export const NPM_START: StartCommand = parseStartScript(
  (JSON.parse(readFileSync(path.join(projectRoot, 'package.json'), 'utf8')) as { scripts: { start: string } }).scripts
    .start,
);

/**
 * The V8 flags the service runs with (`npm start`, the Dockerfile), read from package.json's `start`
 * script: WebAssembly compiled by the baseline compiler only (the optimising tier cost PGlite's
 * Postgres about 40 MB of resident memory and CPU at start, for queries about 5% faster), a young
 * generation of 4 MB semi-spaces (16 held 20 MiB more at idle, for no CPU measured under load) and 2
 * background threads for V8 (each kept a malloc arena). V8 takes them only on the command line: set
 * at run time, Node 24 ignores them. See docs/performance.md, Start-up and memory.
 */
export const SERVICE_NODE_FLAGS = NPM_START.flags;

/** `npm start`'s command line without npm: this Node, the flags and the script (`src/start.mjs`, which imports `src/server.ts`; no build step). */
export const SERVICE_COMMAND: readonly string[] = [process.execPath, ...NPM_START.flags, NPM_START.script];

/**
 * Starts the service as `npm start` does (NPM_START: its flags, `src/start.mjs`, no build step), or
 * another script without them, as a child process with the given environment on top of a minimal
 * one. Node runs TypeScript directly (type stripping).
 */
export function startService(env: Record<string, string>, script = NPM_START.script): RunningService {
  const flags = script === NPM_START.script ? NPM_START.flags : [];
  return spawnCapturing(process.execPath, [...flags, script], {
    cwd: projectRoot,
    env: { PATH: process.env.PATH ?? '', NODE_ENV: 'test', LOG_LEVEL: 'warn', ...env },
  });
}

/** Spawns a command with its standard output and error kept together (`output()`), and its exit awaited. */
export function spawnCapturing(
  file: string,
  args: readonly string[],
  options: { cwd: string; env: Record<string, string>; detached?: boolean },
): RunningService {
  const child = spawn(file, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const keep = (d: Buffer) => {
    output += String(d);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
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
