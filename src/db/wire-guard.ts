import net from 'node:net';
import { refusedStatement } from './wire-statements.ts';

// The PostgreSQL protocol as PGlite's socket server is allowed to see it: a front on the public
// port that lets only well-formed messages through (PGlite loops or loses its session state on some
// malformed ones: an unknown message type, a negative or short length, a startup packet without its
// terminator), refuses COPY from the client (wire-statements.ts), answers SSL and GSS encryption
// requests itself, ends the connection at Terminate (PGlite ignores it), watches the answers for the
// transaction status, and ends a client that holds the session too long (the service waits
// meanwhile: PGlite has one session).

const SSL_REQUEST = 80877103;
const GSS_REQUEST = 80877104;
const CANCEL_REQUEST = 80877102;
const PROTOCOL_3 = 196608;
const code = (c: string) => c.charCodeAt(0);
/**
 * Frontend message types of protocol 3.0 after the startup. CopyData, CopyDone and CopyFail are not
 * among them: COPY from the client is refused, so a client never has a reason to send them.
 */
const FRONTEND_TYPES = new Set('BCDEFHPQSXp'.split('').map(code));
/** Messages of the extended protocol: the server answers them only once a Sync follows. */
const EXTENDED_TYPES = new Set('BCDEHP'.split('').map(code));
/** Messages that the server answers with a ReadyForQuery. */
const ANSWERED_TYPES = new Set('QSF'.split('').map(code));
const QUERY = code('Q');
const PARSE = code('P');
const TERMINATE = code('X');
/** The longest message passed on: a statement of 16 MiB is far beyond what psql sends by hand. */
export const MAX_MESSAGE = 16 * 1024 * 1024;
const MAX_STARTUP = 10_000;
const READY_FOR_QUERY = code('Z');
const IDLE = code('I');
/** Clients served at once: one session behind them all, so a handful is plenty. */
export const MAX_CLIENTS = 8;

/** What the framer makes of a client's bytes. */
export type Framed =
  | { messages: Buffer[]; answer?: Buffer; terminated?: true }
  | { refuse: string | undefined /* a FATAL message for the client, or nothing for bytes that are not the protocol */ };

/** Splits a client's bytes into whole messages and checks each. */
export class FrontendFramer {
  #chunks: Buffer[] = [];
  #length = 0;
  /** Bytes needed before the next message is whole (so that a large message is joined once). */
  #needed = 0;
  #started = false;

  push(chunk: Buffer): Framed {
    this.#chunks.push(chunk);
    this.#length += chunk.length;
    if (this.#length < this.#needed) return { messages: [] };
    let buffer = this.#chunks.length === 1 ? (this.#chunks[0] as Buffer) : Buffer.concat(this.#chunks);
    const messages: Buffer[] = [];
    const answers: Buffer[] = [];
    const keep = (rest: Buffer, needed: number): Framed => {
      this.#chunks = rest.length > 0 ? [rest] : [];
      this.#length = rest.length;
      this.#needed = needed;
      return answers.length > 0 ? { messages, answer: Buffer.concat(answers) } : { messages };
    };
    for (;;) {
      if (!this.#started) {
        if (buffer.length < 4) return keep(buffer, 8);
        const length = buffer.readInt32BE(0);
        if (length < 8 || length > MAX_STARTUP) return { refuse: undefined };
        if (buffer.length < length) return keep(buffer, length);
        const requested = buffer.readInt32BE(4);
        const message = buffer.subarray(0, length);
        buffer = buffer.subarray(length);
        if (requested === SSL_REQUEST || requested === GSS_REQUEST) {
          // Neither is offered; answered here, as PostgreSQL does, and psql goes on in the clear.
          if (length !== 8) return { refuse: undefined };
          answers.push(Buffer.from('N'));
          continue;
        }
        // A cancel request: PGlite cannot interrupt a statement, so there is nothing to pass on.
        if (requested === CANCEL_REQUEST) return { refuse: undefined };
        if (requested !== PROTOCOL_3) return { refuse: undefined };
        // name\0value\0 … \0, with a user among the names.
        if (length < 10 || message[length - 1] !== 0 || message[length - 2] !== 0) return { refuse: undefined };
        const names = message
          .subarray(8, length - 1)
          .toString('utf8')
          .split('\0')
          .filter((_, i) => i % 2 === 0);
        if (!names.includes('user')) return { refuse: undefined };
        // The replication protocol (pg_basebackup, pg_receivewal, logical replication) breaks PGlite's session.
        if (names.includes('replication'))
          return { refuse: 'replication connections are not available on the embedded database: use npm run backup' };
        this.#started = true;
        messages.push(Buffer.from(message));
        continue;
      }
      if (buffer.length < 5) return keep(buffer, 5);
      const type = buffer[0] as number;
      const length = buffer.readInt32BE(1);
      if (!FRONTEND_TYPES.has(type) || length < 4 || length > MAX_MESSAGE) return { refuse: undefined };
      if (buffer.length < length + 1) return keep(buffer, length + 1);
      const message = buffer.subarray(0, length + 1);
      buffer = buffer.subarray(length + 1);
      if (type === TERMINATE) return { messages, terminated: true };
      if (type === QUERY || type === PARSE) {
        const refused = refusedStatement(statementOf(message));
        if (refused !== undefined) return { refuse: refused };
      }
      messages.push(Buffer.from(message));
    }
  }
}

/** The SQL text of a Query or Parse message. */
function statementOf(message: Buffer): string {
  let start = 5;
  if (message[0] === PARSE) start = message.indexOf(0, start) + 1; // past the statement's name
  const end = message.indexOf(0, start);
  return message.subarray(start, end < 0 ? message.length : end).toString('utf8');
}

/** An ErrorResponse of severity FATAL, as PostgreSQL sends before it closes a connection. */
export function fatalError(sqlState: string, message: string): Buffer {
  const fields = Buffer.from(`SFATAL\0VFATAL\0C${sqlState}\0M${message}\0\0`);
  const head = Buffer.alloc(5);
  head.write('E', 0);
  head.writeInt32BE(fields.length + 4, 1);
  return Buffer.concat([head, fields]);
}

/** Follows the server's answers for ReadyForQuery, whose status says whether a transaction is open. */
export class BackendWatcher {
  #chunks: Buffer[] = [];
  #length = 0;
  #needed = 0;
  readonly #onReady: (idle: boolean) => void;

  /** `onReady` hears each ReadyForQuery: true when no transaction is open (status I). */
  constructor(onReady: (idle: boolean) => void) {
    this.#onReady = onReady;
  }

  push(chunk: Buffer): void {
    this.#chunks.push(chunk);
    this.#length += chunk.length;
    if (this.#length < this.#needed) return;
    let buffer = this.#chunks.length === 1 ? (this.#chunks[0] as Buffer) : Buffer.concat(this.#chunks);
    for (;;) {
      if (buffer.length < 5) break;
      const length = buffer.readInt32BE(1);
      if (buffer.length < length + 1) break;
      if (buffer[0] === READY_FOR_QUERY && length === 5) this.#onReady(buffer[5] === IDLE);
      buffer = buffer.subarray(length + 1);
    }
    this.#chunks = buffer.length > 0 ? [buffer] : [];
    this.#length = buffer.length;
    this.#needed = buffer.length < 5 ? 5 : buffer.readInt32BE(1) + 1;
  }
}

/**
 * When a client holds the session: from its first message until the server is ready again with no
 * transaction open, every answered message answered, and no extended-protocol message waiting for
 * its Sync. (A client that sends `Parse/Bind/Execute` of `BEGIN` without a Sync after a simple query
 * gets that query's ReadyForQuery, but still holds the session.)
 */
export class SessionHold {
  /** Messages sent that the server answers with a ReadyForQuery, not answered yet (the startup is one). */
  #unanswered = 0;
  #unsynced = false;
  #inTransaction = false;

  sent(message: Buffer, startup: boolean): void {
    const type = message[0] as number;
    if (startup || ANSWERED_TYPES.has(type)) this.#unanswered++;
    if (EXTENDED_TYPES.has(type)) this.#unsynced = true;
    else if (ANSWERED_TYPES.has(type)) this.#unsynced = false;
  }

  ready(idle: boolean): void {
    this.#unanswered = Math.max(0, this.#unanswered - 1);
    this.#inTransaction = !idle;
  }

  get held(): boolean {
    return this.#unanswered > 0 || this.#unsynced || this.#inTransaction;
  }

  /**
   * Whether the client may leave something open on the session: a transaction, messages without
   * their Sync, or a message not answered yet (a BEGIN may still run after the client is gone).
   */
  get leavesOpen(): boolean {
    return this.#unanswered > 0 || this.#unsynced || this.#inTransaction;
  }
}

/**
 * Serves 127.0.0.1:`port`, passing each client's well-formed messages to `upstream` (a path of a
 * Unix socket) and the answers back. A client that sends anything else, or holds the session longer
 * than `holdLimitMs`, is disconnected; `clientsSeen` hears of each client served and gone (and
 * whether it left something open).
 */
export async function startWireGuard(
  port: number,
  upstream: string,
  holdLimitMs: number,
  clientsSeen: { came(): void; gone(leftOpen: boolean): void },
): Promise<{ close(): Promise<void> }> {
  const clients = new Set<net.Socket>();
  /** Every connection, served or being refused: closing the front ends them all. */
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    sockets.add(client);
    client.on('close', () => sockets.delete(client));
    client.on('error', () => {});
    if (clients.size >= MAX_CLIENTS) {
      client.end(fatalError('53300', `the embedded database serves ${MAX_CLIENTS} clients at once: close one`));
      setTimeout(() => client.destroy(), 1_000).unref();
      return;
    }
    clients.add(client);
    clientsSeen.came();
    const inner = net.createConnection(upstream);
    const framer = new FrontendFramer();
    const hold = new SessionHold();
    let startup = true;
    let limit: NodeJS.Timeout | undefined;
    let ended = false;
    const end = (farewell?: Buffer) => {
      clearTimeout(limit);
      if (farewell !== undefined && client.writable) {
        client.end(farewell);
        setTimeout(() => client.destroy(), 1_000).unref();
      } else client.destroy();
      inner.destroy();
      clients.delete(client);
      if (ended) return;
      ended = true;
      clientsSeen.gone(hold.leavesOpen);
    };
    // The clock runs while the client holds the session: the service waits for the whole of that time.
    const watch = () => {
      if (!hold.held) {
        clearTimeout(limit);
        limit = undefined;
      } else {
        limit ??= setTimeout(
          () => end(fatalError('57014', `the session was held for more than ${holdLimitMs / 1000} s`)),
          holdLimitMs,
        );
      }
    };
    const watcher = new BackendWatcher((idle) => {
      hold.ready(idle);
      watch();
    });
    client.on('data', (chunk: Buffer) => {
      const framed = framer.push(chunk);
      if ('refuse' in framed) return end(framed.refuse === undefined ? undefined : fatalError('0A000', framed.refuse));
      if (framed.answer !== undefined) client.write(framed.answer);
      for (const message of framed.messages) {
        hold.sent(message, startup);
        startup = false;
        inner.write(message);
      }
      // Terminate: the client is gone from here on (and what it left open is rolled back), as
      // PostgreSQL ends the session at once; nothing after it is read.
      if (framed.terminated) return end();
      watch();
    });
    inner.on('data', (chunk: Buffer) => {
      watcher.push(chunk);
      client.write(chunk);
    });
    client.on('error', () => end());
    inner.on('error', () => end());
    client.on('close', () => end());
    inner.on('close', () => end());
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
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
