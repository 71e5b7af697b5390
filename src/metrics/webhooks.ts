import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

/** What the webhook delivery reports as it works (src/webhooks/delivery.ts). */
export interface WebhookEvents {
  /** An event was answered 2xx, `seconds` after it was created (committed). */
  delivered(seconds: number): void;
  /** An attempt failed (non-2xx, timeout, no connection) and the event will be tried again. */
  attemptFailed(): void;
  /** An attempt failed and the event's retries are over: it is dead-lettered (status failed). */
  deadLettered(): void;
}

/** Seconds from an event's commit to its 2xx: 10 ms on a nearby receiver up to the 24 h retry horizon. */
const LATENCY_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600, 21_600, 86_400];

/**
 * The webhook series: attempts by result, the events waiting (read from the database at scrape
 * time through `pending`, which answers undefined while webhooks are off: the gauge stays 0), and the
 * delivery latency.
 */
export function createWebhookMetrics(registers: Registry[], pending: () => Promise<number> | undefined): WebhookEvents {
  const attempts = new Counter({
    name: 'webhook_delivery_attempts_total',
    help: 'Webhook delivery attempts of this instance, by result (delivered: 2xx; failed_attempt: will be retried; dead: retries over, the event is dead-lettered)',
    labelNames: ['result'] as const,
    registers,
  });
  for (const result of ['delivered', 'failed_attempt', 'dead']) attempts.inc({ result }, 0);
  new Gauge({
    name: 'webhook_pending_events',
    help: 'Webhook events waiting for delivery (all instances: read from the database at each scrape; 0 while webhooks are off)',
    registers,
    async collect() {
      const count = pending();
      if (count === undefined) return;
      try {
        this.set(await count);
      } catch {
        // A scrape while the database is away shows the last value rather than failing.
      }
    },
  });
  const latency = new Histogram({
    name: 'webhook_delivery_latency_seconds',
    help: "Time from a webhook event's creation (its commit) to the receiver's 2xx, retries included",
    buckets: LATENCY_BUCKETS,
    registers,
  });
  return {
    delivered: (seconds) => {
      attempts.inc({ result: 'delivered' });
      latency.observe(seconds);
    },
    attemptFailed: () => attempts.inc({ result: 'failed_attempt' }),
    deadLettered: () => attempts.inc({ result: 'dead' }),
  };
}
