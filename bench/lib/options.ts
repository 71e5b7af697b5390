import { parseArgs } from 'node:util';

/** The options every benchmark script takes. */
export interface BenchOptions {
  quick: boolean;
  kind: 'postgres' | 'pglite';
  users: number;
  durationSeconds: number;
  connections: number;
  /** The script's own extra options, as given (undefined when absent). */
  extra: Record<string, string | undefined>;
}

/**
 * Parses --quick, --database postgres|pglite, --users (20,000 quick, else 1,000,000), --duration
 * (seconds; defaults given per script) and --connections (10), plus the script's `extra` string
 * options; prints `usage` and exits 1 on anything that is not a positive whole number.
 */
export function parseBenchOptions(
  usage: string,
  durationSeconds: { quick: number; full: number },
  extra: readonly string[] = [],
): BenchOptions {
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean', default: false },
      database: { type: 'string', default: 'postgres' },
      users: { type: 'string' },
      duration: { type: 'string' },
      connections: { type: 'string', default: '10' },
      ...Object.fromEntries(extra.map((name) => [name, { type: 'string' as const }])),
    },
  });
  const quick = values.quick === true;
  const kind = values.database === 'pglite' ? 'pglite' : values.database === 'postgres' ? 'postgres' : undefined;
  const options = {
    quick,
    users: Number(values.users ?? (quick ? 20_000 : 1_000_000)),
    durationSeconds: Number(values.duration ?? (quick ? durationSeconds.quick : durationSeconds.full)),
    connections: Number(values.connections),
    extra: Object.fromEntries(
      extra.map((name) => [name, (values as Record<string, unknown>)[name] as string | undefined]),
    ),
  };
  const counts = [options.users, options.durationSeconds, options.connections];
  if (kind === undefined || !counts.every((x) => Number.isSafeInteger(x) && x > 0)) {
    console.error(usage);
    process.exit(1);
  }
  return { ...options, kind };
}
