import type { ServerOptions } from 'node:http';
import type { Socket } from 'node:net';
import type { Config } from './config.ts';
import type { ErrorBody } from './errors.ts';

/** Total size of the request line and headers; larger requests get 431 (Node's default as well). */
export const MAX_HEADER_BYTES = 16 * 1024;

/**
 * Node checks its header and request timeouts on a timer, every 30 s by default: a slow client
 * could then hold a connection for up to 30 s past the limit. Checked every second instead.
 */
const CONNECTIONS_CHECKING_INTERVAL_MS = 1_000;

/** Fastify's server options that bound what a slow or abusive client can hold. */
export function httpServerOptions(config: Readonly<Config>): {
  http: ServerOptions;
  requestTimeout: number;
  keepAliveTimeout: number;
  connectionTimeout: number;
} {
  const http: ServerOptions = {
    headersTimeout: config.http.headersTimeoutMs,
    connectionsCheckingInterval: Math.min(CONNECTIONS_CHECKING_INTERVAL_MS, config.http.headersTimeoutMs),
    maxHeaderSize: MAX_HEADER_BYTES,
  };
  return {
    http,
    requestTimeout: config.http.requestTimeoutMs,
    keepAliveTimeout: config.http.keepAliveTimeoutMs,
    // No idle timeout on a connection whose request is being answered: an embeddings call may
    // legitimately wait on its provider (bounded by EMBEDDINGS_TIMEOUT_MS and the retries).
    connectionTimeout: 0,
  };
}

function answerFor(err: NodeJS.ErrnoException): ErrorBody {
  switch (err.code) {
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return { error: 'REQUEST_TIMEOUT', message: 'The request did not arrive in time', statusCode: 408 };
    case 'HPE_HEADER_OVERFLOW':
      return {
        error: 'HEADERS_TOO_LARGE',
        message: `The request headers exceed ${MAX_HEADER_BYTES} bytes`,
        statusCode: 431,
      };
    default:
      return { error: 'INVALID_INPUT', message: 'The request is not valid HTTP/1.1', statusCode: 400 };
  }
}

const reasons: Record<number, string> = {
  400: 'Bad Request',
  408: 'Request Timeout',
  431: 'Request Header Fields Too Large',
};

/**
 * Answers what Node's HTTP parser rejects before any route runs (malformed requests, headers too
 * large, timeouts) in the Error shape of every other answer, then closes the connection.
 */
export function clientErrorHandler(err: NodeJS.ErrnoException, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  if (socket.writable) {
    const answer = answerFor(err);
    const body = JSON.stringify(answer);
    socket.write(
      `HTTP/1.1 ${answer.statusCode} ${reasons[answer.statusCode]}\r\nConnection: close\r\nContent-Type: application/json; charset=utf-8\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}
