/**
 * The realtime ceiling: bare socket.io (WebSocket transport, in-memory adapter) speaking just enough
 * of the service's protocol for the benchmark's clients (`realtime:subscribe` joins the channel's
 * room, `realtime:publish` broadcasts the payload with a `meta.messageId`), with no token check,
 * policy, database or history. Two of them stand in for the two instances, on PORT: the one started
 * with RELAY_TO (the other's URL) hands its publishes to that one, which gives every message its id
 * and its place in one order, broadcasts it to its own sockets and sends it back over the same
 * connection for the first to broadcast to its sockets; so every subscriber sees one order, as with
 * the service.
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { Server, type Socket } from 'socket.io';
import { io as connect } from 'socket.io-client';

interface Publish {
  channel: string;
  event: string;
  payload: Record<string, unknown>;
}
interface Delivery {
  channel: string;
  event: string;
  body: Record<string, unknown>;
}
type Ack = (answer: { ok: boolean; messageId?: string }) => void;

const roomOf = (channel: string) => `channel:${channel}`;
const relayTo = process.env.RELAY_TO;
const upstream =
  relayTo === undefined ? undefined : connect(relayTo, { transports: ['websocket'], auth: { relay: true } });
// Up (for the benchmark's health wait) once the relay, if any, is connected.
const server = http.createServer((req, res) => {
  const up = upstream === undefined || upstream.connected;
  res.writeHead(req.url === '/api/health' && up ? 200 : 503, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ up }));
});
const io = new Server(server, { transports: ['websocket'], serveClient: false });
/** The relaying server's connection, on the server that orders the messages. */
let follower: Socket | undefined;

const broadcast = (d: Delivery) => {
  io.to(roomOf(d.channel)).emit(d.event, d.body);
};
/** Gives a message its id and place, broadcasts it here and hands it to the relaying server. */
function order(p: Publish): string {
  const messageId = randomUUID();
  const delivery: Delivery = {
    channel: p.channel,
    event: p.event,
    body: { ...p.payload, meta: { channel: p.channel, messageId, timestamp: new Date().toISOString() } },
  };
  broadcast(delivery);
  follower?.emit('deliver', delivery);
  return messageId;
}

upstream?.on('deliver', broadcast);

io.on('connection', (socket) => {
  if ((socket.handshake.auth as { relay?: unknown }).relay === true) {
    follower = socket;
    socket.on('publish', (p: Publish, ack: Ack) => ack({ ok: true, messageId: order(p) }));
    return;
  }
  socket.on('realtime:subscribe', (m: { channel: string }, ack: Ack) => {
    void socket.join(roomOf(m.channel));
    ack({ ok: true });
  });
  socket.on('realtime:publish', (p: Publish, ack: Ack) => {
    if (upstream === undefined) ack({ ok: true, messageId: order(p) });
    else upstream.emit('publish', p, ack);
  });
});

server.listen(Number(process.env.PORT), '127.0.0.1');
process.on('SIGTERM', () => {
  upstream?.close();
  io.close(() => process.exit(0));
});
