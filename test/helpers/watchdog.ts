import { Worker } from 'node:worker_threads';

/**
 * A watchdog on another thread for code that blocks the event loop (a request whose handling
 * spins on the CPU): timers of the blocked thread never fire, so a deadline there cannot report
 * it. When armed for longer than `limitMs`, the watchdog writes the armed description to stderr
 * (directly, as the main thread cannot relay it) and kills the process, so the run fails with the
 * case that hung rather than at the runner's timeout with nothing said.
 */
export interface Watchdog {
  arm(description: string): void;
  disarm(): void;
  stop(): Promise<void>;
}

const DESCRIPTION_BYTES = 64 * 1024;

const workerSource = `
const { workerData } = require('node:worker_threads');
const { writeSync } = require('node:fs');
const deadline = new Float64Array(workerData.deadline);
const length = new Int32Array(workerData.length);
const text = new Uint8Array(workerData.text);
setInterval(() => {
  const at = deadline[0];
  if (at > 0 && Date.now() > at) {
    const description = Buffer.from(text.slice(0, Atomics.load(length, 0))).toString('utf8');
    writeSync(2, '\\nWATCHDOG: the event loop has been blocked for more than ' + workerData.limitMs + ' ms (a hang)\\n' + description + '\\n');
    process.kill(process.pid, 'SIGKILL');
  }
}, 200);
`;

export function startWatchdog(limitMs: number): Watchdog {
  const deadline = new SharedArrayBuffer(8);
  const length = new SharedArrayBuffer(4);
  const text = new SharedArrayBuffer(DESCRIPTION_BYTES);
  const worker = new Worker(workerSource, { eval: true, workerData: { deadline, length, text, limitMs } });
  worker.unref();
  const deadlineView = new Float64Array(deadline);
  const lengthView = new Int32Array(length);
  const textView = new Uint8Array(text);
  return {
    arm(description) {
      const { written } = new TextEncoder().encodeInto(description, textView);
      Atomics.store(lengthView, 0, written);
      deadlineView[0] = Date.now() + limitMs;
    },
    disarm() {
      deadlineView[0] = 0;
    },
    async stop() {
      deadlineView[0] = 0;
      await worker.terminate();
    },
  };
}
