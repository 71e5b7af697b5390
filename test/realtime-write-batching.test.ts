// batchWrites (src/realtime/write-batching.ts) on a real socket.io server and client over loopback:
// the packets engine.io flushes together reach the TCP socket in one write.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Server } from 'socket.io';
import { io as connect } from 'socket.io-client';
import t from 'tap';
import { batchWrites } from '../src/realtime/write-batching.ts';

interface TcpSocket {
  _writev?: (...args: unknown[]) => unknown;
  _write: (...args: unknown[]) => unknown;
}

/** Emits `count` events in one tick to one client; returns how many writes its TCP socket made and what arrived. */
async function burst(t: { teardown(fn: () => unknown): void }, withBatching: boolean, count: number) {
  const http = createServer();
  const server = new Server(http, { transports: ['websocket'] });
  t.teardown(() => server.close());
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const connected = new Promise<import('socket.io').Socket>((resolve) => server.on('connection', resolve));
  const client = connect(`http://127.0.0.1:${(http.address() as AddressInfo).port}`, { transports: ['websocket'] });
  t.teardown(() => client.close());
  const socket = await connected;
  if (withBatching) batchWrites(socket);
  const tcp = (socket.conn as unknown as { transport: { socket: { _socket: TcpSocket } } }).transport.socket._socket;
  let writes = 0;
  for (const method of ['_writev', '_write'] as const) {
    const original = tcp[method];
    if (original === undefined) continue;
    tcp[method] = function (this: unknown, ...args: unknown[]) {
      writes++;
      return original.apply(this, args);
    };
  }
  const received: number[] = [];
  const all = new Promise<void>((resolve) =>
    client.on('m', (n: number) => {
      received.push(n);
      if (received.length === count) resolve();
    }),
  );
  for (let n = 0; n < count; n++) socket.emit('m', n);
  await all;
  return { writes, received };
}

t.test('packets flushed together leave in one write, in order', async (t) => {
  // The first packet is written at once; the other four wait for that write and are flushed together.
  const { writes, received } = await burst(t, true, 5);
  t.same(received, [0, 1, 2, 3, 4]);
  t.equal(writes, 2);
});

t.test('without it, each of those packets is a write of its own', async (t) => {
  const { writes, received } = await burst(t, false, 5);
  t.same(received, [0, 1, 2, 3, 4]);
  t.equal(writes, 5);
});
