import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  freePort,
  projectRoot,
  type RunningService,
  residentMiB,
  SERVICE_COMMAND,
  spawnCapturing,
  waitFor200,
} from '../../scripts/lib/service-process.ts';
import { benchServiceEnv } from './setup.ts';

/**
 * Start-up of the service as `npm start` runs it (SERVICE_COMMAND: package.json's flags,
 * `src/server.ts`, no build step), on PGlite, each time to the first 200 from GET /api/health.
 */
export interface StartFigures {
  /** On a new DATA_DIR (created from the template dump), with an empty compile cache. */
  emptyMs: number;
  /** On the same DATA_DIR again, with an empty compile cache. */
  coldMs: number;
  /** On the same DATA_DIR again, with the compile cache the first start filled: the median of three starts. */
  warmMs: number;
  /** The same through `npm start` itself (npm and its prestart check included): the median of three starts. */
  npmStartWarmMs: number;
  /** Resident memory 2 s after a warm start, before any request but the health checks. */
  idleMiB: number;
}

const WARM_STARTS = 3;

/** Start-up times and idle memory on PGlite (the zero-setup database). */
export async function pgliteStartFigures(): Promise<StartFigures> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'bench-start-'));
  const cacheRoot = mkdtempSync(path.join(os.tmpdir(), 'bench-compile-cache-'));
  try {
    const env = { ...benchServiceEnv, DATA_DIR: dataDir, PORT: String(await freePort()) };
    const url = `http://127.0.0.1:${env.PORT}/api/health`;
    // cache: a folder of cacheRoot for NODE_COMPILE_CACHE, or undefined for Node's default (as a
    // plain `npm start` has it: the cache is then turned on by src/start.mjs, not from Node's start).
    const timed = async (
      command: readonly string[],
      cache: string | undefined,
      keep?: (pid: number) => Promise<void>,
    ): Promise<number> => {
      const service = startCommand(
        command,
        cache === undefined ? env : { ...env, NODE_COMPILE_CACHE: path.join(cacheRoot, cache) },
      );
      try {
        const ms = await waitFor200(url, 60_000).catch((err: Error) => {
          throw new Error(`${command.join(' ')}: ${err.message}; its output:\n${service.output()}`);
        });
        await keep?.(service.child.pid as number);
        return ms;
      } finally {
        await stopCommand(service);
      }
    };
    const npmStart = ['npm', 'start', '--silent'];
    const emptyMs = await timed(SERVICE_COMMAND, 'kept');
    const coldMs = await timed(SERVICE_COMMAND, 'fresh');
    const warm: number[] = [];
    const npmStartWarm: number[] = [];
    for (let i = 0; i < WARM_STARTS; i++) {
      warm.push(await timed(SERVICE_COMMAND, 'kept'));
      npmStartWarm.push(await timed(npmStart, 'kept'));
    }
    // Idle memory as a plain `npm start` has it: Node's default compile cache, filled by a first start.
    let idleMiB = Number.NaN;
    await timed(SERVICE_COMMAND, undefined);
    await timed(SERVICE_COMMAND, undefined, async (pid) => {
      await new Promise((r) => setTimeout(r, 2000));
      idleMiB = residentMiB(pid);
    });
    return { emptyMs, coldMs, warmMs: median(warm), npmStartWarmMs: median(npmStartWarm), idleMiB };
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(cacheRoot, { recursive: true, force: true });
  }
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

/** Runs a command in a process group of its own (npm starts a shell that starts node), from the project's root. */
function startCommand(command: readonly string[], env: Record<string, string>): RunningService {
  const [file, ...args] = command as [string, ...string[]];
  return spawnCapturing(file, args, {
    cwd: projectRoot,
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? os.tmpdir(),
      NODE_ENV: 'test',
      LOG_LEVEL: 'warn',
      ...env,
    },
    detached: true,
  });
}

/**
 * Stops the whole process group and waits until every process of it is gone: with `npm start` the
 * leader (npm) exits before the service has let go of its port and data directory.
 */
async function stopCommand(service: RunningService): Promise<void> {
  const group = -(service.child.pid as number);
  try {
    process.kill(group, 'SIGTERM');
  } catch {
    // already gone
  }
  await service.exited;
  for (const deadline = Date.now() + 30_000; Date.now() < deadline; ) {
    try {
      process.kill(group, 0);
    } catch {
      return; // no process of the group is left
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  process.kill(group, 'SIGKILL');
}

/** Samples a process's resident memory every 250 ms and keeps the highest. */
export function trackPeakMemory(pid: number): { peakMiB: () => number; stop: () => void } {
  let peak = residentMiB(pid);
  const timer = setInterval(() => {
    try {
      peak = Math.max(peak, residentMiB(pid));
    } catch {
      // the process has gone
    }
  }, 250);
  timer.unref();
  return { peakMiB: () => peak, stop: () => clearInterval(timer) };
}
