// SQLSTATE classes and socket errors that mean "the database cannot be reached right now".
const unavailableCodes = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
  '57P01', // admin_shutdown
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now
]);

/** True when an error says the database is unreachable (as opposed to a bad query). */
export function isDatabaseUnavailable(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string' && (unavailableCodes.has(code) || code.startsWith('08'))) return true;
  if (err instanceof AggregateError) return err.errors.some(isDatabaseUnavailable);
  // pg's own words: a connection lost or never made, a pool wait past connectionTimeoutMillis, and a
  // statement sent on a connection that has already failed or been closed (such as the ROLLBACK of a
  // transaction whose server went away, which then replaces the original error).
  return /Connection terminated|timeout exceeded when trying to connect|is not queryable/.test(err.message);
}

/**
 * True when the statement may succeed if tried again shortly: the database is unreachable, the
 * transaction met a serialization failure or deadlock (SQLSTATE class 40), or a lock was not
 * obtained within lock_timeout (55P03). Anything else (a bad query, a policy that fails) is not.
 */
export function isRetryable(err: unknown): boolean {
  return isDatabaseUnavailable(err) || isConflict(err);
}

/** Class 40 (a deadlock or serialization failure), or a lock not obtained within lock_timeout (55P03): rolled back, may be retried. */
function isConflict(err: unknown): boolean {
  const code = (err as { code?: unknown } | null | undefined)?.code;
  return typeof code === 'string' && /^(40[0-9A-Z]{3}|55P03)$/.test(code);
}

/** How a database error is answered: an error code of the contract, its message and Retry-After. */
export interface DatabaseErrorAnswer {
  code: 'INVALID_INPUT' | 'SERVICE_UNAVAILABLE';
  message: string;
  retryAfterSeconds?: number;
}

/** The answer to a database error that a request can meet, or undefined for any other error (a 500). */
export function databaseErrorAnswer(err: unknown): DatabaseErrorAnswer | undefined {
  const code = (err as { code?: unknown } | null | undefined)?.code;
  // SQLSTATE class 22 (data exception): a value the database refuses, which only input can cause.
  if (typeof code === 'string' && /^22[0-9A-Z]{3}$/.test(code)) {
    return { code: 'INVALID_INPUT', message: 'A value in the request cannot be stored' };
  }
  if (isConflict(err)) {
    return {
      code: 'SERVICE_UNAVAILABLE',
      message: 'The request conflicted with a concurrent one; try again',
      retryAfterSeconds: 1,
    };
  }
  if (isDatabaseUnavailable(err)) {
    return {
      code: 'SERVICE_UNAVAILABLE',
      message: 'The database is not answering; try again shortly',
      retryAfterSeconds: 5,
    };
  }
  return undefined;
}
