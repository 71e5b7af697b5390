import type { FastifyBaseLogger } from 'fastify';
import { isDatabaseUnavailable } from './db/errors.ts';

/**
 * Runs `job` 5 s after start and then every `intervalMs` (never two runs at once), logging
 * failures without stopping; returns the stop, which waits for a run under way. For database
 * housekeeping that every instance may do (running it on several at once is harmless).
 */
export function startPeriodicJob(
  name: string,
  job: () => Promise<void>,
  intervalMs: number,
  log: FastifyBaseLogger,
): () => Promise<void> {
  let running: Promise<void> | undefined;
  const run = () => {
    running ??= job()
      .catch((err: unknown) =>
        isDatabaseUnavailable(err)
          ? log.info(`${name}: not done (database unavailable); will retry`)
          : log.warn({ err }, `${name}: failed; will retry`),
      )
      .finally(() => {
        running = undefined;
      });
  };
  const first = setTimeout(run, 5_000);
  const every = setInterval(run, intervalMs);
  first.unref();
  every.unref();
  return async () => {
    clearTimeout(first);
    clearInterval(every);
    await running;
  };
}
