import type { AppContext } from '../context.ts';
import type { HandlersFor } from './types.ts';

type ProfileOperations = 'getProfile' | 'updateCurrentProfile';

/** Handlers of the `profiles` tag. */
export function profileHandlers(ctx: AppContext): HandlersFor<ProfileOperations> {
  return {
    async getProfile(request) {
      return ctx.auth.profiles.getProfile(request.params.userId);
    },

    async updateCurrentProfile(request) {
      return ctx.auth.profiles.updateProfile(request.user.sub, request.body.profile);
    },
  } satisfies HandlersFor<ProfileOperations>;
}
