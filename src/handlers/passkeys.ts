import type { AuthenticationResponseJSON, RegistrationResponseJSON } from '@simplewebauthn/server';
import type { FastifyRequest } from 'fastify';
import type { PasskeyCaller } from '../auth/passkeys.ts';
import type { AppContext } from '../context.ts';
import { clientInfo, eventClient, sessionResult } from './auth.ts';
import type { HandlersFor } from './types.ts';

/** The caller of a passkey operation made with an access token. */
const passkeyCaller = (request: FastifyRequest): PasskeyCaller => ({
  userId: request.user.sub,
  email: request.user.email,
  amr: request.user.amr,
  sessionId: request.user.sid,
  client: eventClient(request),
});

/**
 * The session of an operation whose access token is optional (x-aal aal1; a token that was sent has
 * been verified before the handler runs): undefined without one.
 */
const optionalCaller = (request: FastifyRequest) =>
  request.user === null ? undefined : { userId: request.user.sub, sessionId: request.user.sid };

type PasskeyOperations =
  | 'listPasskeys'
  | 'createPasskeyRegistrationOptions'
  | 'verifyPasskeyRegistration'
  | 'createPasskeyAuthenticationOptions'
  | 'verifyPasskeyAuthentication'
  | 'updatePasskey'
  | 'deletePasskey';

/** Handlers of the `passkeys` tag. */
export function passkeyHandlers(ctx: AppContext): HandlersFor<PasskeyOperations> {
  // Read when called: the handlers are made before the context is complete (and in tests, without one).
  const passkeys = () => ctx.auth.passkeys;
  return {
    async listPasskeys(request) {
      return { passkeys: await passkeys().list(request.user.sub) };
    },

    async createPasskeyRegistrationOptions(request) {
      return (await passkeys().registrationOptions(passkeyCaller(request))) as never;
    },

    async verifyPasskeyRegistration(request, reply) {
      const { passkey, session } = await passkeys().register(
        passkeyCaller(request),
        request.body.response as unknown as RegistrationResponseJSON,
        request.body.friendlyName ?? null,
        clientInfo(request, undefined),
      );
      reply.code(201);
      return session === undefined ? passkey : { ...passkey, session: sessionResult(ctx.config, reply, session) };
    },

    async createPasskeyAuthenticationOptions(request) {
      return (await passkeys().authenticationOptions(request.body?.email, optionalCaller(request))) as never;
    },

    async verifyPasskeyAuthentication(request, reply) {
      const issued = await passkeys().authenticate(
        request.body.challengeId,
        request.body.response as unknown as AuthenticationResponseJSON,
        optionalCaller(request),
        clientInfo(request, request.query.client_type),
      );
      return sessionResult(ctx.config, reply, issued);
    },

    async updatePasskey(request) {
      return passkeys().rename(request.user.sub, request.params.passkeyId, request.body.friendlyName);
    },

    async deletePasskey(request, reply) {
      await passkeys().remove(passkeyCaller(request), request.params.passkeyId);
      reply.code(204);
      return undefined;
    },
  } satisfies HandlersFor<PasskeyOperations>;
}
