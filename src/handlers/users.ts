import { toApiUser } from '../auth/user-view.ts';
import type { AppContext } from '../context.ts';
import { listUsersPage } from '../db/repositories/user-directory.ts';
import { ApiError } from '../errors.ts';
import type { HandlersFor } from './types.ts';

export const MAX_PAGE_SIZE = 1000;

/** offset and limit arrive as strings of digits (the schema checks the form); bound them here. */
function pageNumber(name: 'offset' | 'limit', raw: string | undefined, fallback: number, max: number): number {
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!Number.isSafeInteger(value) || value > max) {
    throw new ApiError(400, 'INVALID_INPUT', `query.${name} must be an integer from 0 to ${max}`);
  }
  return value;
}

/** Handlers of the `users` tag. */
export function userHandlers(ctx: AppContext): HandlersFor<'listUsers'> {
  return {
    async listUsers(request) {
      if (request.user.role !== 'admin') {
        throw new ApiError(403, 'FORBIDDEN', 'Only administrators may list users');
      }
      const offset = pageNumber('offset', request.query.offset, 0, Number.MAX_SAFE_INTEGER);
      const limit = pageNumber('limit', request.query.limit, 10, MAX_PAGE_SIZE);
      const raw = request.query.search;
      const search = raw !== undefined && raw.trim() !== '' ? raw : undefined;
      const page = await listUsersPage(ctx.db, { offset, limit, search });
      return { data: page.rows.map(toApiUser), pagination: { offset, limit, total: page.total } };
    },
  } satisfies HandlersFor<'listUsers'>;
}
