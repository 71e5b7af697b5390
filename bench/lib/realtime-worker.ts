/**
 * A subscriber process of the realtime benchmark (forked by bench/lib/realtime-clients.ts): holds a
 * share of the subscribers' socket.io connections and checks what each receives (completeness,
 * per-publisher order, the order of message ids, latency against the publisher's monotonic clock).
 * Driven over IPC by the main process; never connects anywhere but the URLs it is given (loopback).
 */
import { io, type Socket } from 'socket.io-client';
import { LatencyHistogram } from './latency.ts';
import {
  CHANNEL,
  type ConnectFailure,
  deliveryHash,
  EVENT,
  hashString,
  monotonicMs,
  OrderFingerprint,
  SeqSet,
  type SubscriberResult,
  type SubscriberSpec,
  type WorkerAnswer,
  type WorkerEnvelope,
  type WorkerProgress,
} from './realtime-shared.ts';

interface PublisherTrack {
  last: number;
  seen: SeqSet;
}

interface Subscriber {
  spec: SubscriberSpec;
  socket: Socket;
  connected: boolean;
  received: number;
  inWindow: number;
  orderViolations: number;
  duplicates: number;
  unexpected: number;
  malformed: number;
  checksum: number;
  order: OrderFingerprint;
  publishers: Map<number, PublisherTrack>;
  disconnectReasons: string[];
  realtimeErrors: Record<string, number>;
}

const send = (message: WorkerAnswer | WorkerProgress) => process.send?.(message);

let subscribers: Subscriber[] = [];
let latency = new LatencyHistogram();
let windowFrom = Number.POSITIVE_INFINITY;
let windowTo = Number.NEGATIVE_INFINITY;
let knownPublishers = new Set<number>();
let lastPresenceAt = 0;
let closing = false;

function onTick(sub: Subscriber, message: unknown): void {
  const now = monotonicMs();
  const m = message as { sentAt?: unknown; seq?: unknown; publisher?: unknown; meta?: { messageId?: unknown } };
  const { sentAt, seq, publisher } = m;
  const messageId = m.meta?.messageId;
  sub.received++;
  if (
    typeof sentAt !== 'number' ||
    typeof seq !== 'number' ||
    typeof publisher !== 'number' ||
    typeof messageId !== 'string' ||
    !Number.isSafeInteger(seq) ||
    seq < 0
  ) {
    sub.malformed++;
    return;
  }
  const idHash = hashString(messageId);
  sub.order.add(idHash);
  sub.checksum = (sub.checksum + deliveryHash(idHash, publisher, seq)) >>> 0;
  if (!knownPublishers.has(publisher)) {
    sub.unexpected++;
    return;
  }
  let track = sub.publishers.get(publisher);
  if (track === undefined) {
    track = { last: -1, seen: new SeqSet() };
    sub.publishers.set(publisher, track);
  }
  if (seq <= track.last) sub.orderViolations++;
  else track.last = seq;
  if (!track.seen.add(seq)) sub.duplicates++;
  if (sentAt >= windowFrom && sentAt < windowTo) {
    sub.inWindow++;
    latency.record(now - sentAt);
  }
}

function newSubscriber(spec: SubscriberSpec): Subscriber {
  const socket = io(spec.url, {
    transports: ['websocket'],
    auth: { token: spec.token },
    forceNew: true, // one connection per subscriber, never multiplexed
    reconnection: false, // a dropped subscriber must show, not come back silently
    timeout: 30_000,
  });
  const sub: Subscriber = {
    spec,
    socket,
    connected: false,
    received: 0,
    inWindow: 0,
    orderViolations: 0,
    duplicates: 0,
    unexpected: 0,
    malformed: 0,
    checksum: 0,
    order: new OrderFingerprint(),
    publishers: new Map(),
    disconnectReasons: [],
    realtimeErrors: {},
  };
  socket.on(EVENT, (message: unknown) => onTick(sub, message));
  const presence = () => {
    lastPresenceAt = monotonicMs();
  };
  socket.on('presence:join', presence);
  socket.on('presence:leave', presence);
  socket.on('realtime:error', (e: { code?: unknown }) => {
    const code = typeof e?.code === 'string' ? e.code : 'unknown';
    sub.realtimeErrors[code] = (sub.realtimeErrors[code] ?? 0) + 1;
  });
  socket.on('disconnect', (reason: string) => {
    if (!closing) sub.disconnectReasons.push(reason);
    sub.connected = false;
  });
  return sub;
}

/** A subscriber that failed to connect or subscribe: reported as such, then left out of the checks. */
function drop(sub: Subscriber): void {
  sub.socket.removeAllListeners();
  sub.socket.close();
  subscribers = subscribers.filter((s) => s !== sub);
}

async function connectOne(spec: SubscriberSpec): Promise<ConnectFailure | undefined> {
  const sub = newSubscriber(spec);
  subscribers.push(sub);
  try {
    await new Promise<void>((resolve, reject) => {
      sub.socket.once('connect', () => resolve());
      sub.socket.once('connect_error', (err: Error & { data?: unknown }) =>
        reject(new Error(`${err.message}${err.data === undefined ? '' : ` ${JSON.stringify(err.data)}`}`)),
      );
    });
  } catch (err) {
    drop(sub);
    return { index: spec.index, instance: spec.instance, stage: 'connect', reason: (err as Error).message };
  }
  try {
    const ack = (await sub.socket.timeout(30_000).emitWithAck('realtime:subscribe', { channel: CHANNEL })) as {
      ok?: unknown;
      error?: { code?: string; message?: string };
    };
    if (ack?.ok !== true) throw new Error(`refused: ${JSON.stringify(ack?.error ?? ack)}`);
  } catch (err) {
    drop(sub);
    return { index: spec.index, instance: spec.instance, stage: 'subscribe', reason: (err as Error).message };
  }
  sub.connected = true;
  return undefined;
}

async function connectAll(specs: SubscriberSpec[], concurrency: number): Promise<ConnectFailure[]> {
  const failures: ConnectFailure[] = [];
  let next = 0;
  let done = 0;
  const timer = setInterval(() => send({ type: 'progress', connected: done }), 500);
  try {
    await Promise.all(
      Array.from({ length: Math.max(1, Math.min(concurrency, specs.length)) }, async () => {
        while (next < specs.length) {
          const spec = specs[next++] as SubscriberSpec;
          const failure = await connectOne(spec);
          if (failure) failures.push(failure);
          done++;
        }
      }),
    );
  } finally {
    clearInterval(timer);
  }
  send({ type: 'progress', connected: done });
  return failures;
}

function collect(acked: Record<string, string>): SubscriberResult[] {
  const ackedSets = new Map(Object.entries(acked).map(([p, bits]) => [Number(p), SeqSet.fromBase64(bits)]));
  return subscribers.map((sub) => {
    let missing = 0;
    let unexpected = sub.unexpected;
    for (const [p, ackedSet] of ackedSets) {
      const seen = sub.publishers.get(p)?.seen ?? new SeqSet();
      missing += ackedSet.countMissingFrom(seen);
      unexpected += seen.countMissingFrom(ackedSet);
    }
    return {
      index: sub.spec.index,
      instance: sub.spec.instance,
      received: sub.received,
      inWindow: sub.inWindow,
      orderViolations: sub.orderViolations,
      duplicates: sub.duplicates,
      missing,
      unexpected,
      malformed: sub.malformed,
      checksum: sub.checksum,
      order: sub.order.toString(),
      disconnectReasons: sub.disconnectReasons,
      realtimeErrors: sub.realtimeErrors,
    };
  });
}

async function closeAll(): Promise<void> {
  closing = true;
  for (const sub of subscribers) sub.socket.close();
  subscribers = [];
  latency = new LatencyHistogram();
  knownPublishers = new Set();
  windowFrom = Number.POSITIVE_INFINITY;
  windowTo = Number.NEGATIVE_INFINITY;
  lastPresenceAt = 0;
  // Lets the close frames go out before the next scenario counts anything.
  await new Promise((r) => setTimeout(r, 200));
  closing = false;
}

process.on('message', (raw: WorkerEnvelope) => {
  const { id } = raw;
  void (async (): Promise<WorkerAnswer> => {
    switch (raw.type) {
      case 'connect': {
        const started = monotonicMs();
        const failures = await connectAll(raw.subscribers, raw.concurrency);
        return { id, type: 'connected', failures, seconds: (monotonicMs() - started) / 1000 };
      }
      case 'measure':
        windowFrom = raw.fromMs;
        windowTo = raw.toMs;
        knownPublishers = new Set(raw.publishers);
        return { id, type: 'ok' };
      case 'status': {
        let received = 0;
        let connected = 0;
        let disconnects = 0;
        let realtimeErrors = 0;
        for (const s of subscribers) {
          received += s.received;
          if (s.connected) connected++;
          disconnects += s.disconnectReasons.length;
          for (const n of Object.values(s.realtimeErrors)) realtimeErrors += n;
        }
        return { id, type: 'status', connected, received, lastPresenceAt, disconnects, realtimeErrors };
      }
      case 'collect':
        return { id, type: 'result', subscribers: collect(raw.acked), latency: latency.toJSON() };
      case 'close':
        await closeAll();
        return { id, type: 'ok' };
    }
  })().then(send, (err: Error) => send({ id, type: 'error', message: err.stack ?? err.message }));
});

// The main process went away (crash, SIGKILL): nothing to report to, close and leave.
process.on('disconnect', () => {
  closing = true;
  for (const sub of subscribers) sub.socket.close();
  process.exit(0);
});
process.on('SIGINT', () => {}); // the main process handles ^C and closes us in order
