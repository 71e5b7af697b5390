import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import addFormats from 'ajv-formats';
import type { Socket } from 'socket.io-client';
import { parse } from 'yaml';
import { asyncapiYaml } from '../../src/spec.ts';

/**
 * The realtime protocol of asyncapi.yaml as checks: what a client emits, the acknowledgements it
 * gets and the events it receives, each against the document's component schemas. Every check
 * answers undefined when the value is valid, else a sentence that names the event and the path.
 */

/** asyncapi.yaml, parsed. */
export const asyncapiDocument: Record<string, unknown> = parse(asyncapiYaml);

// The whole document as one draft-07 schema, so that `#/components/schemas/...` refs resolve.
// verbose: errors carry their schema, to word the `not` ones.
const ajv = new Ajv({ strict: false, verbose: true });
addFormats.default(ajv);
ajv.addSchema({ ...asyncapiDocument, $id: 'asyncapi' });

/** Ajv's message, naming the values or the property at fault where Ajv does not. */
function describe(error: ErrorObject): string {
  const { keyword, params } = error;
  if (keyword === 'enum') return `must be one of ${(params.allowedValues as unknown[]).join(', ')}`;
  if (keyword === 'additionalProperties') return `must not have property '${params.additionalProperty}'`;
  const not = keyword === 'not' ? (error.schema as { enum?: unknown[]; required?: string[] }) : {};
  if (not.enum) return `must not be one of ${not.enum.join(', ')}`;
  if (not.required) return `must not have property ${not.required.map((p) => `'${p}'`).join(', ')}`;
  return error.message ?? 'is invalid';
}

function validatorAt(pointer: string): ValidateFunction {
  const validate = ajv.getSchema(`asyncapi#${pointer}`);
  if (!validate) throw new Error(`no schema at ${pointer} in asyncapi.yaml`);
  return validate;
}

/** Checks `value` against the schema at a JSON pointer into asyncapi.yaml (`/components/schemas/X`). */
export function validateAt(pointer: string, value: unknown, dataVar = 'payload'): string | undefined {
  const validate = validatorAt(pointer);
  if (validate(value)) return undefined;
  const sentences = (validate.errors ?? []).map((e) => `${dataVar}${e.instancePath} ${describe(e)}`);
  return [...new Set(sentences)].join('; ');
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const clientEvents = {
  'realtime:subscribe': { request: 'SubscribeRequest', response: 'SubscribeResponse' },
  'realtime:unsubscribe': { request: 'UnsubscribeRequest', response: 'UnsubscribeResponse' },
  'realtime:publish': { request: 'PublishRequest', response: 'PublishResponse' },
} as const;

/** The events a client emits. */
export type ClientEvent = keyof typeof clientEvents;

const isClientEvent = (event: string): event is ClientEvent => Object.hasOwn(clientEvents, event);

export function validateClientEmit(event: string, payload: unknown): string | undefined {
  if (!isClientEvent(event)) {
    return `${event}: not a client event of asyncapi.yaml (${Object.keys(clientEvents).join(', ')})`;
  }
  const problem = validateAt(`/components/schemas/${clientEvents[event].request}`, payload);
  return problem && `${event}: ${problem}`;
}

type Response = { oneOf: { properties: { ok: { const: boolean } } }[] };
const schemas = (asyncapiDocument.components as { schemas: Record<string, unknown> }).schemas;

export function validateAck(event: ClientEvent, ack: unknown): string | undefined {
  const name = clientEvents[event].response;
  const pointer = `/components/schemas/${name}`;
  if (validateAt(pointer, ack) === undefined) return undefined;
  // oneOf's errors list both branches: report those of the branch that `ok` selects, when it does.
  const branch = (schemas[name] as Response).oneOf.findIndex((b) => isRecord(ack) && b.properties.ok.const === ack.ok);
  return `${event} acknowledgement: ${validateAt(branch < 0 ? pointer : `${pointer}/oneOf/${branch}`, ack, 'ack')}`;
}

export function validateServerEvent(event: string, payload: unknown): string | undefined {
  let schema: string;
  if (event === 'realtime:error') schema = 'RealtimeError';
  else if (event === 'presence:join' || event === 'presence:leave') schema = 'PresenceEvent';
  else {
    const badName = validateAt('/components/schemas/EventName', event, 'event name');
    if (badName !== undefined) return `${event}: not a server event of asyncapi.yaml (${badName})`;
    schema = 'BroadcastMessage';
  }
  const problem = validateAt(`/components/schemas/${schema}`, payload);
  return problem && `${event}: ${problem}`;
}

/** A socket whose traffic is checked against asyncapi.yaml; what does not match is in `violations`. */
export type CheckedSocket = Socket & { readonly violations: string[] };

type Callback = ((...args: unknown[]) => unknown) & { withError?: boolean };

/**
 * Instruments `socket` in place and returns it: every event it emits (and whether a
 * `realtime:subscribe` asks for its acknowledgement), every acknowledgement it gets (and that it
 * echoes the request's channel), and every event it receives. Tests assert `violations` is empty.
 */
export function checkedClient(socket: Socket): CheckedSocket {
  const violations: string[] = [];
  const note = (problem: string | undefined) => {
    if (problem !== undefined) violations.push(problem);
  };
  const oneArgument = (what: string, args: unknown[]) =>
    args.length === 1 ? undefined : `${what} with ${args.length} arguments; the protocol has exactly one`;

  socket.onAny((event: string, ...args: unknown[]) => {
    note(oneArgument(`received ${event}`, args));
    note(validateServerEvent(event, args[0]));
  });

  const checkedAck = (event: ClientEvent, request: unknown, ack: Callback): Callback => {
    const channel = isRecord(request) && typeof request.channel === 'string' ? request.channel : null;
    const wrapped: Callback = function (this: unknown, ...args: unknown[]) {
      // With emitWithAck or timeout() the callback gets (error, value); an Error is a timeout or a
      // disconnect, not an answer of the server.
      if (!(args[0] instanceof Error)) {
        const values = args[0] === null ? args.slice(1) : args;
        const value = values[0];
        note(oneArgument(`${event} acknowledged`, values));
        note(validateAck(event, value));
        if (isRecord(value) && value.channel !== channel) {
          note(`${event} acknowledgement: channel ${JSON.stringify(value.channel)} is not the request's (${channel})`);
        }
      }
      return ack.apply(this, args);
    };
    // emitWithAck marks its callback as taking an error first; the mark must survive the wrapping.
    if (ack.withError !== undefined) wrapped.withError = ack.withError;
    return wrapped;
  };

  const emit = socket.emit;
  socket.emit = function (this: Socket, event: string, ...args: unknown[]) {
    const ack = typeof args.at(-1) === 'function' ? (args.pop() as Callback) : undefined;
    note(oneArgument(`sent ${event}`, args));
    note(validateClientEmit(event, args[0]));
    if (event === 'realtime:subscribe' && ack === undefined) {
      note('realtime:subscribe sent without an acknowledgement callback');
    }
    if (ack !== undefined) args.push(isClientEvent(event) ? checkedAck(event, args[0], ack) : ack);
    return emit.call(this, event, ...args);
  } as Socket['emit'];

  return Object.assign(socket, { violations });
}
