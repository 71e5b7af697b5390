import type { AppContext } from '../context.ts';
import { notImplemented } from './not-implemented.ts';
import type { HandlersFor } from './types.ts';

/** Handlers of the `users` tag. */
export function userHandlers(_ctx: AppContext): HandlersFor<'listUsers'> {
  return {
    listUsers: async () => notImplemented(),
  } satisfies HandlersFor<'listUsers'>;
}
