import type { AppContext } from '../context.ts';
import { notImplemented } from './not-implemented.ts';
import type { HandlersFor } from './types.ts';

type AuthOperations =
  | 'createUser'
  | 'createSession'
  | 'sendVerificationEmail'
  | 'verifyEmail'
  | 'refreshSession'
  | 'logout'
  | 'getCurrentSession';

/** Handlers of the `auth` tag. */
export function authHandlers(_ctx: AppContext): HandlersFor<AuthOperations> {
  return {
    createUser: async () => notImplemented(),
    createSession: async () => notImplemented(),
    sendVerificationEmail: async () => notImplemented(),
    verifyEmail: async () => notImplemented(),
    refreshSession: async () => notImplemented(),
    logout: async () => notImplemented(),
    getCurrentSession: async () => notImplemented(),
  } satisfies HandlersFor<AuthOperations>;
}
