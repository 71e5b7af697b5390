import path from 'node:path';
import { z } from 'zod';

/** Thrown when the environment does not describe a runnable service; its message is one line naming the variable. */
export class ConfigError extends Error {
  override name = 'ConfigError';
}

const port = z.coerce
  .number({ error: 'must be a port number (1-65535)' })
  .int('must be a port number (1-65535)')
  .min(1, 'must be a port number (1-65535)')
  .max(65535, 'must be a port number (1-65535)');

const databaseUrl = z
  .string()
  .trim()
  .refine((v) => v === 'memory://' || /^postgres(ql)?:\/\/.+/.test(v), {
    message: 'must be postgres://user:password@host:port/database or memory://',
  });

const envSchema = z.object({
  NODE_ENV: z
    .enum(['development', 'production', 'test'], { error: 'must be development, production or test' })
    .default('development'),
  PORT: port.default(7130),
  HOST: z.string().trim().min(1, 'must be a host name or address').default('127.0.0.1'),
  DATABASE_URL: databaseUrl.optional(),
  DATA_DIR: z.string().trim().min(1, 'must be a directory path').default('./data'),
  LOG_LEVEL: z
    .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], {
      error: 'must be one of fatal, error, warn, info, debug, trace, silent',
    })
    .default('info'),
  JWT_SECRET: z.string().min(32, 'must be at least 32 characters').optional(),
});

export type Env = Record<string, string | undefined>;

/** Where the data lives: embedded PGlite on disk or in memory, or a PostgreSQL server. */
export type DatabaseConfig =
  | { kind: 'pglite'; dataDir: string }
  | { kind: 'pglite-memory' }
  | { kind: 'postgres'; url: string };

export interface Config {
  nodeEnv: 'development' | 'production' | 'test';
  port: number;
  host: string;
  database: DatabaseConfig;
  dataDir: string;
  logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  /** Signing key for access tokens; when absent outside production one is generated and kept in the database. */
  jwtSecret: string | undefined;
}

function databaseFrom(url: string | undefined, dataDir: string): DatabaseConfig {
  if (url === undefined || url === '') return { kind: 'pglite', dataDir: path.resolve(dataDir, 'pglite') };
  if (url === 'memory://') return { kind: 'pglite-memory' };
  return { kind: 'postgres', url };
}

/** Validates the environment once into a frozen Config, or throws a ConfigError naming the first bad variable. */
export function loadConfig(env: Env = process.env): Readonly<Config> {
  // Empty strings mean "not set", as shells and compose files often pass them.
  const present = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ''));
  const parsed = envSchema.safeParse(present);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const name = String(issue?.path[0] ?? 'environment');
    const value = present[name];
    const shown = value === undefined || name === 'JWT_SECRET' ? '' : ` (got ${JSON.stringify(value)})`;
    throw new ConfigError(`${name} ${issue?.message ?? 'is invalid'}${shown}`);
  }
  const e = parsed.data;
  if (e.NODE_ENV === 'production' && e.JWT_SECRET === undefined) {
    throw new ConfigError('JWT_SECRET is required when NODE_ENV=production (at least 32 characters)');
  }
  const dataDir = path.resolve(e.DATA_DIR);
  return Object.freeze({
    nodeEnv: e.NODE_ENV,
    port: e.PORT,
    host: e.HOST,
    database: Object.freeze(databaseFrom(e.DATABASE_URL, dataDir)),
    dataDir,
    logLevel: e.LOG_LEVEL,
    jwtSecret: e.JWT_SECRET,
  });
}
