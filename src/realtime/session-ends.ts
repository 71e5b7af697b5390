import type { SessionRevocations } from '../auth/session-revocations.ts';
import { emitRealtimeError, type RealtimeSocket } from './handshake.ts';

const SESSION_REVOKED_MESSAGE = 'This session has ended; sign in again';
/** setTimeout's longest delay. */
const MAX_TIMER_MS = 2_147_483_647;

export interface SessionEnds {
  /**
   * Watches a connected socket: told SESSION_REVOKED and disconnected when its session is revoked
   * (here or on another instance), TOKEN_EXPIRED when its access token expires. False if the session
   * was revoked already (the socket has been disconnected).
   */
  watch(socket: RealtimeSocket): boolean;
  close(): void;
}

/** Ends signed-in sockets with their sessions and access tokens. */
export function watchSessionEnds(revocations: SessionRevocations): SessionEnds {
  /** This instance's signed-in sockets by session id, so that a revocation finds them without a scan. */
  const bySession = new Map<string, Set<RealtimeSocket>>();
  const stopRevocations = revocations.onRevoked((sessionId) => {
    const sockets = bySession.get(sessionId);
    if (sockets === undefined) return;
    for (const socket of [...sockets]) {
      emitRealtimeError(socket, 'SESSION_REVOKED', SESSION_REVOKED_MESSAGE, null);
      socket.disconnect(true);
    }
  });

  const watchSession = (socket: RealtimeSocket, sessionId: string): boolean => {
    // Revoked between the handshake's check and now: the revocation did not find this socket.
    if (revocations.isRevoked(sessionId)) {
      emitRealtimeError(socket, 'SESSION_REVOKED', SESSION_REVOKED_MESSAGE, null);
      socket.disconnect(true);
      return false;
    }
    let sockets = bySession.get(sessionId);
    if (sockets === undefined) {
      sockets = new Set();
      bySession.set(sessionId, sockets);
    }
    sockets.add(socket);
    socket.once('disconnect', () => {
      const current = bySession.get(sessionId);
      current?.delete(socket);
      if (current?.size === 0) bySession.delete(sessionId);
    });
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
      const { sessionId, expiresAt } = socket.data;
      if (sessionId !== undefined && !watchSession(socket, sessionId)) return false;
      if (expiresAt !== undefined) watchExpiry(socket, expiresAt);
      return true;
    },
    close: stopRevocations,
  };
}
