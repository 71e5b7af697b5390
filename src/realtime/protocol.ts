import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import addFormats from 'ajv-formats';
import { parse } from 'yaml';
import type { components } from '../../generated/asyncapi.ts';
import { asyncapiYaml } from '../spec.ts';

/** The events a client may send, and the asyncapi.yaml schema of each one's payload. */
export const clientEvents = {
  'realtime:subscribe': 'SubscribeRequest',
  'realtime:unsubscribe': 'UnsubscribeRequest',
  'realtime:publish': 'PublishRequest',
} as const;
export type ClientEvent = keyof typeof clientEvents;

type Schemas = components['schemas'];
export type SubscribeRequest = Schemas['SubscribeRequest'];
export type UnsubscribeRequest = Schemas['UnsubscribeRequest'];
export type PublishRequest = Schemas['PublishRequest'];
export type RealtimeErrorCode = Schemas['RealtimeErrorCode'];
export type PresenceMember = Schemas['PresenceMember'];
export type MessageMeta = Schemas['MessageMeta'];

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
