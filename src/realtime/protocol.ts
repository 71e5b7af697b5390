import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import addFormats from 'ajv-formats';
import { parse } from 'yaml';
import { asyncapiYaml } from '../spec.ts';

/** The events a client may send, and the asyncapi.yaml schema of each one's payload. */
export const clientEvents = {
  'realtime:subscribe': 'SubscribeRequest',
  'realtime:unsubscribe': 'UnsubscribeRequest',
  'realtime:publish': 'PublishRequest',
} as const;
export type ClientEvent = keyof typeof clientEvents;

export interface SubscribeRequest {
  channel: string;
}
export type UnsubscribeRequest = SubscribeRequest;
export interface PublishRequest {
  channel: string;
  event: string;
  payload: Record<string, unknown>;
  senderId?: string;
}

export type RealtimeErrorCode =
  | 'UNAUTHORIZED'
  | 'NOT_SUBSCRIBED'
  | 'INVALID_PAYLOAD'
  | 'PAYLOAD_TOO_LARGE'
  | 'UNKNOWN_EVENT'
  | 'RATE_LIMITED'
  | 'TOKEN_EXPIRED'
  | 'SLOW_CONSUMER'
  | 'SERVICE_UNAVAILABLE'
  | 'INTERNAL_ERROR';

export interface PresenceMember {
  presenceId: string;
  userId: string | null;
}

export interface MessageMeta {
  channel: string;
  messageId: string;
  senderType: 'user' | 'system';
  senderId: string | null;
  timestamp: string;
}

type Payloads = {
  'realtime:subscribe': SubscribeRequest;
  'realtime:unsubscribe': UnsubscribeRequest;
  'realtime:publish': PublishRequest;
};

// The payload schemas of asyncapi.yaml validate what clients send.
const document = parse(asyncapiYaml) as { components: { schemas: Record<string, unknown> } };
const ajv = new Ajv({ strict: false, allErrors: false });
addFormats.default(ajv);
ajv.addSchema({ $id: 'asyncapi', components: document.components });
const validators = Object.fromEntries(
  Object.entries(clientEvents).map(([event, schema]) => [
    event,
    ajv.getSchema(`asyncapi#/components/schemas/${schema}`) as ValidateFunction,
  ]),
) as Record<ClientEvent, ValidateFunction>;
for (const [event, validate] of Object.entries(validators)) {
  if (typeof validate !== 'function') throw new Error(`asyncapi.yaml has no payload schema for ${event}`);
}

export function isClientEvent(name: string): name is ClientEvent {
  return Object.hasOwn(clientEvents, name);
}

/** The payload, typed, or a sentence saying what is wrong with it. */
export function checkClientPayload<E extends ClientEvent>(
  event: E,
  payload: unknown,
): { ok: true; value: Payloads[E] } | { ok: false; message: string } {
  const validate = validators[event];
  if (validate(payload)) return { ok: true, value: payload as Payloads[E] };
  return { ok: false, message: describe(event, validate.errors?.[0]) };
}

function describe(event: string, issue: ErrorObject | undefined): string {
  if (issue === undefined) return `${event}: the payload is not valid`;
  const where = issue.instancePath === '' ? 'the payload' : issue.instancePath.slice(1).replaceAll('/', '.');
  switch (issue.keyword) {
    case 'required':
      return `${event}: ${where} must have ${String(issue.params.missingProperty)}`;
    case 'additionalProperties':
      return `${event}: ${where} has an unknown property ${String(issue.params.additionalProperty)}`;
    case 'not':
      return `${event}: ${where} is not allowed here`;
    default:
      return `${event}: ${where} ${issue.message ?? 'is not valid'}`;
  }
}
