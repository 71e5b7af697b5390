import type { Socket } from 'socket.io';

interface OutgoingPacket {
  data?: unknown;
}
/** The parts of engine.io's connection this watch reads (not in its public types). */
interface EngineConnection {
  on(event: 'packetCreate', listener: (packet: OutgoingPacket) => void): void;
  on(event: 'flush', listener: (packets: OutgoingPacket[]) => void): void;
  transport?: { socket?: { bufferedAmount?: number; terminate?: () => void } };
}

/** How long a disconnected slow consumer's socket may take to flush before it is cut. */
const TERMINATE_AFTER_MS = 5_000;

const sizeOf = (packet: OutgoingPacket): number =>
  typeof packet.data === 'string'
    ? packet.data.length
    : packet.data instanceof Uint8Array || packet.data instanceof ArrayBuffer
      ? packet.data.byteLength
      : 0;

/**
 * Whether an encoded packet, as engine.io is handed it, is a channel message: a socket.io EVENT
 * (`2["name",…]`) that is not one of the protocol's own (`realtime:…`, `presence:…`).
 */
const isMessage = (data: unknown): boolean =>
  typeof data === 'string' &&
  data.startsWith('2["') &&
  !data.startsWith('realtime:', 3) &&
  !data.startsWith('presence:', 3);

export interface OutputWatch {
  maxBytes: number;
  /** Called once when the connection falls behind; it may send a last packet. */
  onSlow: () => void;
  /** Called for each channel message handed to the connection (not protocol events or acknowledgements). */
  onMessage?: (() => void) | undefined;
}

/**
 * Watches what engine.io is handed for one connection, one listener per packet. Bounds what the
 * server holds for it: packets engine.io has not yet handed to the WebSocket, plus what the
 * WebSocket has not yet written to the network. Past `maxBytes` the client is not reading fast
 * enough: `onSlow` is called, the socket is disconnected, and its connection cut if it has not
 * drained within a few seconds. Also counts the channel messages it is handed (`onMessage`).
 */
export function watchOutput(socket: Socket, watch: OutputWatch): void {
  const { maxBytes, onSlow, onMessage } = watch;
  const conn = socket.conn as unknown as EngineConnection;
  let queued = 0;
  let tripped = false;
  conn.on('flush', (packets) => {
    for (const p of packets) queued -= sizeOf(p);
  });
  conn.on('packetCreate', (packet) => {
    if (onMessage !== undefined && isMessage(packet.data)) onMessage();
    queued += sizeOf(packet);
    if (tripped) return;
    const inWebSocket = conn.transport?.socket?.bufferedAmount ?? 0;
    if (queued + inWebSocket <= maxBytes) return;
    tripped = true;
    onSlow();
    socket.disconnect(true);
    const ws = conn.transport?.socket;
    setTimeout(() => ws?.terminate?.(), TERMINATE_AFTER_MS).unref();
  });
}
