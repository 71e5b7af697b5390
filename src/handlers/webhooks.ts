import type { AppContext } from '../context.ts';
import { listDeliveries } from '../webhooks/deliveries.ts';
import type { HandlersFor } from './types.ts';

type WebhookOperations = 'listWebhookDeliveries';

/** Handlers of the `webhooks` tag: the outbox's deliveries, for administrators (x-roles in openapi.yaml). */
export function webhookHandlers(ctx: AppContext): HandlersFor<WebhookOperations> {
  return {
    async listWebhookDeliveries(request) {
      const { status, cursor, limit } = request.query;
      return listDeliveries(ctx.db, { status, cursor, limit: Number(limit ?? '50') });
    },
  } satisfies HandlersFor<WebhookOperations>;
}
