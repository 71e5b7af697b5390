/**
 * The cluster benchmark's traffic (bench/cluster.ts): people signing up and verifying by the code
 * their email brings (read from a real SMTP server), signing in, refreshing, reading the directory,
 * asking for embeddings, publishing to and listening on realtime channels, and signing out while
 * their access token is tried on every instance. Every answer is counted per phase and operation;
 * every write the service acknowledged is remembered, to be looked for afterwards (ClusterLedger).
 */
import { io, type Socket } from 'socket.io-client';
import type { SmtpCapture } from '../../test/helpers/smtp.ts';
import { LatencyHistogram } from './latency.ts';

export const PASSWORD = 'cluster-bench-password-1';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Answers that a fault may bring (documented: the client retries); anything else counts against the phase. */
export type Outcome = 'ok' | 'retry' | 'refused' | 'server error' | 'network';

export class PhaseRecorder {
  phase = 'setup';
  private readonly stats = new Map<
    string,
    { phase: string; operation: string; count: number; errors: Map<string, number>; latency: LatencyHistogram }
  >();
  readonly serverErrors: string[] = [];
  private readonly phaseStarts = new Map<string, number>();

  enter(phase: string): void {
    this.phase = phase;
    this.phaseStarts.set(phase, performance.now());
  }

  /** Records one answer: `status` 0 is a network failure (no HTTP answer at all). */
  record(operation: string, status: number, ms: number, detail = ''): void {
    const key = `${this.phase}\u0000${operation}`;
    let s = this.stats.get(key);
    if (s === undefined) {
      s = { phase: this.phase, operation, count: 0, errors: new Map(), latency: new LatencyHistogram() };
      this.stats.set(key, s);
    }
    s.count++;
    s.latency.record(ms);
    if (status >= 200 && status < 300) return;
    const label = status === 0 ? 'network' : String(status);
    s.errors.set(label, (s.errors.get(label) ?? 0) + 1);
    // 503 (and 502 from the balancer for a request in flight on a killed instance) are the retry
    // answers; a 500 or any other 5xx is a failure of the run.
    if (status >= 500 && status !== 503 && !(status === 502 && this.phase === 'instance down')) {
      this.serverErrors.push(`${this.phase} ${operation}: ${status} ${detail.slice(0, 300)}`);
    }
  }

  rows(): { phase: string; operation: string; rate: number; p99: number; count: number; errors: string }[] {
    const phases = [...this.phaseStarts.keys()];
    const durations = new Map<string, number>();
    phases.forEach((p, i) => {
      const start = this.phaseStarts.get(p) ?? 0;
      const end = i + 1 < phases.length ? (this.phaseStarts.get(phases[i + 1] as string) ?? 0) : performance.now();
      durations.set(p, (end - start) / 1000);
    });
    return [...this.stats.values()]
      .filter((s) => s.phase !== 'setup' && s.phase !== 'checks')
      .map((s) => ({
        phase: s.phase,
        operation: s.operation,
        count: s.count,
        rate: s.count / (durations.get(s.phase) ?? 1),
        p99: s.latency.quantile(0.99),
        errors: [...s.errors].map(([k, v]) => `${v}×${k}`).join(' ') || '0',
      }));
  }
}

/** What the service acknowledged, to be found in the database afterwards. */
export class ClusterLedger {
  readonly signUps = new Set<string>();
  readonly verified = new Set<string>();
  /** Per session chain: the refresh token of its last acknowledged rotation (undefined: the outcome of its last try is unknown). */
  readonly chains = new Map<number, { refreshToken: string; rotations: number; uncertain: boolean }>();
  /** Realtime messages acknowledged: id → channel, payload number, when the publish was sent and acknowledged. */
  readonly messages = new Map<string, { channel: string; n: number; sentAt: number; ackAt: number }>();
  readonly revocations: { ms: number; phase: string; instances: number }[] = [];
  readonly slowRevocations: string[] = [];
}

export interface Session {
  email: string;
  accessToken: string;
  refreshToken: string;
  chain: number;
}

interface Json {
  status: number;
  body: Record<string, unknown>;
}

/** One request through `fetch`, timed and recorded; network failures are status 0. */
export async function call(
  recorder: PhaseRecorder,
  operation: string,
  url: string,
  init: { method?: string; body?: unknown; token?: string } = {},
): Promise<Json> {
  const began = performance.now();
  try {
    const res = await fetch(url, {
      method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
      headers: {
        ...(init.body === undefined ? {} : { 'content-type': 'application/json' }),
        ...(init.token === undefined ? {} : { authorization: `Bearer ${init.token}` }),
      },
      ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) }),
      signal: AbortSignal.timeout(30_000),
    });
    const text = await res.text();
    recorder.record(operation, res.status, performance.now() - began, text);
    let body: Record<string, unknown> = {};
    try {
      body = text === '' ? {} : (JSON.parse(text) as Record<string, unknown>);
    } catch {
      // not JSON (HAProxy's own pages)
    }
    return { status: res.status, body };
  } catch (err) {
    recorder.record(operation, 0, performance.now() - began, (err as Error).message);
    return { status: 0, body: {} };
  }
}

export interface TrafficOptions {
  /** The service through the balancer. */
  base: string;
  /** The instances running now, each reached directly (for the revocation probes). */
  instanceUrls: () => string[];
  smtp: SmtpCapture;
  recorder: PhaseRecorder;
  ledger: ClusterLedger;
  adminToken: string;
  runId: string;
}

/** The traffic of one run: loops started by start() and ended by stop(). */
export class ClusterTraffic {
  private running = false;
  private readonly loops: Promise<void>[] = [];
  readonly sessions: Session[] = [];
  private chainCount = 0;
  private signUpCount = 0;
  private publishCount = 0;

  private readonly o: TrafficOptions;

  constructor(o: TrafficOptions) {
    this.o = o;
  }

  /** A new account, verified by the code its email brought; undefined when a fault refused a step. */
  async newAccount(operationPrefix = '', shared = true): Promise<Session | undefined> {
    const { base, smtp, recorder, ledger } = this.o;
    const email = `cluster-${this.o.runId}-${this.signUpCount++}@example.com`;
    const signUp = await call(recorder, `${operationPrefix}createUser`, `${base}/api/auth/users?client_type=mobile`, {
      body: { email, password: PASSWORD },
    });
    if (signUp.status !== 202) return this.failed(`sign-up ${signUp.status} ${JSON.stringify(signUp.body)}`);
    ledger.signUps.add(email);
    const binding = signUp.body.signUpBinding as string | undefined;
    let code: string | undefined;
    try {
      code = (await smtp.waitFor(email, 1, 15_000))[0]?.code;
    } catch {
      // mail accepted is sent from the outbox; a long fault may delay it past the wait
      return this.failed(`no mail to ${email} within 15 s`);
    }
    for (let attempt = 0; attempt < 20; attempt++) {
      const verify = await call(
        recorder,
        `${operationPrefix}verifyEmail`,
        `${base}/api/auth/email/verify?client_type=mobile`,
        {
          body: { email, otp: code, signUpBinding: binding },
        },
      );
      if (verify.status === 200) {
        ledger.verified.add(email);
        return this.keep(email, verify.body, shared);
      }
      if (verify.status !== 503 && verify.status !== 502 && verify.status !== 0) {
        return this.failed(`verification ${verify.status} ${JSON.stringify(verify.body)}`);
      }
      await sleep(500);
    }
    return this.failed('verification: no answer but 503 in 20 tries');
  }

  /** Why the last newAccount gave up. */
  lastFailure = '';
  private failed(why: string): undefined {
    this.lastFailure = why;
    return undefined;
  }

  /** Remembers a session; `shared`: the traffic may refresh it and end it (a revocation probe). */
  private keep(email: string, body: Record<string, unknown>, shared = true): Session {
    const session = {
      email,
      accessToken: body.accessToken as string,
      refreshToken: body.refreshToken as string,
      chain: this.chainCount++,
    };
    this.o.ledger.chains.set(session.chain, { refreshToken: session.refreshToken, rotations: 0, uncertain: false });
    if (shared) this.sessions.push(session);
    return session;
  }

  start(): void {
    this.running = true;
    const loop = (pauseMs: number, body: () => Promise<unknown>) =>
      this.loops.push(
        (async () => {
          while (this.running) {
            await body();
            await sleep(pauseMs);
          }
        })(),
      );
    const { base, recorder, ledger, adminToken } = this.o;
    // Sign-ups with verification: scrypt (a hash a sign-up, one a verification) is the costly part.
    for (let i = 0; i < 2; i++) loop(100, () => this.newAccount());
    // Sign-ins of accounts made before.
    loop(150, async () => {
      const s = this.sessions[Math.floor(Math.random() * this.sessions.length)];
      if (s === undefined) return;
      const res = await call(recorder, 'createSession', `${base}/api/auth/sessions?client_type=mobile`, {
        body: { email: s.email, password: PASSWORD },
      });
      if (res.status === 200) this.keep(s.email, res.body);
    });
    // Refresh-token rotations, each chain one at a time.
    const busy = new Set<number>();
    for (let i = 0; i < 3; i++)
      loop(30, async () => {
        const candidates = this.sessions.filter((s) => !busy.has(s.chain) && !ledger.chains.get(s.chain)?.uncertain);
        const s = candidates[Math.floor(Math.random() * candidates.length)];
        if (s === undefined) return;
        busy.add(s.chain);
        try {
          const res = await call(recorder, 'refreshSession', `${base}/api/auth/refresh?client_type=mobile`, {
            body: { refreshToken: s.refreshToken },
          });
          const chain = ledger.chains.get(s.chain);
          if (chain === undefined) return;
          if (res.status === 200) {
            s.refreshToken = res.body.refreshToken as string;
            s.accessToken = res.body.accessToken as string;
            chain.refreshToken = s.refreshToken;
            chain.rotations++;
          } else if (res.status !== 503) {
            // No answer (or the balancer's 502): the rotation may have happened; the chain is left out of the checks.
            chain.uncertain = true;
          }
        } finally {
          busy.delete(s.chain);
        }
      });
    // The directory (the read replica serves it): pages and searches.
    for (let i = 0; i < 2; i++)
      loop(20, () =>
        call(
          recorder,
          'listUsers',
          Math.random() < 0.5
            ? `${base}/api/auth/users?limit=10&offset=${Math.floor(Math.random() * 50)}`
            : `${base}/api/auth/users?limit=10&search=cluster-${this.o.runId}`,
          { token: adminToken },
        ),
      );
    // Embeddings against the loopback provider.
    loop(20, () =>
      call(recorder, 'createEmbeddings', `${base}/api/ai/embeddings`, {
        token: adminToken,
        body: { model: 'text-embedding-3-small', input: 'the quick brown fox', dimensions: 256 },
      }),
    );
    // Sign-outs, each followed by its access token tried on every instance until all refuse it.
    loop(1_500, () => this.revocationProbe());
  }

  private async revocationProbe(): Promise<void> {
    const { base, recorder, ledger } = this.o;
    const s = this.sessions.pop();
    if (s === undefined) return;
    // Only a token that works now proves anything when it stops working.
    const before = await call(recorder, 'getCurrentSession', `${base}/api/auth/sessions/current`, {
      token: s.accessToken,
    });
    if (before.status !== 200) {
      ledger.chains.delete(s.chain);
      return;
    }
    const res = await call(recorder, 'logout', `${base}/api/auth/logout?client_type=mobile`, {
      body: { refreshToken: s.refreshToken },
    });
    ledger.chains.delete(s.chain);
    if (res.status !== 200 && res.status !== 204) return;
    const acknowledged = performance.now();
    const instances = this.o.instanceUrls();
    const phase = recorder.phase;
    const reached = await Promise.all(
      instances.map(async (url) => {
        for (;;) {
          try {
            const current = await fetch(`${url}/api/auth/sessions/current`, {
              headers: { authorization: `Bearer ${s.accessToken}` },
              signal: AbortSignal.timeout(2_000),
            });
            await current.body?.cancel();
            // When the refusal arrived: the time its request took counts.
            const elapsed = performance.now() - acknowledged;
            if (current.status === 401) return elapsed;
            if (elapsed > 5_000) return elapsed;
          } catch {
            return undefined; // the instance went away meanwhile (a fault): it holds no session
          }
          await sleep(20);
        }
      }),
    );
    const times = reached.filter((x): x is number => x !== undefined);
    if (times.length === 0) return;
    const ms = Math.max(...times);
    ledger.revocations.push({ ms, phase, instances: times.length });
    if (ms > 2_000) ledger.slowRevocations.push(`${phase}: ${Math.round(ms)} ms`);
  }

  async stop(): Promise<void> {
    this.running = false;
    await Promise.all(this.loops);
    this.loops.length = 0;
  }

  /** The next payload number of a realtime publish. */
  nextPublish(): number {
    return this.publishCount++;
  }
}

// ---------------------------------------------------------------------------------------------
// Realtime

interface Window {
  from: number;
  to: number;
}

/** One subscriber: a socket that reconnects and resubscribes by itself, with the windows it was subscribed in. */
export class Subscriber {
  readonly socket: Socket;
  readonly windows: Window[] = [];
  private openedAt: number | undefined;
  readonly received = new Set<string>();
  duplicates = 0;
  reconnections = 0;
  /** Why the last subscription attempt failed, or the last handshake was refused. */
  lastRefusal = '';

  readonly channel: string;

  constructor(url: string, token: string, channel: string) {
    this.channel = channel;
    this.socket = io(url, {
      transports: ['websocket'],
      auth: { token },
      forceNew: true,
      reconnectionDelay: 200,
      reconnectionDelayMax: 1_000,
      randomizationFactor: 0.5,
      timeout: 5_000,
    });
    this.socket.on('connect', () => void this.subscribe());
    this.socket.on('connect_error', (err: Error & { data?: { code?: string } }) => {
      this.lastRefusal = `handshake: ${err.data?.code ?? err.message}`;
    });
    this.socket.on('disconnect', () => this.close());
    this.socket.io.on('reconnect', () => {
      this.reconnections++;
    });
    this.socket.on('tick', (m: { meta?: { messageId?: string } }) => {
      const id = m.meta?.messageId;
      if (typeof id !== 'string') return;
      if (this.received.has(id)) this.duplicates++;
      else this.received.add(id);
    });
  }

  private async subscribe(): Promise<void> {
    for (let attempt = 0; attempt < 50 && this.socket.connected; attempt++) {
      try {
        const ack = (await this.socket.timeout(5_000).emitWithAck('realtime:subscribe', { channel: this.channel })) as {
          ok: boolean;
          error?: { code: string; message: string };
        };
        if (ack.ok) {
          this.openedAt = performance.now();
          return;
        }
        this.lastRefusal = `${ack.error?.code}: ${ack.error?.message}`;
      } catch (err) {
        this.lastRefusal = (err as Error).message; // no answer: try again while connected
      }
      await sleep(300);
    }
  }

  private close(): void {
    if (this.openedAt !== undefined) this.windows.push({ from: this.openedAt, to: performance.now() });
    this.openedAt = undefined;
  }

  get subscribed(): boolean {
    return this.openedAt !== undefined;
  }

  /** The windows including the one still open (to now). */
  allWindows(): Window[] {
    return this.openedAt === undefined
      ? this.windows
      : [...this.windows, { from: this.openedAt, to: performance.now() }];
  }
}

/** Publishers on sockets of their own (they reconnect too), `ratePerSecond` together, round robin over the channels. */
export class Publishers {
  private running = false;
  private readonly sockets: Socket[];
  private loop: Promise<void> | undefined;

  private readonly channels: string[];
  private readonly o: { recorder: PhaseRecorder; ledger: ClusterLedger; next: () => number; ratePerSecond: number };

  constructor(
    url: string,
    tokens: string[],
    channels: string[],
    o: { recorder: PhaseRecorder; ledger: ClusterLedger; next: () => number; ratePerSecond: number },
  ) {
    this.channels = channels;
    this.o = o;
    this.sockets = tokens.map((token) => {
      const socket = io(url, {
        transports: ['websocket'],
        auth: { token },
        forceNew: true,
        reconnectionDelay: 200,
        reconnectionDelayMax: 1_000,
        timeout: 5_000,
      });
      // Publishing needs a subscription to the channel: each socket holds one to every channel.
      socket.on('connect', () => {
        this.ready.delete(socket);
        void subscribeAll(socket, channels).then((ok) => {
          if (ok) this.ready.add(socket);
        });
      });
      socket.on('disconnect', () => this.ready.delete(socket));
      return socket;
    });
  }

  private readonly ready = new Set<Socket>();

  start(): void {
    this.running = true;
    const interval = 1_000 / this.o.ratePerSecond;
    this.loop = (async () => {
      const inFlight = new Set<Promise<void>>();
      let i = 0;
      while (this.running) {
        const socket = this.sockets[i % this.sockets.length] as Socket;
        const channel = this.channels[i % this.channels.length] as string;
        i++;
        if (this.ready.has(socket)) {
          const p = this.publish(socket, channel).finally(() => inFlight.delete(p));
          inFlight.add(p);
        }
        await sleep(interval);
      }
      await Promise.all(inFlight);
    })();
  }

  private async publish(socket: Socket, channel: string): Promise<void> {
    const { recorder, ledger } = this.o;
    const n = this.o.next();
    const sentAt = performance.now();
    try {
      const ack = (await socket
        .timeout(10_000)
        .emitWithAck('realtime:publish', { channel, event: 'tick', payload: { n } })) as {
        ok: boolean;
        messageId?: string;
        error?: { code: string };
      };
      const ackAt = performance.now();
      if (ack.ok && typeof ack.messageId === 'string') {
        recorder.record('realtime:publish', 200, ackAt - sentAt);
        ledger.messages.set(ack.messageId, { channel, n, sentAt, ackAt });
      } else {
        const code = ack.error?.code;
        recorder.record('realtime:publish', code === 'SERVICE_UNAVAILABLE' ? 503 : 500, ackAt - sentAt, String(code));
      }
    } catch (err) {
      // No acknowledgement: the socket dropped (an instance killed) or the answer never came.
      recorder.record('realtime:publish', 0, performance.now() - sentAt, (err as Error).message);
    }
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.loop;
  }

  close(): void {
    for (const s of this.sockets) s.close();
  }
}

/** Subscribes a socket to every channel (each tried until acknowledged while it stays connected). */
export async function subscribeAll(socket: Socket, channels: readonly string[]): Promise<boolean> {
  for (const channel of channels) {
    let ok = false;
    for (let attempt = 0; attempt < 50 && !ok && socket.connected; attempt++) {
      try {
        ok = ((await socket.timeout(5_000).emitWithAck('realtime:subscribe', { channel })) as { ok: boolean }).ok;
      } catch {
        // no answer
      }
      if (!ok) await sleep(300);
    }
    if (!ok) return false;
  }
  return true;
}

/**
 * Messages a subscriber should have received: acknowledged on its channel, sent after its
 * subscription was confirmed and acknowledged at least `graceMs` before it lost the socket (a
 * message acknowledged in its last moments may be on the wire when the socket drops).
 */
export function missedMessages(subscriber: Subscriber, ledger: ClusterLedger, graceMs: number): string[] {
  const windows = subscriber.allWindows();
  const missed: string[] = [];
  for (const [id, m] of ledger.messages) {
    if (m.channel !== subscriber.channel || subscriber.received.has(id)) continue;
    if (windows.some((w) => m.sentAt >= w.from && m.ackAt + graceMs <= w.to)) missed.push(id);
  }
  return missed;
}
