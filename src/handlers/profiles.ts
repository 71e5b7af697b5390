import type { AppContext } from '../context.ts';
import { eventClient } from './auth.ts';
import type { HandlersFor } from './types.ts';

type ProfileOperations = 'getProfile' | 'updateCurrentProfile';

/** Handlers of the `profiles` tag. */
export function profileHandlers(ctx: AppContext): HandlersFor<ProfileOperations> {
  return {
    async getProfile(request) {
      return ctx.auth.profiles.getProfile(request.params.userId);
    },

    async updateCurrentProfile(request) {
      const caller = { userId: request.user.sub, sessionId: request.user.sid, client: eventClient(request) };
      return ctx.auth.profiles.updateProfile(caller, request.body.profile);
    },
  } satisfies HandlersFor<ProfileOperations>;
}
