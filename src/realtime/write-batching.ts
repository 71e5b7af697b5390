import type { Socket } from 'socket.io';

/** The parts of engine.io's connection this reads (not in its public types). */
interface EngineConnection {
  on(event: 'flush', listener: (packets: unknown[]) => void): void;
  on(event: 'drain', listener: () => void): void;
  /** WebSocket transport: `socket` is the ws WebSocket, whose `_socket` is the TCP socket. */
  transport?: { socket?: { _socket?: { cork(): void; uncork(): void } } };
}

/**
 * Writes the packets engine.io flushes together in one system call. engine.io holds the packets that
 * arrive while a write is under way and then hands them to the WebSocket in one `send`, which writes
 * each as a frame of its own: one `writev` per message and connection. With 1,000 subscribers those
 * calls were the largest single cost of a delivery (39% of an instance's CPU samples in a closed
 * loop, most of it the kernel's TCP work for each call). The TCP socket is corked for the length of
 * the flush (engine.io's `flush` and `drain` events surround its synchronous `send`), so the frames
 * leave in one call; a lone packet is written as before. In that closed loop a flush carried 1.32
 * packets on average: a quarter fewer calls.
 */
export function batchWrites(socket: Socket): void {
  const conn = socket.conn as unknown as EngineConnection;
  let corked: { uncork(): void } | undefined;
  conn.on('flush', (packets) => {
    // Never left corked: a flush whose drain did not come (a send that threw) is written out first.
    corked?.uncork();
    corked = undefined;
    if (packets.length < 2) return;
    const tcp = conn.transport?.socket?._socket;
    tcp?.cork();
    corked = tcp;
  });
  conn.on('drain', () => {
    corked?.uncork();
    corked = undefined;
  });
}
