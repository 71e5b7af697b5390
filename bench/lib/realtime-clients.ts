/**
 * The realtime benchmark's clients: subscriber processes (bench/lib/realtime-worker.ts, forked and
 * driven over IPC) and the publishers, which run in the main process.
 */
import { type ChildProcess, fork } from 'node:child_process';
import path from 'node:path';
import { io, type Socket } from 'socket.io-client';
import { LatencyHistogram } from './latency.ts';
import {
  CHANNEL,
  type ConnectFailure,
  deliveryHash,
  EVENT,
  hashString,
  monotonicMs,
  SeqSet,
  type SubscriberResult,
  type SubscriberSpec,
  type TickPayload,
  type WorkerAnswer,
  type WorkerEnvelope,
  type WorkerProgress,
  type WorkerRequest,
  type WorkerResult,
  type WorkerStatus,
} from './realtime-shared.ts';

const WORKER = path.join(import.meta.dirname, 'realtime-worker.ts');

type Pending = { resolve: (a: WorkerAnswer) => void; reject: (e: Error) => void };

/** One forked subscriber process. */
class SubscriberProcess {
  readonly child: ChildProcess;
  #nextId = 1;
  #pending = new Map<number, Pending>();
  connected = 0;
  readonly exited: Promise<void>;

  readonly index: number;

  constructor(index: number) {
    this.index = index;
    this.child = fork(WORKER, [], {
      execArgv: ['--max-old-space-size=2048'],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      env: { PATH: process.env.PATH ?? '', NODE_ENV: 'production' },
    });
    this.child.on('message', (m: WorkerAnswer | WorkerProgress) => {
      if (m.type === 'progress') {
        this.connected = m.connected;
        return;
      }
      const p = this.#pending.get(m.id);
      if (p === undefined) return;
      this.#pending.delete(m.id);
      if (m.type === 'error') p.reject(new Error(`subscriber process ${this.index}: ${m.message}`));
      else p.resolve(m);
    });
    this.exited = new Promise((resolve) =>
      this.child.on('exit', (code, signal) => {
        for (const p of this.#pending.values())
          p.reject(new Error(`subscriber process ${this.index} exited (${signal ?? code})`));
        this.#pending.clear();
        resolve();
      }),
    );
  }

  request<T extends WorkerAnswer['type']>(
    request: WorkerRequest,
    expect: T,
    timeoutMs = 600_000,
  ): Promise<Extract<WorkerAnswer, { type: T }>> {
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        reject(new Error(`subscriber process ${this.index}: no answer to ${request.type} in ${timeoutMs} ms`));
      }, timeoutMs);
      this.#pending.set(id, {
        resolve: (a) => {
          clearTimeout(timer);
          if (a.type === expect) resolve(a as Extract<WorkerAnswer, { type: T }>);
          else reject(new Error(`subscriber process ${this.index}: ${a.type} answered to ${request.type}`));
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      this.child.send({ ...request, id } satisfies WorkerEnvelope);
    });
  }
}

/** The subscribers, spread over `processes` forked processes. */
export class SubscriberPool {
  readonly processes: SubscriberProcess[];

  constructor(processes: number) {
    this.processes = Array.from({ length: processes }, (_, i) => new SubscriberProcess(i));
  }

  get pids(): number[] {
    return this.processes.map((p) => p.child.pid as number);
  }

  /** Subscribers connected so far (progress reports of the processes). */
  connectedSoFar(): number {
    return this.processes.reduce((n, p) => n + p.connected, 0);
  }

  /**
   * Connects and subscribes the subscribers: contiguous blocks per process (each block alternating
   * between the instances), `concurrency` connection attempts at a time in all.
   */
  async connect(
    specs: SubscriberSpec[],
    concurrency: number,
  ): Promise<{ failures: ConnectFailure[]; seconds: number }> {
    const k = this.processes.length;
    const per = Math.ceil(specs.length / k);
    for (const p of this.processes) p.connected = 0;
    const answers = await Promise.all(
      this.processes.map((p, i) =>
        p.request(
          {
            type: 'connect',
            subscribers: specs.slice(i * per, (i + 1) * per),
            concurrency: Math.max(1, Math.round(concurrency / k)),
          },
          'connected',
        ),
      ),
    );
    return {
      failures: answers.flatMap((a) => a.failures),
      seconds: Math.max(...answers.map((a) => a.seconds)),
    };
  }

  async measure(fromMs: number, toMs: number, publishers: number[]): Promise<void> {
    await Promise.all(this.processes.map((p) => p.request({ type: 'measure', fromMs, toMs, publishers }, 'ok')));
  }

  async status(): Promise<WorkerStatus> {
    const all = await Promise.all(this.processes.map((p) => p.request({ type: 'status' }, 'status', 30_000)));
    return {
      connected: all.reduce((n, s) => n + s.connected, 0),
      received: all.reduce((n, s) => n + s.received, 0),
      lastPresenceAt: Math.max(...all.map((s) => s.lastPresenceAt)),
      disconnects: all.reduce((n, s) => n + s.disconnects, 0),
      realtimeErrors: all.reduce((n, s) => n + s.realtimeErrors, 0),
    };
  }

  async collect(
    acked: Record<string, string>,
  ): Promise<{ subscribers: SubscriberResult[]; latency: LatencyHistogram }> {
    const results: WorkerResult[] = await Promise.all(
      this.processes.map((p) => p.request({ type: 'collect', acked }, 'result')),
    );
    const latency = new LatencyHistogram();
    for (const r of results) latency.merge(r.latency);
    return { subscribers: results.flatMap((r) => r.subscribers).sort((a, b) => a.index - b.index), latency };
  }

  /** Closes every subscriber's connection (the processes stay for the next scenario). */
  async closeConnections(): Promise<void> {
    await Promise.all(this.processes.map((p) => p.request({ type: 'close' }, 'ok', 60_000)));
  }

  /** Ends the processes (their connections close with them). */
  async stop(): Promise<void> {
    for (const p of this.processes) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill();
    await Promise.all(this.processes.map((p) => p.exited));
  }
}

// ---- publishers -------------------------------------------------------------------------------

export interface PublisherFigures {
  id: number;
  instance: number;
  /** Publishes emitted (ack or not). */
  sent: number;
  accepted: number;
  /** Accepted, of those sent within the measured window. */
  acceptedInWindow: number;
  refused: Record<string, number>;
  /** Acks not received within the ack timeout, and transport errors. */
  errors: Record<string, number>;
  /** Acks that came back with a lower seq than an earlier ack of the same publisher (information). */
  acksOutOfOrder: number;
  realtimeErrors: Record<string, number>;
  disconnectReasons: string[];
}

const ACK_TIMEOUT_MS = 15_000;

/** A publisher: its own user and connection, subscribed to the channel, a bounded window of publishes in flight. */
export class Publisher {
  socket: Socket | undefined;
  readonly acked = new SeqSet();
  /** Sum of deliveryHash over the accepted publishes (mod 2^32), as subscribers sum their deliveries. */
  checksum = 0;
  readonly ackLatency = new LatencyHistogram();
  readonly figures: PublisherFigures;
  #seq = 0;
  #inFlight = 0;
  #lastAckSeq = -1;
  #running = false;
  #closing = false;
  #drained: (() => void) | undefined;

  readonly id: number;
  readonly instance: number;
  readonly url: string;
  readonly token: string;

  constructor(id: number, instance: number, url: string, token: string) {
    this.id = id;
    this.instance = instance;
    this.url = url;
    this.token = token;
    this.figures = {
      id,
      instance,
      sent: 0,
      accepted: 0,
      acceptedInWindow: 0,
      refused: {},
      errors: {},
      acksOutOfOrder: 0,
      realtimeErrors: {},
      disconnectReasons: [],
    };
  }

  get inFlight(): number {
    return this.#inFlight;
  }

  /** Connects and subscribes; throws when either is refused. */
  async connect(): Promise<void> {
    const socket = io(this.url, {
      transports: ['websocket'],
      auth: { token: this.token },
      forceNew: true,
      reconnection: false,
      timeout: 30_000,
    });
    this.socket = socket;
    socket.on('realtime:error', (e: { code?: unknown }) => {
      const code = typeof e?.code === 'string' ? e.code : 'unknown';
      this.figures.realtimeErrors[code] = (this.figures.realtimeErrors[code] ?? 0) + 1;
    });
    socket.on('disconnect', (reason: string) => {
      if (!this.#closing) this.figures.disconnectReasons.push(reason);
    });
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', () => resolve());
      socket.once('connect_error', (err: Error & { data?: unknown }) =>
        reject(
          new Error(
            `publisher ${this.id}: connect refused: ${err.message}${err.data === undefined ? '' : ` ${JSON.stringify(err.data)}`}`,
          ),
        ),
      );
    });
    const ack = (await socket.timeout(30_000).emitWithAck('realtime:subscribe', { channel: CHANNEL })) as {
      ok?: unknown;
      error?: unknown;
    };
    if (ack?.ok !== true) throw new Error(`publisher ${this.id}: subscribe refused: ${JSON.stringify(ack)}`);
  }

  /**
   * Publishes until `stopAt` (monotonicMs), `window` at a time; resolves when the last ack is in.
   * With `perSecond` > 0 the publishes are also paced at that rate (an offered load), else each one
   * goes as soon as the window allows (a closed loop).
   */
  run(window: number, fromMs: number, stopAt: number, perSecond = 0): Promise<void> {
    this.#running = true;
    const done = new Promise<void>((resolve) => {
      this.#drained = resolve;
    });
    const intervalMs = perSecond > 0 ? 1000 / perSecond : 0;
    let dueAt = monotonicMs();
    let paced: NodeJS.Timeout | undefined;
    const pump = () => {
      while (this.#running && this.#inFlight < window) {
        const now = monotonicMs();
        if (now >= stopAt) {
          this.#running = false;
          break;
        }
        if (intervalMs > 0) {
          if (now < dueAt) {
            paced ??= setTimeout(() => {
              paced = undefined;
              pump();
            }, dueAt - now);
            break;
          }
          dueAt += intervalMs;
        }
        this.#publish(fromMs, stopAt);
      }
      if (!this.#running && this.#inFlight === 0) {
        clearTimeout(paced);
        this.#drained?.();
      }
    };
    this.#pump = pump;
    // Stops at stopAt even when every publish is waiting for its ack.
    const timer = setTimeout(
      () => {
        this.#running = false;
        pump();
      },
      Math.max(0, stopAt - monotonicMs()),
    );
    pump();
    return done.finally(() => clearTimeout(timer));
  }

  #pump: () => void = () => {};

  #publish(fromMs: number, toMs: number): void {
    const socket = this.socket as Socket;
    const seq = this.#seq++;
    const sentAt = monotonicMs();
    const payload: TickPayload = { sentAt, seq, publisher: this.id };
    this.#inFlight++;
    this.figures.sent++;
    socket
      .timeout(ACK_TIMEOUT_MS)
      .emit(
        'realtime:publish',
        { channel: CHANNEL, event: EVENT, payload },
        (err: Error | null, res?: { ok?: unknown; messageId?: unknown; error?: { code?: unknown } }) => {
          this.#inFlight--;
          const inWindow = sentAt >= fromMs && sentAt < toMs;
          if (err) {
            const kind = 'ack timeout';
            this.figures.errors[kind] = (this.figures.errors[kind] ?? 0) + 1;
          } else if (res?.ok === true && typeof res.messageId === 'string') {
            this.ackLatency.record(monotonicMs() - sentAt);
            this.acked.add(seq);
            this.checksum = (this.checksum + deliveryHash(hashString(res.messageId), this.id, seq)) >>> 0;
            this.figures.accepted++;
            if (inWindow) this.figures.acceptedInWindow++;
            if (seq < this.#lastAckSeq) this.figures.acksOutOfOrder++;
            else this.#lastAckSeq = seq;
          } else if (res?.ok === false) {
            const code = typeof res.error?.code === 'string' ? res.error.code : 'unknown';
            this.figures.refused[code] = (this.figures.refused[code] ?? 0) + 1;
          } else {
            const kind = 'malformed ack';
            this.figures.errors[kind] = (this.figures.errors[kind] ?? 0) + 1;
          }
          this.#pump();
        },
      );
  }

  close(): void {
    this.#closing = true;
    this.#running = false;
    this.socket?.close();
  }
}
