import type { Clock } from '../clock.ts';
import { insertAuditRow } from '../db/repositories/audit-log.ts';
import { enqueueWebhookEvents } from '../db/repositories/webhook-outbox.ts';
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
}

export interface AuditTrail {
  /**
   * Writes the event to the audit log and queues the webhook events it is announced as, with the
   * caller's executor: inside the transaction of the change it records, they commit or roll back
   * with it.
   */
  record(db: Executor, event: AccountEvent): Promise<void>;
}

export interface AuditTrailOptions {
  clock: Pick<Clock, 'now'>;
  /** The webhook events to queue (WEBHOOK_EVENTS); none when webhooks are off. */
  webhookEvents: ReadonlySet<WebhookEventType>;
}

export function createAuditTrail(opts: AuditTrailOptions): AuditTrail {
  const { clock, webhookEvents } = opts;
  return {
    async record(db, event) {
      const occurredAt = clock.now();
      const outcome = event.outcome ?? 'success';
      const actorId = event.actorId === undefined ? event.userId : event.actorId;
      const sessionId = event.sessionId ?? null;
      const details = { ...event.details };
      await insertAuditRow(db, {
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
      if (outcome !== 'success' || webhookEvents.size === 0) return;
      const announced = announcedAs(event.type, event.opensSession === true).filter((t) => webhookEvents.has(t));
      if (announced.length === 0) return;
      const timestamp = occurredAt.toISOString();
      await enqueueWebhookEvents(
        db,
        announced.map((type) => ({
          eventType: type,
          createdAt: occurredAt,
          payload: {
            type,
            timestamp,
            data: {
              userId: event.userId,
              ...(event.email === undefined || !type.startsWith('user.') ? {} : { email: event.email }),
              ...(sessionId === null ? {} : { sessionId }),
              actorId,
              auditEvent: event.type,
              ...(event.method === undefined ? {} : { method: event.method }),
              ...details,
            },
          },
        })),
      );
    },
  };
}

/** A trail that records nothing (tests and tools that build the auth flows without one). */
export const NO_AUDIT_TRAIL: AuditTrail = { record: async () => {} };
