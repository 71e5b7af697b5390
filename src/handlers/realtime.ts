import type { AppContext } from '../context.ts';
import { notImplemented } from './not-implemented.ts';
import type { HandlersFor } from './types.ts';

/** Handlers of the `realtime` tag. */
export function realtimeHandlers(_ctx: AppContext): HandlersFor<'getRealtimePermissions'> {
  return {
    getRealtimePermissions: async () => notImplemented(),
  } satisfies HandlersFor<'getRealtimePermissions'>;
}
