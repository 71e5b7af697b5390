import { type Selectable, sql } from 'kysely';
import type { Executor, WebhookOutboxTable } from '../schema.ts';

/** The PostgreSQL notification sent when events are queued (the delivery loop wakes on it). */
export const WEBHOOK_QUEUED_CHANNEL = 'webhook_queued';

export type WebhookOutboxRow = Selectable<WebhookOutboxTable>;
export type WebhookStatus = WebhookOutboxRow['status'];

export interface QueuedEvent {
  eventType: string;
  payload: Record<string, unknown>;
  createdAt: Date;
}

const queuedHere = new Set<() => void>();

/**
 * Calls `listener` each time this process queues events, right after the insert (its transaction
 * may still be open). For the embedded database, which has no LISTEN between processes: its one
 * connection runs whole transactions one at a time, so a query the listener starts runs after the
 * queuing transaction has ended. Returns the removal.
 */
export function onWebhookEventsQueued(listener: () => void): () => void {
  queuedHere.add(listener);
  return () => {
    queuedHere.delete(listener);
  };
}

/**
 * Queues events for delivery, in the caller's transaction: they are delivered only if it commits.
 * The same statement notifies WEBHOOK_QUEUED_CHANNEL, which PostgreSQL delivers at commit (and
 * never for a rollback), so that the delivery loops of every instance wake.
 */
export async function enqueueWebhookEvents(db: Executor, events: readonly QueuedEvent[]): Promise<void> {
  if (events.length === 0) return;
  await db
    .with('queued', (q) =>
      q
        .insertInto('webhook_outbox')
        .values(
          events.map((e) => ({
            event_type: e.eventType,
            payload: JSON.stringify(e.payload),
            created_at: e.createdAt,
            next_attempt_at: e.createdAt,
          })),
        )
        .returning('id'),
    )
    .selectNoFrom(sql<string>`pg_notify(${WEBHOOK_QUEUED_CHANNEL}, '')`.as('notified'))
    .execute();
  for (const listener of queuedHere) listener();
}

/** An event claimed for one delivery attempt. */
export interface ClaimedWebhook {
  id: string;
  eventType: string;
  payload: Record<string, unknown>;
  createdAt: Date;
  /** This attempt's number (1 for the first). */
  attempt: number;
  /** The lease: the row's next_attempt_at while this attempt runs, the token its result is written with. */
  leaseUntil: Date;
}

/**
 * Claims up to `limit` pending events that are due at `now`, oldest due first, for one attempt each:
 * their attempt is counted and their next_attempt_at moved to `leaseUntil`, in one statement.
 * Rows another instance is claiming at the same moment are skipped (FOR UPDATE SKIP LOCKED), and
 * once committed the lease keeps them from every other claim until it ends: an instance that dies
 * mid-attempt leaves its events to be claimed again when their lease runs out.
 */
export async function claimDueWebhooks(
  db: Executor,
  claim: { now: Date; leaseUntil: Date; limit: number },
): Promise<ClaimedWebhook[]> {
  const rows = await db
    .updateTable('webhook_outbox')
    .set({
      attempts: sql`attempts + 1`,
      last_attempt_at: claim.now,
      next_attempt_at: claim.leaseUntil,
    })
    .where('id', 'in', (eb) =>
      eb
        .selectFrom('webhook_outbox')
        .select('id')
        .where('status', '=', 'pending')
        .where('next_attempt_at', '<=', claim.now)
        .orderBy('next_attempt_at')
        .limit(claim.limit)
        .forUpdate()
        .skipLocked(),
    )
    .returning(['id', 'event_type', 'payload', 'created_at', 'attempts'])
    .execute();
  return rows
    .map((r) => ({
      id: r.id,
      eventType: r.event_type,
      payload: r.payload,
      createdAt: r.created_at,
      attempt: r.attempts,
      leaseUntil: claim.leaseUntil,
    }))
    .sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime());
}

/** What an attempt came to. */
export type AttemptResult =
  | { outcome: 'delivered'; at: Date; status: number }
  | { outcome: 'retry'; at: Date; status: number | null; error: string; nextAttemptAt: Date }
  | { outcome: 'dead'; at: Date; status: number | null; error: string };

/**
 * Writes the results of attempts, in one statement; each only if its attempt still holds its lease
 * (an attempt that outlived its lease, its event claimed again elsewhere, writes nothing). Returns
 * the ids whose result was written.
 */
export async function recordWebhookAttempts(
  db: Executor,
  attempts: ReadonlyArray<{ claimed: Pick<ClaimedWebhook, 'id' | 'leaseUntil'>; result: AttemptResult }>,
): Promise<Set<string>> {
  if (attempts.length === 0) return new Set();
  const column = <T>(pick: (a: (typeof attempts)[number]) => T) => attempts.map(pick);
  const status = ({ result }: (typeof attempts)[number]) =>
    result.outcome === 'delivered' ? 'delivered' : result.outcome === 'dead' ? 'failed' : 'pending';
  const rows = await sql<{ id: string }>`
    update webhook_outbox o set
      status = v.status,
      last_status = v.last_status,
      last_error = v.last_error,
      delivered_at = v.delivered_at,
      next_attempt_at = coalesce(v.next_attempt_at, o.next_attempt_at)
    from unnest(
      ${column((a) => a.claimed.id)}::uuid[],
      ${column((a) => a.claimed.leaseUntil)}::timestamptz[],
      ${column(status)}::text[],
      ${column((a) => a.result.status)}::int[],
      ${column((a) => (a.result.outcome === 'delivered' ? null : a.result.error))}::text[],
      ${column((a) => (a.result.outcome === 'delivered' ? a.result.at : null))}::timestamptz[],
      ${column((a) => (a.result.outcome === 'retry' ? a.result.nextAttemptAt : null))}::timestamptz[]
    ) as v(id, lease, status, last_status, last_error, delivered_at, next_attempt_at)
    where o.id = v.id and o.status = 'pending' and o.next_attempt_at = v.lease
    returning o.id
  `.execute(db);
  return new Set(rows.rows.map((r) => r.id));
}

export interface WebhookDeliveryQuery {
  status?: WebhookStatus | undefined;
  /** Only events listed after this one (newest first: created before it, or at the same instant with a smaller id). */
  after?: { createdAt: Date; id: string } | undefined;
  limit: number;
}

/** One page of the outbox, newest first (by created_at, then id). */
export async function listWebhookDeliveries(db: Executor, q: WebhookDeliveryQuery): Promise<WebhookOutboxRow[]> {
  let query = db.selectFrom('webhook_outbox').selectAll();
  if (q.status !== undefined) query = query.where('status', '=', q.status);
  const after = q.after;
  if (after !== undefined) {
    query = query.where(({ eb, refTuple, tuple }) =>
      eb(refTuple('created_at', 'id'), '<', tuple(after.createdAt, after.id)),
    );
  }
  return query.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(q.limit).execute();
}

/** How many events wait for delivery (every instance's). */
export async function countPendingWebhooks(db: Executor): Promise<number> {
  const row = await db
    .selectFrom('webhook_outbox')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where('status', '=', 'pending')
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

/** Deletes delivered and failed events created before `cutoff`, at most `batch` of them; returns how many went. */
export async function deleteSettledWebhooksBefore(db: Executor, cutoff: Date, batch: number): Promise<number> {
  const result = await sql<{ n: number }>`
    with gone as (
      delete from webhook_outbox where id in (
        select id from webhook_outbox
        where status in ('delivered', 'failed') and created_at < ${cutoff}
        order by created_at
        limit ${batch}
      ) returning 1
    )
    select count(*)::int as n from gone
  `.execute(db);
  return result.rows[0]?.n ?? 0;
}
