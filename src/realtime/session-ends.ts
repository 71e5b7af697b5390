import type { SessionRevocations } from '../auth/session-revocations.ts';
import type { SigningKeys } from '../auth/signing-keys.ts';
import { emitRealtimeError, type RealtimeSocket } from './handshake.ts';

const SESSION_REVOKED_MESSAGE = 'This session has ended; sign in again';
const KEY_REVOKED_MESSAGE = 'The key that signed the access token was revoked; refresh the session and reconnect';
/** setTimeout's longest delay. */
const MAX_TIMER_MS = 2_147_483_647;

export interface SessionEnds {
  /**
   * Watches a connected socket: told SESSION_REVOKED and disconnected when its session is revoked
   * (here or on another instance), UNAUTHORIZED when the key that signed its token is revoked,
   * TOKEN_EXPIRED when its access token expires. False if the session was revoked already (the
   * socket has been disconnected).
   */
  watch(socket: RealtimeSocket): boolean;
  close(): void;
}

/** Sockets by a key (a session id, a signing key's kid), each dropped from its set when it disconnects. */
class SocketIndex {
  readonly #sockets = new Map<string, Set<RealtimeSocket>>();

  add(key: string, socket: RealtimeSocket): void {
    let sockets = this.#sockets.get(key);
    if (sockets === undefined) {
      sockets = new Set();
      this.#sockets.set(key, sockets);
    }
    sockets.add(socket);
    socket.once('disconnect', () => {
      const current = this.#sockets.get(key);
      current?.delete(socket);
      if (current?.size === 0) this.#sockets.delete(key);
    });
  }

  /** The sockets under `key` (a copy: ending them changes the set). */
  get(key: string): RealtimeSocket[] {
    return [...(this.#sockets.get(key) ?? [])];
  }

  keys(): string[] {
    return [...this.#sockets.keys()];
  }
}

/** Ends signed-in sockets with their sessions, their tokens' signing keys and their access tokens. */
export function watchSessionEnds(
  revocations: SessionRevocations,
  keys: Pick<SigningKeys, 'onChange' | 'verifying'>,
): SessionEnds {
  /** This instance's signed-in sockets by session id, so that a revocation finds them without a scan. */
  const bySession = new SocketIndex();
  /** And by the kid of their token, so that a revoked key's sockets are found. */
  const byKey = new SocketIndex();
  const stopRevocations = revocations.onRevoked((sessionId) => {
    for (const socket of bySession.get(sessionId)) {
      emitRealtimeError(socket, 'SESSION_REVOKED', SESSION_REVOKED_MESSAGE, null);
      socket.disconnect(true);
    }
  });
  const stopKeys = keys.onChange(() => {
    for (const kid of byKey.keys()) {
      if (keys.verifying(kid) !== undefined) continue;
      for (const socket of byKey.get(kid)) {
        emitRealtimeError(socket, 'UNAUTHORIZED', KEY_REVOKED_MESSAGE, null);
        socket.disconnect(true);
      }
    }
  });

  const watchSession = (socket: RealtimeSocket, sessionId: string): boolean => {
    // Revoked between the handshake's check and now: the revocation did not find this socket.
    if (revocations.isRevoked(sessionId)) {
      emitRealtimeError(socket, 'SESSION_REVOKED', SESSION_REVOKED_MESSAGE, null);
      socket.disconnect(true);
      return false;
    }
    bySession.add(sessionId, socket);
    return true;
  };

  const watchExpiry = (socket: RealtimeSocket, expiresAt: number) => {
    let expiry: NodeJS.Timeout;
    // Re-armed until the expiry: a timer cannot wait longer than about 24.8 days.
    const arm = () => {
      const left = expiresAt - Date.now();
      if (left > MAX_TIMER_MS) {
        expiry = setTimeout(arm, MAX_TIMER_MS);
        return;
      }
      expiry = setTimeout(
        () => {
          emitRealtimeError(socket, 'TOKEN_EXPIRED', 'The access token has expired; reconnect with a fresh one', null);
          socket.disconnect(true);
        },
        Math.max(left, 0),
      );
    };
    arm();
    socket.once('disconnect', () => clearTimeout(expiry));
  };

  return {
    watch(socket) {
      const { sessionId, expiresAt, signingKey } = socket.data;
      if (sessionId !== undefined && !watchSession(socket, sessionId)) return false;
      if (signingKey !== undefined) {
        // Revoked between the handshake's check and now: the change did not find this socket.
        if (keys.verifying(signingKey) === undefined) {
          emitRealtimeError(socket, 'UNAUTHORIZED', KEY_REVOKED_MESSAGE, null);
          socket.disconnect(true);
          return false;
        }
        byKey.add(signingKey, socket);
      }
      if (expiresAt !== undefined) watchExpiry(socket, expiresAt);
      return true;
    },
    close() {
      stopRevocations();
      stopKeys();
    },
  };
}
