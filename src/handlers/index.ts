import type { AppContext } from '../context.ts';
import { auditLogHandlers } from './audit-log.ts';
import { authHandlers } from './auth.ts';
import { emailCodeHandlers } from './email-codes.ts';
import { embeddingHandlers } from './embeddings.ts';
import { healthHandlers } from './health.ts';
import { identityHandlers } from './identities.ts';
import { metricsHandlers } from './metrics.ts';
import { mfaHandlers } from './mfa.ts';
import { oauthHandlers } from './oauth.ts';
import { passkeyHandlers } from './passkeys.ts';
import { profileHandlers } from './profiles.ts';
import { publicConfigHandlers } from './public-config.ts';
import { realtimeHandlers } from './realtime.ts';
import { sessionHandlers } from './sessions.ts';
import { signingKeyHandlers } from './signing-keys.ts';
import type { ServiceHandlers } from './types.ts';
import { userHandlers } from './users.ts';
import { webhookHandlers } from './webhooks.ts';

/** The service handlers bound by fastify-openapi-glue, one per operationId, grouped by tag. */
export function createServiceHandlers(ctx: AppContext): ServiceHandlers {
  return {
    ...healthHandlers(ctx),
    ...metricsHandlers(ctx),
    ...authHandlers(ctx),
    ...sessionHandlers(ctx),
    ...mfaHandlers(ctx),
    ...passkeyHandlers(ctx),
    ...emailCodeHandlers(ctx),
    ...oauthHandlers(ctx),
    ...identityHandlers(ctx),
    ...userHandlers(ctx),
    ...auditLogHandlers(ctx),
    ...signingKeyHandlers(ctx),
    ...webhookHandlers(ctx),
    ...profileHandlers(ctx),
    ...publicConfigHandlers(ctx),
    ...embeddingHandlers(ctx),
    ...realtimeHandlers(ctx),
  };
}
