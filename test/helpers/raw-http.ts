import net from 'node:net';

/** An HTTP/1.1 answer read off a socket. */
export interface RawResponse {
  status: number;
  /** Header names in lower case; repeated headers as arrays. */
  headers: Record<string, string | string[]>;
  body: string;
}

/** What came back: an answer, or a connection closed (or reset) before any byte of one. */
export type RawOutcome = { kind: 'answer'; response: RawResponse } | { kind: 'closed'; error: string | undefined };

/**
 * Writes `request` (bytes exactly as given: duplicated, oversized or malformed headers included) to
 * a new connection and reads until the server closes it. Send `Connection: close` so that it does.
 */
export function rawRequest(port: number, request: Buffer, timeoutMs: number): Promise<RawOutcome> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    let error: string | undefined;
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no complete answer within ${timeoutMs} ms (got ${Buffer.concat(chunks).length} bytes)`));
    }, timeoutMs);
    socket.on('data', (chunk) => chunks.push(chunk));
    // A server that answers before reading everything may reset the connection: keep what arrived.
    socket.on('error', (err: NodeJS.ErrnoException) => {
      error = err.code ?? err.message;
    });
    socket.on('close', () => {
      clearTimeout(timer);
      const data = Buffer.concat(chunks);
      if (data.length === 0) {
        resolve({ kind: 'closed', error });
        return;
      }
      try {
        resolve({ kind: 'answer', response: parseResponse(data) });
      } catch (err) {
        reject(err);
      }
    });
    // Not end(): a client that half-closes its side makes Node abort the request it has not answered yet.
    socket.write(request);
  });
}

/** Parses one HTTP/1.1 response (Content-Length, chunked, or read to the end). */
export function parseResponse(data: Buffer): RawResponse {
  const end = data.indexOf('\r\n\r\n');
  if (end === -1) throw new Error(`not an HTTP response: ${JSON.stringify(data.toString('latin1').slice(0, 200))}`);
  const [statusLine = '', ...lines] = data.subarray(0, end).toString('latin1').split('\r\n');
  const match = /^HTTP\/1\.[01] (\d{3})/.exec(statusLine);
  if (!match) throw new Error(`not an HTTP status line: ${JSON.stringify(statusLine)}`);
  const headers: Record<string, string | string[]> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    const existing = headers[name];
    headers[name] = existing === undefined ? value : Array.isArray(existing) ? [...existing, value] : [existing, value];
  }
  let body = data.subarray(end + 4);
  const te = headers['transfer-encoding'];
  if (typeof te === 'string' && /chunked/i.test(te)) {
    const parts: Buffer[] = [];
    let at = 0;
    for (;;) {
      const lineEnd = body.indexOf('\r\n', at);
      if (lineEnd === -1) break;
      const size = Number.parseInt(body.subarray(at, lineEnd).toString('latin1'), 16);
      if (!Number.isFinite(size) || size === 0) break;
      parts.push(body.subarray(lineEnd + 2, lineEnd + 2 + size));
      at = lineEnd + 2 + size + 2;
    }
    body = Buffer.concat(parts);
  } else if (typeof headers['content-length'] === 'string') {
    body = body.subarray(0, Number(headers['content-length']));
  }
  return { status: Number(match[1]), headers, body: body.toString('utf8') };
}
