// The sessions people can see and end: their own ("where am I signed in", "sign out that device",
// "sign out everywhere") and, for administrators, any account's.
import type { AdminActor, EventClient } from '../audit/audit-trail.ts';
import { lockUserById } from '../db/repositories/mailbox-accounts.ts';
import * as sessions from '../db/repositories/sessions.ts';
import * as users from '../db/repositories/users.ts';
import { ApiError } from '../errors.ts';
import { type AuthDeps, sessionEnded } from './auth-context.ts';
import type { SessionIssuer } from './session-issuer.ts';

/** The caller of an operation on their own sessions: the access token's account and session. */
export interface SessionOwner {
  userId: string;
  sessionId: string;
  client: EventClient;
}

/** A live session as the contract shows it. */
function toApiSession(row: sessions.LiveSession, currentSessionId: string) {
  return {
    id: row.id,
    clientType: row.client_type,
    createdAt: row.created_at.toISOString(),
    lastRefreshedAt: row.last_used_at.toISOString(),
    expiresAt: row.expires_at.toISOString(),
    ip: row.ip,
    userAgent: row.user_agent,
    aal: row.aal,
    current: row.id === currentSessionId,
  };
}

const sessionNotFound = () => new ApiError('NOT_FOUND', 'No such session');
const userNotFound = () => new ApiError('NOT_FOUND', 'No such user');
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function createOwnSessions(deps: AuthDeps, issuer: SessionIssuer) {
  const { db, clock } = deps;

  async function list(owner: Pick<SessionOwner, 'userId' | 'sessionId'>) {
    const rows = await sessions.listLiveSessions(db, owner.userId, clock.now());
    return rows.map((row) => toApiSession(row, owner.sessionId));
  }

  /** Ends one of the caller's live sessions; any other id is NOT_FOUND. */
  async function end(owner: SessionOwner, sessionId: string): Promise<void> {
    if (!UUID.test(sessionId)) throw sessionNotFound();
    const ending = { type: 'session_ended' as const, by: 'self' as const, client: owner.client };
    if (!(await issuer.endSession(owner.userId, sessionId, ending))) throw sessionNotFound();
  }

  /**
   * Ends every session of `userId` (but `except`), under the account's lock, each recorded in the
   * audit log; with `forgetDevices`, the account's known devices stop counting (device_epoch).
   * Undefined when there is no such account.
   */
  async function endAllOf(
    userId: string,
    opts: {
      except?: string | undefined;
      forgetDevices: boolean;
      by: 'self' | 'administrator';
      actor: { userId: string; sessionId: string; client: EventClient };
      requireLive?: string | undefined;
    },
  ): Promise<string[] | undefined> {
    const now = clock.now();
    const ended = await db.transaction().execute(async (trx) => {
      if ((await lockUserById(trx, userId)) === undefined) return undefined;
      // The caller's session must still be live once the account is locked: a session ended
      // meanwhile (by another device's "sign out everywhere") cannot end the others.
      if (opts.requireLive !== undefined && !(await sessions.lockLiveSession(trx, opts.requireLive))) {
        throw sessionEnded();
      }
      if (opts.forgetDevices) await users.forgetKnownDevices(trx, userId);
      const ids = await sessions.revokeUserSessions(trx, userId, now, opts.except);
      await deps.audit.recordSessionsEnded(trx, {
        userId,
        sessionIds: ids,
        by: opts.by,
        actorId: opts.actor.userId,
        client: opts.actor.client,
      });
      return ids;
    });
    if (ended !== undefined) issuer.revoked(ended);
    return ended;
  }

  /** `others`: every session of the caller but the current; `all`: every one, and the known devices are forgotten. */
  async function endMine(owner: SessionOwner, scope: 'others' | 'all'): Promise<void> {
    const ended = await endAllOf(owner.userId, {
      except: scope === 'others' ? owner.sessionId : undefined,
      forgetDevices: scope === 'all',
      by: 'self',
      actor: owner,
      requireLive: owner.sessionId,
    });
    if (ended === undefined) throw sessionEnded();
  }

  /** An account's live sessions, for an administrator (`viewer` marks the administrator's own). */
  async function listOf(userId: string, viewer: AdminActor) {
    if ((await users.findUserById(db, userId)) === undefined) throw userNotFound();
    const rows = await sessions.listLiveSessions(db, userId, clock.now());
    return rows.map((row) => toApiSession(row, viewer.sessionId));
  }

  /** An administrator signs an account out everywhere and forgets its known devices. */
  async function endEverywhere(userId: string, actor: AdminActor): Promise<void> {
    const ended = await endAllOf(userId, { forgetDevices: true, by: 'administrator', actor });
    if (ended === undefined) throw userNotFound();
  }

  return { list, end, endMine, listOf, endEverywhere };
}

export type OwnSessions = ReturnType<typeof createOwnSessions>;
