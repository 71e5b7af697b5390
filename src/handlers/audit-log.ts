import {
  type ApiAuditEvent,
  type ApiAuditEventList,
  decodeCursor,
  encodeCursor,
  parseInstant,
  parseTypeList,
  toAuditEvent,
} from '../audit/audit-view.ts';
import { type AuditEventType, OWN_HISTORY_TYPES } from '../audit/event-types.ts';
import type { AppContext } from '../context.ts';
import { listAuditRows } from '../db/repositories/audit-log.ts';
import { ApiError } from '../errors.ts';
import { plainUuid } from '../uuid.ts';
import type { HandlersFor } from './types.ts';

type AuditOperations = 'listAuditEvents' | 'listOwnAuditEvents';

/** The query both operations share (the contract's patterns and formats already checked). */
interface PageQuery {
  since?: string | undefined;
  until?: string | undefined;
  cursor?: string | undefined;
  limit?: string | undefined;
}

const DEFAULT_LIMIT = 50;

function instant(name: 'since' | 'until', value: string | undefined): Date | undefined {
  if (value === undefined) return undefined;
  const parsed = parseInstant(value);
  if (parsed === undefined) throw new ApiError('INVALID_INPUT', `query.${name} must match format "date-time"`);
  return parsed;
}

/** One page, newest first: a row more than the limit is read to tell whether a next page exists. */
async function page(
  ctx: AppContext,
  query: PageQuery,
  filter: { userId: string | undefined; types: readonly AuditEventType[] | undefined },
  show: (event: ApiAuditEvent) => ApiAuditEvent = (event) => event,
): Promise<ApiAuditEventList> {
  const before = query.cursor === undefined ? undefined : decodeCursor(query.cursor);
  if (query.cursor !== undefined && before === undefined) {
    throw new ApiError('INVALID_INPUT', 'query.cursor is not a cursor this service gave out');
  }
  const limit = query.limit === undefined ? DEFAULT_LIMIT : Number(query.limit);
  const since = instant('since', query.since);
  const until = instant('until', query.until);
  const rows = await ctx.read((db) =>
    listAuditRows(db, { userId: filter.userId, types: filter.types, since, until, before, limit: limit + 1 }),
  );
  const shown = rows.slice(0, limit);
  const last = shown.at(-1);
  return {
    events: shown.map((entry) => show(toAuditEvent(entry))),
    nextCursor: rows.length > limit && last !== undefined ? encodeCursor(last.id) : null,
  };
}

/**
 * An entry of one's own history: when someone else acted (an administrator who ended a session),
 * who it was and where they were stay out (their id, address and user agent are theirs).
 */
function ownView(event: ApiAuditEvent, callerId: string): ApiAuditEvent {
  if (event.actorId === null || event.actorId === callerId) return event;
  return { ...event, actorId: null, ip: null, userAgent: null };
}

/** Handlers of the `audit` tag: the whole log (administrators: x-roles in openapi.yaml) and one's own history. */
export function auditLogHandlers(ctx: AppContext): HandlersFor<AuditOperations> {
  return {
    async listAuditEvents(request) {
      const { userId, type } = request.query;
      return page(ctx, request.query, {
        userId: userId === undefined ? undefined : plainUuid(userId),
        types: type === undefined ? undefined : parseTypeList(type),
      });
    },

    async listOwnAuditEvents(request) {
      // Only the caller's own sign-ins and session ends (OWN_HISTORY_TYPES); `type` narrows them
      // (its pattern admits no other type).
      const { type } = request.query;
      const types = type === undefined ? OWN_HISTORY_TYPES : parseTypeList(type);
      if (types.some((t) => !OWN_HISTORY_TYPES.includes(t))) {
        throw new ApiError('INVALID_INPUT', `query.type must name only ${OWN_HISTORY_TYPES.join(', ')}`);
      }
      return page(ctx, request.query, { userId: request.user.sub, types }, (event) => ownView(event, request.user.sub));
    },
  } satisfies HandlersFor<AuditOperations>;
}
