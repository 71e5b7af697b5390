import { Webhook } from 'standardwebhooks';
import type { Pool } from 'undici';
import { version } from '../version.ts';

/** How one delivery attempt ended. `error` is the service's own words: never the URL, never the receiver's body. */
export type SendOutcome = { ok: true; status: number } | { ok: false; status: number | null; error: string };

/** The most of a receiver's answer that is read (and thrown away) to keep its connection for the next event. */
const MAX_DRAINED_BYTES = 64 * 1024;

export interface WebhookSenderOptions {
  /** WEBHOOK_URL; credentials in it (user:password@) are sent as Basic authorization. */
  url: string;
  /** WEBHOOK_SECRET: whsec_ and base64. */
  secret: string;
  /** Each attempt must be answered within this time. */
  timeoutMs: number;
  /** Connections kept to the receiver (the delivery's concurrency). */
  connections: number;
}

/** Names a failed connection by its error code only (a message may carry the receiver's address). */
function connectionFailure(err: unknown): string {
  const code = String((err as { code?: unknown }).code ?? '');
  switch (code) {
    case 'ECONNREFUSED':
      return 'connection refused';
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return 'host not found';
    case 'ECONNRESET':
    case 'EPIPE':
    case 'UND_ERR_SOCKET':
    case 'UND_ERR_CLOSED':
      return 'connection closed before an answer';
    case 'UND_ERR_CONNECT_TIMEOUT':
      return 'connection timed out';
    default:
      return /^[A-Z][A-Z0-9_]{1,40}$/.test(code) ? `connection failed (${code})` : 'connection failed';
  }
}

/**
 * Posts events to the receiver as Standard Webhooks: the stored payload as the JSON body, signed
 * (HMAC-SHA256 of `webhook-id.webhook-timestamp.body`) with the shared secret by the standardwebhooks
 * library, over one keep-alive connection pool. The timestamp is the attempt's own (receivers refuse
 * one more than 5 minutes off their clock); the id is the event's, the same on every attempt.
 */
export class WebhookSender {
  readonly #signer: Webhook;
  readonly #origin: string;
  readonly #path: string;
  readonly #authorization: string | undefined;
  readonly #options: WebhookSenderOptions;
  #pool: Promise<Pool> | undefined;

  constructor(options: WebhookSenderOptions) {
    this.#options = options;
    this.#signer = new Webhook(options.secret);
    const url = new URL(options.url);
    this.#origin = url.origin;
    this.#path = `${url.pathname}${url.search}`;
    this.#authorization =
      url.username === '' && url.password === ''
        ? undefined
        : `Basic ${Buffer.from(`${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`).toString('base64')}`;
  }

  /** The connection pool, made on first use (undici is loaded then, not at start). */
  #connections(): Promise<Pool> {
    this.#pool ??= import('undici').then(
      ({ Pool }) =>
        new Pool(this.#origin, {
          connections: this.#options.connections,
          keepAliveTimeout: 30_000,
          // The attempt's deadline (its signal) covers the whole exchange; these only catch a stalled socket.
          connectTimeout: this.#options.timeoutMs,
          headersTimeout: this.#options.timeoutMs + 1_000,
          bodyTimeout: this.#options.timeoutMs + 1_000,
        }),
    );
    return this.#pool;
  }

  /**
   * One attempt: a 2xx within the timeout is a delivery; any other status, a timeout or a failed
   * connection is a failure. `abort` ends the attempt early (the service is stopping). Never throws.
   */
  async send(event: { id: string; payload: unknown }, abort: AbortSignal): Promise<SendOutcome> {
    const body = JSON.stringify(event.payload);
    const deadline = AbortSignal.timeout(this.#options.timeoutMs);
    const signal = AbortSignal.any([deadline, abort]);
    const sentAt = new Date();
    try {
      const pool = await this.#connections();
      const res = await pool.request({
        method: 'POST',
        path: this.#path,
        headers: {
          'content-type': 'application/json',
          'user-agent': `accounts-embeddings-realtime/${version}`,
          'webhook-id': event.id,
          'webhook-timestamp': String(Math.floor(sentAt.getTime() / 1000)),
          'webhook-signature': this.#signer.sign(event.id, sentAt, body),
          ...(this.#authorization === undefined ? {} : { authorization: this.#authorization }),
        },
        body,
        signal,
      });
      await res.body.dump({ limit: MAX_DRAINED_BYTES }).catch(() => {});
      if (res.statusCode >= 200 && res.statusCode < 300) return { ok: true, status: res.statusCode };
      return { ok: false, status: res.statusCode, error: `answered HTTP ${res.statusCode}` };
    } catch (err) {
      if (abort.aborted) return { ok: false, status: null, error: 'interrupted: the service stopped' };
      if (deadline.aborted) {
        return { ok: false, status: null, error: `no answer within ${this.#options.timeoutMs} ms` };
      }
      return { ok: false, status: null, error: connectionFailure(err) };
    }
  }

  /** Closes the connections (after the attempts under way have ended). */
  async close(): Promise<void> {
    const pool = this.#pool;
    this.#pool = undefined;
    if (pool !== undefined) await (await pool).close();
  }
}
