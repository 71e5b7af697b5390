import type { components } from '../../generated/openapi.ts';
import { listWebhookDeliveries, type WebhookOutboxRow, type WebhookStatus } from '../db/repositories/webhook-outbox.ts';
import type { Executor } from '../db/schema.ts';
import { ApiError } from '../errors.ts';

type WebhookDelivery = components['schemas']['WebhookDelivery'];
type WebhookDeliveryList = components['schemas']['WebhookDeliveryList'];

/**
 * A page's cursor: the last event's created_at (milliseconds, 8 bytes) and id (16 bytes), base64url
 * (32 characters). Events are created with millisecond times, so it names the position exactly.
 */
function encodeCursor(row: Pick<WebhookOutboxRow, 'created_at' | 'id'>): string {
  const bytes = Buffer.alloc(24);
  bytes.writeBigInt64BE(BigInt(row.created_at.getTime()));
  Buffer.from(row.id.replaceAll('-', ''), 'hex').copy(bytes, 8);
  return bytes.toString('base64url');
}

/** The end of the year 9999: the database's range ends there. */
const LATEST_CURSOR_MS = 253_402_300_799_999;

/**
 * Every 32-character cursor the contract's pattern admits decodes (24 bytes): a time outside the
 * years 1970 to 9999, which no cursor given out holds, is brought within them, so that such a
 * cursor gives a page (from the start, or an empty one) rather than an error the contract does not
 * state.
 */
function decodeCursor(cursor: string): { createdAt: Date; id: string } {
  const bytes = Buffer.from(cursor, 'base64url');
  if (bytes.length !== 24) throw new ApiError('INVALID_INPUT', 'query.cursor is not a cursor this operation returned');
  const ms = Math.min(Math.max(Number(bytes.readBigInt64BE()), 0), LATEST_CURSOR_MS);
  const createdAt = new Date(ms);
  const hex = bytes.subarray(8).toString('hex');
  const id = `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  return { createdAt, id };
}

function toView(row: WebhookOutboxRow): WebhookDelivery {
  return {
    id: row.id,
    eventType: row.event_type as WebhookDelivery['eventType'],
    status: row.status,
    attempts: row.attempts,
    createdAt: row.created_at.toISOString(),
    lastAttemptAt: row.last_attempt_at?.toISOString() ?? null,
    nextAttemptAt: row.status === 'pending' ? row.next_attempt_at.toISOString() : null,
    lastStatus: row.last_status,
    lastError: row.last_error,
    deliveredAt: row.delivered_at?.toISOString() ?? null,
    payload: row.payload as WebhookDelivery['payload'],
  };
}

/** One page of the webhook events and their delivery, newest first, for administrators. */
export async function listDeliveries(
  db: Executor,
  q: { status?: WebhookStatus | undefined; cursor?: string | undefined; limit: number },
): Promise<WebhookDeliveryList> {
  const rows = await listWebhookDeliveries(db, {
    status: q.status,
    after: q.cursor === undefined ? undefined : decodeCursor(q.cursor),
    limit: q.limit + 1,
  });
  const page = rows.slice(0, q.limit);
  const last = page.at(-1);
  return {
    deliveries: page.map(toView),
    nextCursor: rows.length > q.limit && last !== undefined ? encodeCursor(last) : null,
  };
}
