import { toAdminUser } from '../auth/user-view.ts';
import type { AppContext } from '../context.ts';
import { listUsersPage } from '../db/repositories/user-directory.ts';
import { ApiError } from '../errors.ts';
import { adminActor } from './auth.ts';
import type { HandlersFor } from './types.ts';

/** offset and limit arrive as strings of digits within their bounds (the schema's patterns). */
const pageNumber = (raw: string | undefined, fallback: number): number => (raw === undefined ? fallback : Number(raw));

type UserOperations = 'listUsers' | 'getUser' | 'updateUser' | 'deleteUsers' | 'deleteUserFactors';

/** Handlers of the `users` tag (administrators only: x-roles in openapi.yaml). */
export function userHandlers(ctx: AppContext): HandlersFor<UserOperations> {
  return {
    async listUsers(request) {
      const offset = pageNumber(request.query.offset, 0);
      const limit = pageNumber(request.query.limit, 10);
      const raw = request.query.search;
      const search = raw !== undefined && raw.trim() !== '' ? raw : undefined;
      const page = await ctx.read((db) => listUsersPage(db, { offset, limit, search }));
      return { data: page.rows.map(toAdminUser), pagination: { offset, limit, total: page.total } };
    },

    async getUser(request) {
      return ctx.auth.administration.getUser(request.params.userId);
    },

    async updateUser(request) {
      return ctx.auth.administration.updateUser(adminActor(request), request.params.userId, request.body);
    },

    async deleteUsers(request) {
      const deletedCount = await ctx.auth.administration.deleteUsers(adminActor(request), request.body.userIds);
      return { message: `${deletedCount} user${deletedCount === 1 ? '' : 's'} deleted`, deletedCount };
    },

    async deleteUserFactors(request, reply) {
      if (!(await ctx.auth.factors.removeAllOf(request.params.userId, adminActor(request)))) {
        throw new ApiError('NOT_FOUND', 'No such user');
      }
      request.log.info(
        { adminId: request.user.sub, userId: request.params.userId },
        'mfa: factors removed by an administrator',
      );
      reply.code(204);
      return undefined;
    },
  } satisfies HandlersFor<UserOperations>;
}
