import { toApiUser } from '../auth/user-view.ts';
import type { AppContext } from '../context.ts';
import { listUsersPage } from '../db/repositories/user-directory.ts';
import { ApiError } from '../errors.ts';
import type { HandlersFor } from './types.ts';

/** offset and limit arrive as strings of digits within their bounds (the schema's patterns). */
const pageNumber = (raw: string | undefined, fallback: number): number => (raw === undefined ? fallback : Number(raw));

type UserOperations = 'listUsers' | 'getUser' | 'updateUser' | 'deleteUsers';

/** The access token's role must be admin (a role change ends the account's sessions, so the claim is current). */
function requireAdmin(role: string): void {
  if (role !== 'admin') throw new ApiError('FORBIDDEN', 'Administrator role required');
}

/** Handlers of the `users` tag. */
export function userHandlers(ctx: AppContext): HandlersFor<UserOperations> {
  return {
    async listUsers(request) {
      if (request.user.role !== 'admin') {
        throw new ApiError('FORBIDDEN', 'Only administrators may list users');
      }
      const offset = pageNumber(request.query.offset, 0);
      const limit = pageNumber(request.query.limit, 10);
      const raw = request.query.search;
      const search = raw !== undefined && raw.trim() !== '' ? raw : undefined;
      const page = await listUsersPage(ctx.db, { offset, limit, search });
      return { data: page.rows.map(toApiUser), pagination: { offset, limit, total: page.total } };
    },

    async getUser(request) {
      requireAdmin(request.user.role);
      return ctx.auth.administration.getUser(request.params.userId);
    },

    async updateUser(request) {
      requireAdmin(request.user.role);
      return ctx.auth.administration.updateUser({ userId: request.user.sub }, request.params.userId, request.body);
    },

    async deleteUsers(request) {
      requireAdmin(request.user.role);
      const deletedCount = await ctx.auth.administration.deleteUsers(
        { userId: request.user.sub },
        request.body.userIds,
      );
      return { message: `${deletedCount} user${deletedCount === 1 ? '' : 's'} deleted`, deletedCount };
    },
  } satisfies HandlersFor<UserOperations>;
}
