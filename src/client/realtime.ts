/**
 * Types of the realtime socket protocol (asyncapi.yaml) for socket.io-client's typed sockets:
 *
 *   const socket: Socket<RealtimeServerEvents, RealtimeClientEvents> = io(url, { transports: ['websocket'], auth: { token } });
 *
 * Types only: the SDK does not bundle socket.io-client.
 */
import type { components } from '../../generated/asyncapi.ts';

type S = components['schemas'];
export type RealtimeSchemas = S;
export type BroadcastMessage = S['BroadcastMessage'];

/**
 * What the server sends: the three protocol events, and every published event under its own name,
 * whose argument is a BroadcastMessage (type your listener: `(m: BroadcastMessage & { text: string })`).
 */
export interface RealtimeServerEvents {
  'realtime:error': (error: S['RealtimeError']) => void;
  'presence:join': (event: S['PresenceEvent']) => void;
  'presence:leave': (event: S['PresenceEvent']) => void;
  // biome-ignore lint/suspicious/noExplicitAny: the published events' names are the publishers'; their argument is a BroadcastMessage.
  [event: string]: (...args: any[]) => void;
}

/** What a client sends, with the acknowledgements the server gives. */
export interface RealtimeClientEvents {
  'realtime:subscribe': (request: S['SubscribeRequest'], ack: (response: S['SubscribeResponse']) => void) => void;
  'realtime:unsubscribe': (
    request: S['UnsubscribeRequest'],
    ack?: (response: S['UnsubscribeResponse']) => void,
  ) => void;
  'realtime:publish': (request: S['PublishRequest'], ack?: (response: S['PublishResponse']) => void) => void;
}
