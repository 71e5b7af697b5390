import { freePort, type RunningService, startService, waitFor200 } from '../../scripts/lib/service-process.ts';

/** One service process started by startInstances, reached over real HTTP. */
export interface ServiceInstance {
  /** A short label for messages ("A", "B"). */
  name: string;
  port: number;
  /** `http://127.0.0.1:<port>` */
  url: string;
  service: RunningService;
}

/**
 * Stops a child process: SIGTERM (the service finishes its requests and closes the database), then
 * SIGKILL if it is still running after `graceMs`. Resolves with the exit code (null when killed).
 */
export async function stopService(service: RunningService, graceMs = 5_000): Promise<number | null> {
  const { child } = service;
  if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
  child.kill('SIGTERM');
  let timer: NodeJS.Timeout | undefined;
  const killed = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), graceMs);
  });
  const outcome = await Promise.race([service.exited, killed]);
  clearTimeout(timer);
  if (outcome !== 'timeout') return outcome;
  child.kill('SIGKILL');
  return service.exited;
}

/**
 * Starts one `node src/server.ts` process per name, each on a free port with `env`
 * on top, and waits until every one answers 200 on /api/health. The processes are started together;
 * if one does not come up, all are stopped and the error carries what it printed. `onReady` runs
 * for each instance the moment it first answers, before waiting for the others.
 */
export async function startInstances(
  names: string[],
  env: Record<string, string>,
  options: { timeoutMs?: number; onReady?: (instance: ServiceInstance) => Promise<unknown> } = {},
): Promise<ServiceInstance[]> {
  const { timeoutMs = 30_000, onReady } = options;
  const instances: ServiceInstance[] = [];
  for (const name of names) {
    const port = await freePort();
    const service = startService({ ...env, HOST: '127.0.0.1', PORT: String(port) });
    instances.push({ name, port, url: `http://127.0.0.1:${port}`, service });
  }
  const started = await Promise.allSettled(
    instances.map(async (i) => {
      await waitFor200(`${i.url}/api/health`, timeoutMs);
      await onReady?.(i);
    }),
  );
  const failed = started.findIndex((s) => s.status === 'rejected');
  if (failed !== -1) {
    await Promise.all(instances.map((i) => stopService(i.service, 2_000)));
    const instance = instances[failed] as ServiceInstance;
    const reason = (started[failed] as PromiseRejectedResult).reason as Error;
    throw new Error(`instance ${instance.name} failed to come up: ${reason.message}\n${instance.service.output()}`);
  }
  return instances;
}
