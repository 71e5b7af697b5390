import type { Server } from 'socket.io';

/** At shutdown, how long clients have to complete the WebSocket close before they are cut. */
const CLOSE_GRACE_MS = 1_000;
const WS_CLOSED = 3;

/** The part of a `ws` WebSocket that shutdown uses (engine.io's transport holds one). */
interface RawWebSocket {
  readyState: number;
  terminate(): void;
}

/** engine.io's connections, by id, each with its transport's WebSocket (not in engine.io's public types). */
interface EngineInternals {
  clients: Record<string, { transport?: { socket?: RawWebSocket } }>;
}

/**
 * Disconnects this instance's sockets and closes engine.io, without closing the HTTP server (which
 * is Fastify's): clients get CLOSE_GRACE_MS to take the disconnect, and a connection that does not
 * answer the close is cut, so that the HTTP server, which waits for every connection, can close.
 * Then the adapter is closed, which tells the other instances.
 */
export async function closeSockets(io: Server): Promise<void> {
  const engine = io.engine as unknown as EngineInternals;
  const connections = Object.values(engine.clients)
    .map((c) => c.transport?.socket)
    .filter((ws): ws is RawWebSocket => ws !== undefined);
  io.local.disconnectSockets(true);
  io.engine.close();
  const deadline = Date.now() + CLOSE_GRACE_MS;
  while (connections.some((ws) => ws.readyState !== WS_CLOSED) && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  for (const ws of connections) if (ws.readyState !== WS_CLOSED) ws.terminate();
  const adapter = io.of('/').adapter as { close?: () => Promise<void> | void };
  await Promise.resolve(adapter.close?.()).catch(() => {});
}
