import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  BUILT_SERVER,
  freePort,
  projectRoot,
  type RunningService,
  residentMiB,
  SERVICE_NODE_FLAGS,
  waitFor200,
} from '../../scripts/lib/service-process.ts';
import { benchServiceEnv } from './setup.ts';

export interface StartFigures {
  /** Start to the first 200 from GET /api/health on a new DATA_DIR (the built server). */
  emptyMs: number;
  /**
   * On the same DATA_DIR again: the built server (`node dist/src/server.js`) and `npm start` (Node
   * running the sources), cold (an empty compile cache) and warm (the median of three later starts).
   */
  builtColdMs: number;
  builtWarmMs: number;
  npmStartColdMs: number;
  npmStartWarmMs: number;
  /** Resident memory 2 s after a warm start of the built server, before any request but the health checks. */
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
    const timed = async (command: string[], cache: string, keep?: (pid: number) => Promise<void>): Promise<number> => {
      const service = startCommand(command, { ...env, NODE_COMPILE_CACHE: path.join(cacheRoot, cache) });
      try {
        const ms = await waitFor200(url, 60_000);
        await keep?.(service.child.pid as number);
        return ms;
      } finally {
        await stopCommand(service);
      }
    };
    const built = [process.execPath, ...SERVICE_NODE_FLAGS, BUILT_SERVER];
    const npmStart = ['npm', 'start', '--silent'];
    const emptyMs = await timed(built, 'built');
    const builtColdMs = await timed(built, 'built-fresh');
    const npmStartColdMs = await timed(npmStart, 'sources');
    const builtWarm: number[] = [];
    const npmStartWarm: number[] = [];
    let idleMiB = Number.NaN;
    for (let i = 0; i < WARM_STARTS; i++) {
      builtWarm.push(
        await timed(built, 'built', async (pid) => {
          if (i > 0) return;
          await new Promise((r) => setTimeout(r, 2000));
          idleMiB = residentMiB(pid);
        }),
      );
      npmStartWarm.push(await timed(npmStart, 'sources'));
    }
    return {
      emptyMs,
      builtColdMs,
      builtWarmMs: median(builtWarm),
      npmStartColdMs,
      npmStartWarmMs: median(npmStartWarm),
      idleMiB,
    };
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
function startCommand(command: string[], env: Record<string, string>): RunningService {
  const [file, ...args] = command as [string, ...string[]];
  const child = spawn(file, args, {
    cwd: projectRoot,
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? os.tmpdir(),
      NODE_ENV: 'test',
      LOG_LEVEL: 'warn',
      ...env,
    },
    stdio: ['ignore', 'ignore', 'pipe'],
    detached: true,
  });
  let output = '';
  child.stderr?.on('data', (d) => {
    output += String(d);
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, output: () => output, exited };
}

/** Stops the whole process group and waits for its leader to exit. */
async function stopCommand(service: RunningService): Promise<void> {
  try {
    process.kill(-(service.child.pid as number), 'SIGTERM');
  } catch {
    // already gone
  }
  await service.exited;
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
