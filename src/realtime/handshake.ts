import { randomUUID } from 'node:crypto';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import type { Server, Socket } from 'socket.io';
import { AccessTokenRefused, verifyAccessToken } from '../auth/access-token.ts';
import { clientAddress, proxyTrust } from '../client-address.ts';
import type { Config } from '../config.ts';
import { ApiError } from '../errors.ts';
import type { RealtimeErrorCode } from './protocol.ts';
import type { SocketQuota } from './socket-quota.ts';

/** Who is on the other end of a socket, as its handshake established (socket.data). */
export interface Caller {
  /** The signed-in user; undefined on an anonymous socket (role anon). */
  userId: string | undefined;
  /** The session of the access token; undefined when anonymous. */
  sessionId: string | undefined;
  presenceId: string;
  /** When the access token expires (ms since the epoch); undefined when anonymous. */
  expiresAt: number | undefined;
  /** The signing key of the access token (its kid); undefined when anonymous or for an HS256 token. */
  signingKey: string | undefined;
}
export type RealtimeSocket = Socket<Record<string, never>, Record<string, (...args: unknown[]) => void>, never, Caller>;

/** Tells the client of a failure that answers no request of its own (or repeats one that did). */
export const emitRealtimeError = (
  socket: RealtimeSocket,
  code: RealtimeErrorCode,
  message: string,
  channel: string | null,
) => socket.emit('realtime:error', { code, message, channel });

export interface HandshakeOptions {
  app: FastifyInstance;
  config: Readonly<Config>;
  quota: SocketQuota;
  log: FastifyBaseLogger;
}

/**
 * Admits a socket on its handshake's access token (`auth.token`), or anonymously when
 * REALTIME_ALLOW_ANON allows, and only while its user (an anonymous client: its address) has fewer
 * than REALTIME_MAX_SOCKETS_PER_USER sockets open. A refused handshake's connect_error carries
 * `data` {code, message}.
 */
export function admitSockets(io: Server, { app, config, quota, log }: HandshakeOptions): void {
  const trustProxy = proxyTrust(config.trustProxy);

  /** A place among the user's sockets, given back when the connection ends; else the refusal. */
  const takeSocketPlace = async (socket: RealtimeSocket, quotaKey: string): Promise<Error | undefined> => {
    if (!(await quota.take(quotaKey, socket.id))) {
      const max = config.realtime.maxSocketsPerUser;
      return refusal(
        'TOO_MANY_CONNECTIONS',
        `At most ${max} realtime connections are open at once per user (per address without a token)`,
      );
    }
    const release = () => quota.release(quotaKey, socket.id);
    // Either ends the place: a socket that never completes its connection has no disconnect.
    socket.once('disconnect', release);
    if (socket.conn.readyState === 'closed') release();
    else socket.conn.once('close', release);
    return undefined;
  };

  io.use((socket, next) => {
    const token = (socket.handshake.auth as { token?: unknown } | undefined)?.token;
    // The handshake stays with the socket for its whole life (and an adapter's fetchSockets would
    // carry it to the other instances): of what the client sent, only the token is read, and it,
    // any cookie and any other (possibly huge or deeply nested) value are dropped here.
    socket.handshake.auth = {};
    delete socket.handshake.headers.authorization;
    delete socket.handshake.headers.cookie;
    const presenceId = randomUUID();
    const placeTaken = (quotaKey: string) =>
      takeSocketPlace(socket as unknown as RealtimeSocket, quotaKey).then(next, (err: unknown) => {
        log.error({ err }, 'realtime: counting the sockets failed');
        next(refusal('INTERNAL_ERROR', 'The handshake could not be completed'));
      });
    if (token === undefined || token === null || token === '') {
      if (config.realtime.allowAnon) {
        socket.data = {
          userId: undefined,
          sessionId: undefined,
          presenceId,
          expiresAt: undefined,
          signingKey: undefined,
        } satisfies Caller;
        // Anonymous sockets are counted per client address, against the same limit.
        return void placeTaken(`anon:${clientAddress(socket.request, trustProxy)}`);
      }
      return next(refusal('UNAUTHORIZED', 'An access token is required in the handshake (auth.token)'));
    }
    if (typeof token !== 'string') return next(refusal('UNAUTHORIZED', 'auth.token must be a string'));
    try {
      const claims = verifyAccessToken(app, token);
      if (claims.next_aal === 'aal2') {
        return next(
          refusal('MFA_REQUIRED', 'This session has not proven its second factor: use POST /api/auth/mfa/verify'),
        );
      }
      socket.data = {
        userId: claims.sub,
        sessionId: claims.sid,
        presenceId,
        expiresAt: claims.exp === undefined ? undefined : claims.exp * 1000,
        signingKey: app.accessTokens.kidOf(token),
      } satisfies Caller;
      void placeTaken(claims.sub);
    } catch (err) {
      // The socket protocol keeps its own codes for a token that expired or is not valid.
      if (err instanceof AccessTokenRefused) {
        return next(refusal(err.reason === 'expired' ? 'TOKEN_EXPIRED' : 'UNAUTHORIZED', err.message));
      }
      if (err instanceof ApiError) return next(refusal(err.code, err.message));
      log.error({ err }, 'realtime: handshake failed');
      next(refusal('INTERNAL_ERROR', 'The handshake could not be completed'));
    }
  });
}

/** A handshake refusal: connect_error's message, and `data` {code, message} for programs. */
function refusal(code: string, message: string): Error {
  return Object.assign(new Error(message), { data: { code, message } });
}
