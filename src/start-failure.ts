import { SealedKeyError } from './auth/signing-keys.ts';
import type { Config } from './config.ts';

/** What stopped the start, in one line (what, where, what to do); undefined when the error is not one of the known kinds. */
export function describeStartFailure(err: unknown, config: Config): string | undefined {
  if (err instanceof SealedKeyError) return err.message;
  const listen = listenFailure(err, config);
  if (listen) return listen;
  if (config.database.kind === 'postgres') return databaseFailure(err, config.database.url);
  return undefined;
}

function listenFailure(err: unknown, config: Config): string | undefined {
  if (!isErrno(err) || err.syscall !== 'listen') return undefined;
  const where = `${config.host}:${config.port}`;
  switch (err.code) {
    case 'EADDRINUSE':
      return `port ${config.port} on ${config.host} is already in use: stop the process that holds it, or set PORT to a free port`;
    case 'EACCES':
      return `no permission to listen on ${where}: set PORT to 1024 or above, or run with the right to bind low ports`;
    case 'EADDRNOTAVAIL':
      return `HOST=${config.host} is not an address of this machine: set HOST to one of its addresses (127.0.0.1, 0.0.0.0, ::)`;
    default:
      return undefined;
  }
}

const socketReasons: Record<string, string> = {
  ECONNREFUSED: 'connection refused',
  ENOTFOUND: 'host not found',
  EAI_AGAIN: 'host name lookup failed',
  ETIMEDOUT: 'connection timed out',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  ECONNRESET: 'connection reset',
};

const serverReasons: Record<string, string> = {
  '28P01': 'password authentication failed',
  '28000': 'the server refused this user',
  '3D000': 'the database does not exist',
  '57P03': 'the server is starting up or shutting down',
  '53300': 'too many connections',
};

function databaseFailure(err: unknown, url: string): string | undefined {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code;
    const reason =
      (typeof code === 'string' && (socketReasons[code] ?? serverReasons[code])) ||
      (/timeout/i.test(e.message) && /connect/i.test(e.message) ? 'connection timed out' : undefined);
    if (reason) {
      return `the database at ${withoutPassword(url)} is unreachable (${reason}): start PostgreSQL there or fix DATABASE_URL`;
    }
  }
  return undefined;
}

function withoutPassword(url: string): string {
  try {
    const parsed = new URL(url);
    parsed.password = '';
    return parsed.toString();
  } catch {
    return 'DATABASE_URL';
  }
}

function isErrno(err: unknown): err is NodeJS.ErrnoException {
  return err instanceof Error && typeof (err as NodeJS.ErrnoException).code === 'string';
}
