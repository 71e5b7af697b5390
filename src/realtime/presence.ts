import type { FastifyBaseLogger } from 'fastify';
import type { Server } from 'socket.io';
import { channelOfRoom, type Fanout, roomOf } from './fanout.ts';
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
/**
 * How long a subscription waits for the other instances' members: longer than the adapters' own
 * request timeout (5 s), after which they hand over the answers that did come. The Redis adapter
 * never answers at all when it cannot count the instances (Redis down): this bounds that too.
 */
const MEMBERS_DEADLINE_MS = 6_000;

/** A channel's members, on every instance. */
export interface ChannelMembers {
  /**
   * Everyone subscribed to `channel`, on every instance that answers in time; only this
   * instance's while the fan-out is down.
   */
  of(channel: string): Promise<PresenceMember[]>;
}

/** The well-formed members among the other instances' answers (each a list of members). */
function answeredMembers(answers: unknown): PresenceMember[] {
  if (!Array.isArray(answers)) return [];
  return answers.flatMap((answer: unknown) =>
    Array.isArray(answer)
      ? answer.filter(
          (m: unknown): m is PresenceMember =>
            typeof m === 'object' &&
            m !== null &&
            typeof (m as PresenceMember).presenceId === 'string' &&
            ((m as PresenceMember).userId === null || typeof (m as PresenceMember).userId === 'string'),
        )
      : [],
  );
}

/**
 * The members of channels, for the acknowledgement of a subscription. Each instance answers for
 * its own sockets with their members alone (presence id and user), read from the room: asking the
 * adapter for the other instances' sockets (`fetchSockets`) had each of them send every socket of
 * the room whole (its handshake, rooms and data), and filling a channel of 1,000 members spent 15%
 * of an instance's time encoding and decoding those answers. An instance that does not answer
 * (down, or still on a version without this request, during a rolling upgrade) delays the answer
 * by the adapter's timeout and is left out; the others' answers are kept.
 */
export function channelMembers(io: Server, fanout: Pick<Fanout, 'ordering' | 'unavailable'>, log: FastifyBaseLogger) {
  const namespace = io.of('/');
  // The in-memory adapter (one instance) has no server-side events.
  const clustered = fanout.ordering !== 'local';
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
  const members: ChannelMembers = {
    async of(channel) {
      const here = local(channel);
      if (!clustered || fanout.unavailable() !== undefined) return here;
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error('the adapter did not answer')), MEMBERS_DEADLINE_MS);
      });
      try {
        return here.concat(
          answeredMembers(await Promise.race([namespace.serverSideEmitWithAck(MEMBERS_REQUEST, channel), deadline])),
        );
      } catch (err) {
        log.warn({ err, channel }, 'realtime: presence from some other instances unavailable');
        return here.concat(answeredMembers((err as { responses?: unknown }).responses));
      } finally {
        clearTimeout(timer);
      }
    },
  };
  return members;
}
