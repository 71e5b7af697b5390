import type { FastifyBaseLogger } from 'fastify';
import type { Kysely } from 'kysely';
import { isRetryable } from '../db/errors.ts';
import { subscribable } from '../db/repositories/realtime-access.ts';
import type { Database } from '../db/schema.ts';
import { roomOf } from './fanout.ts';
import { emitRealtimeError, type RealtimeSocket } from './handshake.ts';
import type { PolicyCache } from './policy-cache.ts';
import { announceLeave } from './presence.ts';
import { type RecheckPass, SubscriptionRecheck } from './recheck.ts';

export interface LiveSubscriptionsOptions {
  db: Kysely<Database>;
  /** Says when policies or channels change. */
  policies: PolicyCache;
  /** Between periodic re-checks (REALTIME_RECHECK_SECONDS); 0: none. */
  periodMs: number;
  log: FastifyBaseLogger;
  onPass?(pass: RecheckPass): void;
}

/**
 * This instance's channel subscriptions, kept true to the subscribe policies: every one is checked
 * again when a policy or channel changes and every period (src/realtime/recheck.ts), and one that no
 * longer passes is ended (out of the room first, then the socket is told UNAUTHORIZED).
 */
export class LiveSubscriptions {
  /** For each socket, its channels and which joining each one is. */
  readonly #live = new Map<RealtimeSocket, Map<string, number>>();
  #joinings = 0;
  readonly #recheck: SubscriptionRecheck<RealtimeSocket>;
  readonly #stopPolicyWatch: () => void;

  constructor({ db, policies, periodMs, log, onPass }: LiveSubscriptionsOptions) {
    const live = this.#live;
    this.#recheck = new SubscriptionRecheck<RealtimeSocket>({
      *list() {
        for (const [socket, channels] of live) {
          for (const [channel, joined] of channels) yield { socket, userId: socket.data.userId, channel, joined };
        }
      },
      check: (questions) => subscribable(db, questions),
      end: (s) => this.#end(s.socket, s.channel, s.joined),
      isTransient: isRetryable,
      periodMs,
      log,
      onPass: (pass) => {
        onPass?.(pass);
        if (pass.ended > 0) log.info(pass, 'realtime: subscriptions ended by the re-check');
      },
    });
    this.#stopPolicyWatch = policies.onChange(() => this.#recheck.changed());
  }

  /**
   * Bumped by every policy or channel change: a subscribe whose check began under an older
   * generation asks again, since the re-check for the change may have run before it joined.
   */
  get generation(): number {
    return this.#recheck.generation;
  }

  /** A connected socket, with no subscriptions yet. */
  add(socket: RealtimeSocket): void {
    this.#live.set(socket, new Map());
  }

  /** A socket that is disconnecting: nothing of it is checked again. */
  remove(socket: RealtimeSocket): void {
    this.#live.delete(socket);
  }

  /** How many channels the socket is subscribed to. */
  count(socket: RealtimeSocket): number {
    return this.#live.get(socket)?.size ?? 0;
  }

  /** The socket has (again) joined the channel's room after the policies allowed it: a new joining. */
  joined(socket: RealtimeSocket, channel: string): void {
    this.#live.get(socket)?.set(channel, ++this.#joinings);
  }

  /** Leaves the channel's room (synchronously on every adapter: nothing more is delivered) and says so to the others. */
  leave(socket: RealtimeSocket, channel: string): void {
    this.#live.get(socket)?.delete(channel);
    void socket.leave(roomOf(channel));
    announceLeave(socket, channel);
  }

  close(): void {
    this.#stopPolicyWatch();
    this.#recheck.close();
  }

  /** Ends a subscription the policies no longer allow; false if it has since been ended or made again. */
  #end(socket: RealtimeSocket, channel: string, joined: number): boolean {
    if (this.#live.get(socket)?.get(channel) !== joined || socket.disconnected) return false;
    this.leave(socket, channel);
    emitRealtimeError(socket, 'UNAUTHORIZED', 'The realtime policies no longer allow this subscription', channel);
    return true;
  }
}
