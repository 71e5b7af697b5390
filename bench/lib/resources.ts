import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { BUILT_SERVER, freePort, residentMiB, startService, waitFor200 } from '../../scripts/lib/service-process.ts';
import { benchServiceEnv } from './setup.ts';

export interface StartFigures {
  /** Start to the first 200 from GET /api/health on a new DATA_DIR, then on the same one again. */
  emptyMs: number;
  existingMs: number;
  /** Resident memory 2 s after the second start, before any request but the health checks. */
  idleMiB: number;
}

/** Start-up time and idle memory of the built service on PGlite (the zero-setup database). */
export async function pgliteStartFigures(): Promise<StartFigures> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'bench-start-'));
  try {
    const env = { ...benchServiceEnv, DATA_DIR: dataDir, PORT: String(await freePort()) };
    const url = `http://127.0.0.1:${env.PORT}/api/health`;
    const first = startService(env, BUILT_SERVER);
    let emptyMs: number;
    try {
      emptyMs = await waitFor200(url, 60_000);
    } finally {
      first.child.kill('SIGTERM');
      await first.exited;
    }
    const second = startService(env, BUILT_SERVER);
    try {
      const existingMs = await waitFor200(url, 60_000);
      await new Promise((r) => setTimeout(r, 2000));
      return { emptyMs, existingMs, idleMiB: residentMiB(second.child.pid as number) };
    } finally {
      second.child.kill('SIGTERM');
      await second.exited;
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
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
