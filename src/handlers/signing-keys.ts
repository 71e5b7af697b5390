import type { FastifyRequest } from 'fastify';
import type { AppContext } from '../context.ts';
import type { RecordChange } from '../db/repositories/signing-keys.ts';
import { adminActor } from './auth.ts';
import type { HandlersFor } from './types.ts';

type SigningKeyOperations =
  | 'getJwks'
  | 'getOpenIdConfiguration'
  | 'listSigningKeys'
  | 'createSigningKey'
  | 'rotateSigningKeys'
  | 'revokeSigningKey';

/** How long verifiers may keep the JWKS and the discovery document (at most 10 minutes by the contract). */
const PUBLISHED_CACHE_CONTROL = 'public, max-age=300';

const CLAIMS = ['sub', 'email', 'role', 'sid', 'token_use', 'iss', 'aud', 'iat', 'exp', 'jti', 'aal', 'amr'];

/** An administrator's change of the keys in the audit log, written in the change's transaction. */
function recordKeyChange(
  ctx: AppContext,
  request: FastifyRequest,
  type: 'signing_key_created' | 'signing_key_rotated' | 'signing_key_revoked',
  alg?: string,
): RecordChange {
  const actor = adminActor(request);
  return (trx, kid) =>
    ctx.audit.record(trx, {
      type,
      userId: null,
      actorId: actor.userId,
      sessionId: actor.sessionId,
      client: actor.client,
      details: alg === undefined ? { kid } : { kid, alg },
    });
}

/**
 * Handlers of the `signing-keys` tag: the public keys for anyone, their management for
 * administrators (x-roles in openapi.yaml). Each change is logged with the administrator's id.
 */
export function signingKeyHandlers(ctx: AppContext): HandlersFor<SigningKeyOperations> {
  return {
    async getJwks(_request, reply) {
      reply.header('cache-control', PUBLISHED_CACHE_CONTROL);
      return ctx.signingKeys.jwks();
    },

    async getOpenIdConfiguration(_request, reply) {
      reply.header('cache-control', PUBLISHED_CACHE_CONTROL);
      const issuer = ctx.signingKeys.issuer;
      return {
        issuer,
        jwks_uri: `${issuer}/.well-known/jwks.json`,
        id_token_signing_alg_values_supported: [...new Set(ctx.signingKeys.jwks().keys.map((k) => k.alg))],
        subject_types_supported: ['public' as const],
        claims_supported: CLAIMS,
      };
    },

    async listSigningKeys() {
      return { keys: await ctx.signingKeys.list() };
    },

    async createSigningKey(request, reply) {
      const alg = request.body?.alg ?? 'ES256';
      const key = await ctx.signingKeys.create(alg, recordKeyChange(ctx, request, 'signing_key_created', alg));
      request.log.info({ adminId: request.user.sub, kid: key.kid, alg: key.alg }, 'signing keys: standby key created');
      reply.code(201);
      return key;
    },

    async rotateSigningKeys(request) {
      const list = await ctx.signingKeys.rotate(recordKeyChange(ctx, request, 'signing_key_rotated'));
      const current = list.find((k) => k.status === 'current');
      request.log.info({ adminId: request.user.sub, kid: current?.kid }, 'signing keys: rotated');
      return { keys: list };
    },

    async revokeSigningKey(request) {
      const key = await ctx.signingKeys.revoke(
        request.params.kid,
        recordKeyChange(ctx, request, 'signing_key_revoked'),
      );
      request.log.info({ adminId: request.user.sub, kid: key.kid }, 'signing keys: key revoked');
      return key;
    },
  } satisfies HandlersFor<SigningKeyOperations>;
}
