import type { FastifyRequest } from 'fastify';
import type { FactorCaller } from '../auth/mfa/factors.ts';
import type { AppContext } from '../context.ts';
import { clientInfo, eventClient, sessionResult } from './auth.ts';
import type { HandlersFor } from './types.ts';

/** The caller of an operation that changes the factors, from its verified access token. */
const factorCaller = (request: FastifyRequest): FactorCaller => ({
  userId: request.user.sub,
  email: request.user.email,
  amr: request.user.amr,
  sessionId: request.user.sid,
  client: eventClient(request),
});

type MfaOperations = 'listFactors' | 'createFactor' | 'deleteFactor' | 'regenerateRecoveryCodes' | 'verifyMfa';

/**
 * Handlers of the `mfa` tag. Which session may call each (x-aal in openapi.yaml) is checked before
 * they run (operation-rules.ts).
 */
export function mfaHandlers(ctx: AppContext): HandlersFor<MfaOperations> {
  return {
    async listFactors(request) {
      return { factors: await ctx.auth.factors.list(request.user.sub) };
    },

    async createFactor(request, reply) {
      const enrolled = await ctx.auth.factors.enroll(factorCaller(request), request.body.friendlyName ?? null);
      reply.code(201);
      return enrolled;
    },

    async deleteFactor(request, reply) {
      await ctx.auth.factors.remove(factorCaller(request), request.params.factorId);
      reply.code(204);
      return undefined;
    },

    async regenerateRecoveryCodes(request) {
      return { codes: await ctx.auth.factors.regenerateRecoveryCodes(factorCaller(request)) };
    },

    async verifyMfa(request, reply) {
      const client = clientInfo(request, request.query.client_type);
      const issued = await ctx.auth.secondStep.verify(
        { userId: request.user.sub, sessionId: request.user.sid, owesSecondStep: request.user.next_aal === 'aal2' },
        request.body,
        client,
      );
      const result = sessionResult(ctx.config, reply, issued);
      return issued.recoveryCodes === undefined ? result : { ...result, recoveryCodes: issued.recoveryCodes };
    },
  } satisfies HandlersFor<MfaOperations>;
}
