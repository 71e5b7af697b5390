import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';

/** A fresh WEBHOOK_SECRET, as `whsec_$(openssl rand -base64 32)` makes one. */
export const newWebhookSecret = () => `whsec_${randomBytes(32).toString('base64')}`;

/** One request the receiver got, checked with the Standard Webhooks library. */
export interface Receipt {
  id: string;
  timestamp: string;
  signature: string;
  headers: http.IncomingHttpHeaders;
  /** The raw body, as signed. */
  body: string;
  /** The body parsed by Webhook.verify; undefined when the signature did not verify. */
  payload: { type: string; timestamp: string; data: Record<string, unknown> } | undefined;
  verified: boolean;
  /** performance.now() when the request had arrived. */
  at: number;
}

/** How the receiver answers one request: a status, after a delay. */
export interface Answer {
  status: number;
  delayMs?: number;
}

export interface WebhookReceiver {
  /** Where it listens (http://127.0.0.1:<port>/hooks), the same after a stop and a start. */
  url: string;
  port: number;
  receipts: Receipt[];
  /** The receipts of one webhook-id. */
  of(id: string): Receipt[];
  /** Resolves once `condition` holds over the receipts (checked at each receipt and every 20 ms). */
  waitFor(condition: (receipts: Receipt[]) => boolean, what: string, timeoutMs?: number): Promise<void>;
  /** Stops listening and drops its connections (the receiver is down: connections are refused). */
  stop(): Promise<void>;
  /** Listens again, on the same port. */
  start(): Promise<void>;
  close(): Promise<void>;
}

/**
 * A loopback HTTP receiver that verifies every request with standardwebhooks' Webhook.verify and
 * answers with `answer` (200 by default); `n` counts the requests of the same webhook-id, from 1.
 * With `down`, it is created stopped (its port chosen but nothing listening).
 */
export async function startWebhookReceiver(
  secret: string,
  options: { answer?: (receipt: Receipt, n: number) => Answer; down?: boolean } = {},
): Promise<WebhookReceiver> {
  const verifier = new Webhook(secret);
  const receipts: Receipt[] = [];
  const answer: (receipt: Receipt, n: number) => Answer = options.answer ?? (() => ({ status: 200 }));
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const header = (name: string) => String(req.headers[name] ?? '');
      let payload: Receipt['payload'];
      try {
        payload = verifier.verify(body, {
          'webhook-id': header('webhook-id'),
          'webhook-timestamp': header('webhook-timestamp'),
          'webhook-signature': header('webhook-signature'),
        }) as Receipt['payload'];
      } catch {
        payload = undefined;
      }
      const receipt: Receipt = {
        id: header('webhook-id'),
        timestamp: header('webhook-timestamp'),
        signature: header('webhook-signature'),
        headers: req.headers,
        body,
        payload,
        verified: payload !== undefined,
        at: performance.now(),
      };
      receipts.push(receipt);
      const n = receipts.filter((r) => r.id === receipt.id).length;
      const { status, delayMs = 0 } = answer(receipt, n);
      const reply = () => {
        if (!res.destroyed) res.writeHead(status, { 'content-type': 'text/plain' }).end('ok');
      };
      if (delayMs > 0) setTimeout(reply, delayMs).unref();
      else reply();
      for (const waiter of [...waiters]) waiter();
    });
  });
  const waiters = new Set<() => void>();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  let listening = true;
  const stop = async () => {
    if (!listening) return;
    listening = false;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeAllConnections();
    await closed;
  };
  const start = async () => {
    if (listening) return;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    listening = true;
  };
  if (options.down) await stop();
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    port,
    receipts,
    of: (id) => receipts.filter((r) => r.id === id),
    waitFor(condition, what, timeoutMs = 15_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          if (!condition(receipts)) return;
          done();
          resolve();
        };
        const timer = setTimeout(() => {
          done();
          reject(new Error(`${what}: not within ${timeoutMs} ms (${receipts.length} receipts)`));
        }, timeoutMs);
        const every = setInterval(check, 20);
        const done = () => {
          clearTimeout(timer);
          clearInterval(every);
          waiters.delete(check);
        };
        waiters.add(check);
        check();
      });
    },
    stop,
    start,
    close: stop,
  };
}
