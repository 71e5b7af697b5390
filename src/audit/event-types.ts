// The account events the service records: the audit log's types (AuditEventType in openapi.yaml)
// and the webhook events (WebhookEventType) each of them is announced as.
import { z } from 'zod';

/** Every audit log entry's type; the contract's AuditEventType lists the same (test/audit-log.test.ts). */
export const AUDIT_EVENT_TYPES = [
  'sign_up',
  'email_verified',
  'sign_in',
  'mfa_verified',
  'refresh_token_reused',
  'logout',
  'session_ended',
  'password_changed',
  'password_reset',
  'password_removed',
  'factor_enrolled',
  'factor_verified',
  'factor_removed',
  'recovery_codes_regenerated',
  'passkey_added',
  'passkey_removed',
  'identity_linked',
  'identity_unlinked',
  'profile_updated',
  'user_created',
  'user_role_changed',
  'user_disabled',
  'user_enabled',
  'user_deleted',
  'user_factors_reset',
  'signing_key_created',
  'signing_key_rotated',
  'signing_key_revoked',
] as const;
export type AuditEventType = (typeof AUDIT_EVENT_TYPES)[number];

/** The audit types a person sees in their own history (GET /api/auth/audit-log/me). */
export const OWN_HISTORY_TYPES: readonly AuditEventType[] = [
  'sign_in',
  'mfa_verified',
  'refresh_token_reused',
  'logout',
  'session_ended',
];

/** Every webhook event type (WEBHOOK_EVENTS picks among them). */
export const WEBHOOK_EVENT_TYPES = [
  'user.created',
  'user.verified',
  'user.updated',
  'user.disabled',
  'user.deleted',
  'session.created',
  'session.ended',
  'password.changed',
  'mfa.changed',
] as const;
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];

/**
 * The webhook events a successful audit event is announced as. A session opened along the way
 * (a sign-up, verification or sign-in that answers with one) adds `session.created`.
 */
const ANNOUNCED: { readonly [T in AuditEventType]: readonly WebhookEventType[] } = {
  sign_up: ['user.created'],
  email_verified: ['user.verified'],
  sign_in: [],
  mfa_verified: [],
  refresh_token_reused: ['session.ended'],
  logout: ['session.ended'],
  session_ended: ['session.ended'],
  password_changed: ['password.changed'],
  password_reset: ['password.changed'],
  password_removed: ['password.changed'],
  factor_enrolled: [],
  factor_verified: ['mfa.changed'],
  factor_removed: ['mfa.changed'],
  recovery_codes_regenerated: ['mfa.changed'],
  passkey_added: ['mfa.changed'],
  passkey_removed: ['mfa.changed'],
  identity_linked: ['user.updated'],
  identity_unlinked: ['user.updated'],
  profile_updated: ['user.updated'],
  user_created: ['user.created'],
  user_role_changed: ['user.updated'],
  user_disabled: ['user.disabled'],
  user_enabled: ['user.updated'],
  user_deleted: ['user.deleted'],
  user_factors_reset: ['mfa.changed'],
  signing_key_created: [],
  signing_key_rotated: [],
  signing_key_revoked: [],
};

export function announcedAs(type: AuditEventType, opensSession: boolean): WebhookEventType[] {
  const announced = [...ANNOUNCED[type]];
  if (opensSession) announced.push('session.created');
  return announced;
}

/** WEBHOOK_EVENTS: a comma-separated list of webhook event types. */
export const webhookEventList = z
  .string()
  .trim()
  .transform((v) => v.split(/\s*,\s*/).filter((name) => name !== ''))
  .pipe(
    z
      .array(
        z.enum(WEBHOOK_EVENT_TYPES, {
          error: `must be a comma-separated list of ${WEBHOOK_EVENT_TYPES.join(', ')}`,
        }),
      )
      .min(1, `must name at least one of ${WEBHOOK_EVENT_TYPES.join(', ')}`),
  );
