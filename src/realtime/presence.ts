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

/** Everyone subscribed to `channel`, on every instance; only this instance's if the others do not answer. */
export async function membersOf(io: Server, channel: string, log: FastifyBaseLogger): Promise<PresenceMember[]> {
  const toMember = (s: { data: Caller }): PresenceMember => memberOf(s.data);
  try {
    return (await io.in(roomOf(channel)).fetchSockets()).map(toMember);
  } catch (err) {
    log.warn({ err, channel }, 'realtime: presence from other instances unavailable');
    return (await io.local.in(roomOf(channel)).fetchSockets()).map(toMember);
  }
}
