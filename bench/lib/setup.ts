import { parseArgs } from 'node:util';
import { freePort, type RunningService, startService, waitFor200 } from '../../scripts/lib/service-process.ts';

/** The options every benchmark takes (--duration seconds, --connections) plus its own string options. */
export function benchArgs(extra: Record<string, string> = {}) {
  const { values } = parseArgs({
    options: {
      duration: { type: 'string', default: '10' },
      connections: { type: 'string', default: '10' },
      ...Object.fromEntries(
        Object.entries(extra).map(([name, fallback]) => [name, { type: 'string', default: fallback }]),
      ),
    },
  });
  const options = values as Record<string, string>;
  return { options, durationSeconds: Number(options.duration), connections: Number(options.connections) };
}

/** Starts the ceiling, a bare Fastify JSON route, in its own process; returns its URL. */
export async function startCeiling(started: RunningService[]): Promise<string> {
  const port = await freePort();
  started.push(startService({ PORT: String(port) }, 'bench/bare-server.ts'));
  const url = `http://127.0.0.1:${port}/bare`;
  await waitFor200(url, 30_000);
  return url;
}

export const ceilingTitle = 'bare Fastify JSON route (ceiling)';
