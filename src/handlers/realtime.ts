import type { AppContext } from '../context.ts';
import type { HandlersFor } from './types.ts';

/** Handlers of the `realtime` tag. */
export function realtimeHandlers(ctx: AppContext): HandlersFor<'getRealtimePermissions'> {
  return {
    getRealtimePermissions: async () => ctx.realtimePolicies.get(),
  } satisfies HandlersFor<'getRealtimePermissions'>;
}
