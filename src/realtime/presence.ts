import type { FastifyBaseLogger } from 'fastify';
import type { Server } from 'socket.io';
import { channelOfRoom, roomOf } from './fanout.ts';
import type { Caller, RealtimeSocket } from './handshake.ts';
import type { PresenceMember } from './protocol.ts';

/** How a socket appears in a channel's presence: its presence id and its user (null when anonymous). */
export const memberOf = (caller: Caller): PresenceMember => ({
  presenceId: caller.presenceId,
  userId: caller.userId ?? null,
});

/** Tells the channel's other subscribers, on every instance, that this socket has joined. */
export function announceJoin(socket: RealtimeSocket, channel: string): void {
  socket.to(roomOf(channel)).emit('presence:join', { meta: { channel }, member: memberOf(socket.data) });
}

/** Tells the channel's other subscribers, on every instance, that this socket has left. */
export function announceLeave(socket: RealtimeSocket, channel: string): void {
  socket.to(roomOf(channel)).emit('presence:leave', { meta: { channel }, member: memberOf(socket.data) });
}

/** A disconnecting socket leaves every channel it was in: the others of each are told. */
export function announceDeparture(socket: RealtimeSocket): void {
  for (const room of socket.rooms) {
    const channel = channelOfRoom(room);
    if (channel !== undefined) announceLeave(socket, channel);
  }
}

/** What one instance asks the others for: their members of a channel (a server-side event). */
const MEMBERS_REQUEST = 'presence:members';

/** A channel's members, on every instance. */
export interface ChannelMembers {
  /** Everyone subscribed to `channel`, on every instance; only this instance's if the others do not answer. */
  of(channel: string): Promise<PresenceMember[]>;
}

/**
 * The members of channels, for the acknowledgement of a subscription. Each instance answers for
 * its own sockets with their members alone (presence id and user), read from the room: asking the
 * adapter for the other instances' sockets (`fetchSockets`) had each of them send every socket of
 * the room whole (its handshake, rooms and data), so that filling a channel of 1,000 members took
 * 18.7 s, most of it encoding and decoding those answers. `clustered`: whether other instances
 * share the adapter (not the in-memory one, which has no server-side events).
 */
export function channelMembers(io: Server, clustered: boolean, log: FastifyBaseLogger): ChannelMembers {
  const namespace = io.of('/');
  const local = (channel: string): PresenceMember[] => {
    const members: PresenceMember[] = [];
    for (const id of namespace.adapter.rooms.get(roomOf(channel)) ?? []) {
      const socket = namespace.sockets.get(id);
      if (socket !== undefined) members.push(memberOf(socket.data as Caller));
    }
    return members;
  };
  if (clustered) {
    namespace.on(MEMBERS_REQUEST, (channel: unknown, reply: unknown) => {
      if (typeof channel === 'string' && typeof reply === 'function') reply(local(channel));
    });
  }
  return {
    async of(channel) {
      const here = local(channel);
      if (!clustered) return here;
      try {
        const answers = (await namespace.serverSideEmitWithAck(MEMBERS_REQUEST, channel)) as PresenceMember[][];
        return here.concat(...answers);
      } catch (err) {
        log.warn({ err, channel }, 'realtime: presence from other instances unavailable');
        return here;
      }
    },
  };
}
