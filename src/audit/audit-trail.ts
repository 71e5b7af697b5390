import type { Clock } from '../clock.ts';
import { insertAuditRows, type NewAuditRow } from '../db/repositories/audit-log.ts';
import { enqueueWebhookEvents, type QueuedEvent } from '../db/repositories/webhook-outbox.ts';
import type { Executor } from '../db/schema.ts';
import { type AuditEventType, announcedAs, type WebhookEventType } from './event-types.ts';

/** Where a request came from, as the audit log keeps it. */
export interface EventClient {
  ip: string | null;
  userAgent: string | null;
}

/** An administrator acting on another account: who, from which session, from where. */
export interface AdminActor {
  userId: string;
  sessionId: string;
  client: EventClient;
}

/**
 * A value an event's details may hold. Details are chosen by the code that records the event, from
 * names and ids only: never a secret, code, token or password (test/audit-log.test.ts scans for them).
 */
export type DetailValue = string | number | boolean | null;

export interface AccountEvent {
  type: AuditEventType;
  /** 'success' unless given. A failure is written on its own (the change it tried rolled back). */
  outcome?: 'success' | 'failure';
  /** How it was done: a sign-in's method (password, otp, link, oauth, id_token, passkey), a factor's type. */
  method?: string | undefined;
  /** The account the event is about (null when there is none, as for a failed sign-in at an unknown address). */
  userId: string | null;
  /** Who acted: the account itself unless given (an administrator, or null for the service itself). */
  actorId?: string | null | undefined;
  /** The session it happened in, or the session it opened or ended. */
  sessionId?: string | null | undefined;
  client?: EventClient | null | undefined;
  details?: Readonly<Record<string, DetailValue>> | undefined;
  /** The account's address, for the webhook payloads of user events (not kept in the audit log's details). */
  email?: string | undefined;
  /** The event opened the session `sessionId`: it is announced as `session.created` too. */
  opensSession?: boolean | undefined;
  /** false: not announced as its type's webhook events (event-types.ts), only as `alsoAnnounce`. */
  announce?: boolean | undefined;
  /** Webhook events it is announced as besides its type's. */
  alsoAnnounce?: readonly WebhookEventType[] | undefined;
}

/** Why sessions ended, as their `session_ended` entries say (`details.by`). */
export type SessionEndCause =
  | 'self'
  | 'administrator'
  | 'password_change'
  | 'password_reset'
  | 'second_factor'
  | 'mailbox_proof'
  | 'promotion';

export interface EndedSessions {
  userId: string;
  sessionIds: readonly string[];
  by: SessionEndCause;
  /** Who ended them: the account itself unless given (an administrator; null for the service). */
  actorId?: string | null | undefined;
  client?: EventClient | null | undefined;
}

export interface AuditTrail {
  /**
   * Writes the event to the audit log and queues the webhook events it is announced as, with the
   * caller's executor: inside the transaction of the change it records, they commit or roll back
   * with it.
   */
  record(db: Executor, event: AccountEvent): Promise<void>;
  /**
   * One `session_ended` entry (and `session.ended` webhook) per session a change ended, written
   * with as few statements as possible, in the change's transaction.
   */
  recordSessionsEnded(db: Executor, ended: EndedSessions): Promise<void>;
}

export interface AuditTrailOptions {
  clock: Pick<Clock, 'now'>;
  /** The webhook events to queue (WEBHOOK_EVENTS); none when webhooks are off. */
  webhookEvents: ReadonlySet<WebhookEventType>;
}

/** Events per webhook-outbox INSERT (4 parameters each). */
const EVENTS_PER_STATEMENT = 1000;

export function createAuditTrail(opts: AuditTrailOptions): AuditTrail {
  const { clock, webhookEvents } = opts;

  async function recordAll(db: Executor, events: readonly AccountEvent[]): Promise<void> {
    const occurredAt = clock.now();
    const timestamp = occurredAt.toISOString();
    const rows: NewAuditRow[] = [];
    const queued: QueuedEvent[] = [];
    for (const event of events) {
      const outcome = event.outcome ?? 'success';
      const actorId = event.actorId === undefined ? event.userId : event.actorId;
      const sessionId = event.sessionId ?? null;
      const details = { ...event.details };
      rows.push({
        occurredAt,
        type: event.type,
        outcome,
        method: event.method ?? null,
        actorId,
        userId: event.userId,
        sessionId,
        ip: event.client?.ip ?? null,
        userAgent: event.client?.userAgent?.slice(0, 512) ?? null,
        details,
      });
      if (outcome !== 'success' || webhookEvents.size === 0) continue;
      const announced = [
        ...(event.announce === false ? [] : announcedAs(event.type, event.opensSession === true)),
        ...(event.alsoAnnounce ?? []),
      ].filter((t) => webhookEvents.has(t));
      for (const type of announced) {
        queued.push({
          eventType: type,
          createdAt: occurredAt,
          payload: {
            type,
            timestamp,
            data: {
              ...details,
              userId: event.userId,
              ...(event.email === undefined || !type.startsWith('user.') ? {} : { email: event.email }),
              ...(sessionId === null ? {} : { sessionId }),
              actorId,
              auditEvent: event.type,
              ...(event.method === undefined ? {} : { method: event.method }),
            },
          },
        });
      }
    }
    await insertAuditRows(db, rows);
    for (let at = 0; at < queued.length; at += EVENTS_PER_STATEMENT) {
      await enqueueWebhookEvents(db, queued.slice(at, at + EVENTS_PER_STATEMENT));
    }
  }

  return {
    record: (db, event) => recordAll(db, [event]),
    recordSessionsEnded: (db, ended) =>
      recordAll(
        db,
        ended.sessionIds.map((sessionId) => ({
          type: 'session_ended',
          userId: ended.userId,
          actorId: ended.actorId,
          sessionId,
          client: ended.client,
          details: { by: ended.by },
        })),
      ),
  };
}

/** A trail that records nothing (tests and tools that build the auth flows without one). */
export const NO_AUDIT_TRAIL: AuditTrail = { record: async () => {}, recordSessionsEnded: async () => {} };
