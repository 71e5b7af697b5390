import net from 'node:net';

// The PostgreSQL protocol as PGlite's socket server is allowed to see it: a front on the public
// port that lets only well-formed messages through (PGlite loops or loses its session state on some
// malformed ones: an unknown message type, a negative or short length, a startup packet without its
// terminator), watches the answers for the transaction status, and ends a client that keeps a
// transaction open too long (the service waits meanwhile: PGlite has one session).

const SSL_REQUEST = 80877103;
const GSS_REQUEST = 80877104;
const CANCEL_REQUEST = 80877102;
const PROTOCOL_3 = 196608;
/** Frontend message types of protocol 3.0 after the startup. */
const FRONTEND_TYPES = new Set('BCDEFHPQSXcdfp'.split('').map((c) => c.charCodeAt(0)));
const MAX_MESSAGE = 64 * 1024 * 1024;
const MAX_STARTUP = 10_000;
const READY_FOR_QUERY = 'Z'.charCodeAt(0);
const IDLE = 'I'.charCodeAt(0);

/** Splits a client's bytes into whole messages and checks each; `undefined` means: refuse the client. */
export class FrontendFramer {
  #buffer = Buffer.alloc(0);
  #started = false;
  /** Set when the client asked for SSL or GSS: the server's answer is one byte. */
  sslAsked = false;

  /** The whole messages `chunk` completes, or undefined when the bytes are not the protocol. */
  push(chunk: Buffer): Buffer[] | undefined {
    this.#buffer = Buffer.concat([this.#buffer, chunk]);
    const messages: Buffer[] = [];
    for (;;) {
      if (!this.#started) {
        if (this.#buffer.length >= 4) {
          const declared = this.#buffer.readInt32BE(0);
          if (declared < 8 || declared > MAX_STARTUP) return undefined;
        }
        if (this.#buffer.length < 8) return messages;
        const length = this.#buffer.readInt32BE(0);
        const code = this.#buffer.readInt32BE(4);
        if (length < 8 || length > MAX_STARTUP) return undefined;
        if (this.#buffer.length < length) return messages;
        const message = this.#buffer.subarray(0, length);
        if (code === SSL_REQUEST || code === GSS_REQUEST) {
          if (length !== 8) return undefined;
          this.sslAsked = true;
        } else if (code === CANCEL_REQUEST) {
          if (length !== 16) return undefined;
        } else if (code === PROTOCOL_3) {
          // name\0value\0 … \0, with a user among the names.
          if (length < 10 || message[length - 1] !== 0 || message[length - 2] !== 0) return undefined;
          const names = message
            .subarray(8, length - 1)
            .toString('utf8')
            .split('\0')
            .filter((_, i) => i % 2 === 0);
          if (!names.includes('user')) return undefined;
          this.#started = true;
        } else {
          return undefined;
        }
        messages.push(Buffer.from(message));
        this.#buffer = this.#buffer.subarray(length);
        continue;
      }
      if (this.#buffer.length < 5) return messages;
      const type = this.#buffer[0] as number;
      const length = this.#buffer.readInt32BE(1);
      if (!FRONTEND_TYPES.has(type) || length < 4 || length > MAX_MESSAGE) return undefined;
      if (this.#buffer.length < length + 1) return messages;
      messages.push(Buffer.from(this.#buffer.subarray(0, length + 1)));
      this.#buffer = this.#buffer.subarray(length + 1);
    }
  }
}

/** Follows the server's answers for ReadyForQuery, whose status says whether a transaction is open. */
export class BackendWatcher {
  #buffer = Buffer.alloc(0);
  #framer: FrontendFramer;
  /** Called with true when a transaction opens (status T or E), false when it ends (I). */
  readonly #onTransaction: (open: boolean) => void;

  constructor(framer: FrontendFramer, onTransaction: (open: boolean) => void) {
    this.#framer = framer;
    this.#onTransaction = onTransaction;
  }

  push(chunk: Buffer): void {
    this.#buffer = Buffer.concat([this.#buffer, chunk]);
    for (;;) {
      if (this.#framer.sslAsked) {
        if (this.#buffer.length < 1) return;
        this.#framer.sslAsked = false;
        this.#buffer = this.#buffer.subarray(1);
        continue;
      }
      if (this.#buffer.length < 5) return;
      const length = this.#buffer.readInt32BE(1);
      if (length < 4) return; // not followed further: the server's own framing is trusted
      if (this.#buffer.length < length + 1) return;
      if (this.#buffer[0] === READY_FOR_QUERY && length === 5) this.#onTransaction(this.#buffer[5] !== IDLE);
      this.#buffer = this.#buffer.subarray(length + 1);
    }
  }
}

/**
 * Serves 127.0.0.1:`port`, passing each client's well-formed messages to `upstream` (a path of a
 * Unix socket) and the answers back. A client that sends anything else, or keeps the session longer
 * than `transactionLimitMs` (from a message until ReadyForQuery with no transaction open), is
 * disconnected.
 */
export async function startWireGuard(
  port: number,
  upstream: string,
  transactionLimitMs: number,
  onClientGone: () => Promise<void>,
): Promise<{ close(): Promise<void> }> {
  const clients = new Set<net.Socket>();
  const server = net.createServer((client) => {
    clients.add(client);
    const inner = net.createConnection(upstream);
    const framer = new FrontendFramer();
    let limit: NodeJS.Timeout | undefined;
    let ended = false;
    const end = () => {
      clearTimeout(limit);
      client.destroy();
      inner.destroy();
      clients.delete(client);
      if (ended) return;
      ended = true;
      // Once the socket server has let go of the client (a transaction rolled back), its settings go too.
      setTimeout(() => void onClientGone().catch(() => {}), 50).unref();
    };
    // The clock runs from a client's message until PGlite is ready again with no transaction open:
    // the service waits for the whole of that time.
    const busy = () => {
      limit ??= setTimeout(end, transactionLimitMs);
    };
    const watcher = new BackendWatcher(framer, (open) => {
      if (open) return busy();
      clearTimeout(limit);
      limit = undefined;
    });
    client.on('data', (chunk: Buffer) => {
      const messages = framer.push(chunk);
      if (messages === undefined) return end();
      if (messages.length > 0) busy();
      for (const message of messages) inner.write(message);
    });
    inner.on('data', (chunk: Buffer) => {
      watcher.push(chunk);
      client.write(chunk);
    });
    client.on('error', end);
    inner.on('error', end);
    client.on('close', end);
    inner.on('close', end);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  return {
    close: () =>
      new Promise<void>((resolve) => {
        for (const client of clients) client.destroy();
        server.close(() => resolve());
      }),
  };
}
