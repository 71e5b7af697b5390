import http, { type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Config } from './config.ts';
import { type ErrorBody, errorBody } from './errors.ts';

/** Total size of the request line and headers; larger requests get 431 (Node's default as well). */
export const MAX_HEADER_BYTES = 16 * 1024;
/** Header lines in a request; more get 431 too (Node's own limit since Node 22, not configurable). */
export const MAX_HEADER_LINES = 1000;

/**
 * Node checks its header and request timeouts on a timer, every 30 s by default: a slow client
 * could then hold a connection for up to 30 s past the limit. Checked every second instead.
 */
const CONNECTIONS_CHECKING_INTERVAL_MS = 1_000;

/**
 * Fastify's serverFactory: a Node HTTP server whose limits bound what a slow or abusive client can
 * hold, and which answers a request without Host itself, in the Error shape (Node's own answer is
 * an empty 400) and with the headers of every error answer, before Fastify routes it.
 */
export function serverFactory(config: Readonly<Config>) {
  return (handler: (req: IncomingMessage, res: ServerResponse) => void): Server => {
    const server = http.createServer(
      {
        headersTimeout: config.http.headersTimeoutMs,
        requestTimeout: config.http.requestTimeoutMs,
        connectionsCheckingInterval: Math.min(CONNECTIONS_CHECKING_INTERVAL_MS, config.http.headersTimeoutMs),
        maxHeaderSize: MAX_HEADER_BYTES,
        requireHostHeader: false,
      },
      (req, res) => {
        // HTTP/1.1 requires a Host header (RFC 9112, section 3.2).
        if (req.httpVersion === '1.1' && req.headers.host === undefined) {
          const body = JSON.stringify(errorBody('INVALID_INPUT', 'An HTTP/1.1 request needs a Host header'));
          res
            .writeHead(400, {
              connection: 'close',
              'content-type': 'application/json; charset=utf-8',
              'x-content-type-options': 'nosniff',
              'cache-control': 'no-store',
            })
            .end(body);
          return;
        }
        handler(req, res);
      },
    );
    // No idle timeout on a connection whose request is being answered: an embeddings call may
    // legitimately wait on its provider (bounded by EMBEDDINGS_TIMEOUT_MS and the retries).
    server.setTimeout(0);
    server.keepAliveTimeout = config.http.keepAliveTimeoutMs;
    return server;
  };
}

function answerFor(err: NodeJS.ErrnoException): ErrorBody {
  switch (err.code) {
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return errorBody('REQUEST_TIMEOUT', 'The request did not arrive in time');
    case 'HPE_HEADER_OVERFLOW':
      return errorBody(
        'HEADERS_TOO_LARGE',
        `The request headers exceed ${MAX_HEADER_BYTES} bytes or ${MAX_HEADER_LINES} lines`,
      );
    default:
      return errorBody('INVALID_INPUT', 'The request is not valid HTTP/1.1');
  }
}

const reasons: Record<number, string> = {
  400: 'Bad Request',
  408: 'Request Timeout',
  431: 'Request Header Fields Too Large',
};

/**
 * Answers what Node's HTTP parser rejects before any route runs (malformed requests, headers too
 * large, timeouts) in the Error shape of every other answer, then closes the connection. Like every
 * error answer it is not to be cached (`Cache-Control: no-store`): the path it was for is unknown.
 */
export function clientErrorHandler(err: NodeJS.ErrnoException, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  if (socket.writable) {
    const answer = answerFor(err);
    const body = JSON.stringify(answer);
    socket.write(
      `HTTP/1.1 ${answer.statusCode} ${reasons[answer.statusCode]}\r\nConnection: close\r\nContent-Type: application/json; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\n` +
        'Cache-Control: no-store\r\n' +
        `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}
