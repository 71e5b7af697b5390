import type { FastifyRequest } from 'fastify';
import type { SessionOwner } from '../auth/own-sessions.ts';
import type { AppContext } from '../context.ts';
import { adminActor, eventClient } from './auth.ts';
import type { HandlersFor } from './types.ts';

type SessionOperations = 'listSessions' | 'endSessions' | 'endSession' | 'listUserSessions' | 'endUserSessions';

/** The caller of an operation on their own sessions, from its verified access token. */
const sessionOwner = (request: FastifyRequest): SessionOwner => ({
  userId: request.user.sub,
  sessionId: request.user.sid,
  client: eventClient(request),
});

/** Sessions people can see and end: their own (`auth` tag) and, for administrators, an account's (`users` tag). */
export function sessionHandlers(ctx: AppContext): HandlersFor<SessionOperations> {
  // Read when a request comes (the handlers are also listed without a context: test/contract.test.ts).
  const own = () => ctx.auth.ownSessions;
  return {
    async listSessions(request) {
      return { sessions: await own().list(sessionOwner(request)) };
    },

    async endSessions(request, reply) {
      await own().endMine(sessionOwner(request), request.query.scope);
      reply.code(204);
      return undefined;
    },

    async endSession(request, reply) {
      await own().end(sessionOwner(request), request.params.sessionId);
      reply.code(204);
      return undefined;
    },

    async listUserSessions(request) {
      return { sessions: await own().listOf(request.params.userId, adminActor(request)) };
    },

    async endUserSessions(request, reply) {
      await own().endEverywhere(request.params.userId, adminActor(request));
      reply.code(204);
      return undefined;
    },
  } satisfies HandlersFor<SessionOperations>;
}
