import type { AdminActor } from '../audit/audit-trail.ts';
import * as accounts from '../db/repositories/account-admin.ts';
import * as addressLimits from '../db/repositories/address-limits.ts';
import * as oneTimeCodes from '../db/repositories/one-time-codes.ts';
import { revokeUserSessions } from '../db/repositories/sessions.ts';
import * as users from '../db/repositories/users.ts';
import type { Role } from '../db/schema.ts';
import { ApiError } from '../errors.ts';
import type { AuthDeps } from './auth-context.ts';
import type { SessionIssuer } from './session-issuer.ts';
import { type ApiAdminUser, toAdminUser } from './user-view.ts';

/** The most accounts one delete call takes (the spec's DeleteUsersRequest.userIds maxItems). */
export const MAX_DELETE_IDS = 100;
/**
 * How long past the access-token lifetime the revocations of a deleted account's sessions are kept
 * (more than the clock skew the revocation set allows for between instances).
 */
const DELETED_SESSIONS_MARGIN_SECONDS = 3600;

const notFound = () => new ApiError('NOT_FOUND', 'No such user');
const notAnAdmin = () => new ApiError('FORBIDDEN', 'Only an enabled administrator may change or delete accounts');
const lastAdmin = () => new ApiError('LAST_ADMIN', 'This would leave no enabled administrator; nothing was changed');

/**
 * The administrators' operations on accounts. Every change that could remove an enabled
 * administrator (a demotion, disabling, deletion) first locks the rows of all enabled
 * administrators (accounts.lockEnabledAdmins), checks there that the caller is still one of them
 * and that one would remain, and only then changes anything, all in one transaction: concurrent
 * calls run one after the other, so two administrators removing each other at once leave one.
 * Whatever ends an account's sessions announces it to every instance once it has committed.
 */
export function createUserAdministration(deps: AuthDeps, issuer: SessionIssuer) {
  const { db, clock, config, log } = deps;

  /** One account as administrators see it. */
  async function getUser(userId: string): Promise<ApiAdminUser> {
    const row = await users.findUserById(db, userId);
    if (row === undefined) throw notFound();
    return toAdminUser(row);
  }

  /**
   * Sets the role and/or whether the account is disabled. A role change ends every session of the
   * account (their access tokens carry the old role), and so does disabling; enabling ends nothing.
   */
  async function updateUser(
    actor: AdminActor,
    userId: string,
    change: { role?: Role | undefined; disabled?: boolean | undefined },
  ): Promise<ApiAdminUser> {
    const now = clock.now();
    const result = await db.transaction().execute(async (trx) => {
      // The target's address first (disabling deletes its codes: addressLock), then the accounts.
      await addressLimits.lockAddresses(trx, await accounts.addressesOf(trx, [userId]));
      const admins = await accounts.lockEnabledAdmins(trx);
      if (!admins.includes(actor.userId)) throw notAnAdmin();
      const [target] = await accounts.lockAccounts(trx, [userId]);
      if (target === undefined) throw notFound();
      const newRole = change.role !== undefined && change.role !== target.role ? change.role : undefined;
      const disabling = change.disabled === true && target.disabled_at === null;
      const enabling = change.disabled === false && target.disabled_at !== null;
      if (admins.includes(target.id) && (newRole !== undefined || disabling) && admins.length === 1) throw lastAdmin();
      if (newRole === undefined && !disabling && !enabling) {
        return { row: await users.findUserById(trx, target.id), revoked: [] as string[] };
      }
      const row = await accounts.updateAccount(
        trx,
        target.id,
        { role: newRole, disabled: disabling ? true : enabling ? false : undefined },
        now,
      );
      if (disabling && row !== undefined) {
        // Codes and links sent before must not work again once the account is enabled again.
        await oneTimeCodes.deleteAccountCodes(trx, row);
      }
      const revoked = newRole !== undefined || disabling ? await revokeUserSessions(trx, target.id, now) : [];
      const event = { userId: target.id, actorId: actor.userId, sessionId: actor.sessionId, client: actor.client };
      await deps.audit.recordSessionsEnded(trx, {
        userId: target.id,
        sessionIds: revoked,
        by: 'administrator',
        actorId: actor.userId,
        client: actor.client,
      });
      if (newRole !== undefined) {
        await deps.audit.record(trx, {
          ...event,
          type: 'user_role_changed',
          details: { from: target.role, to: newRole, sessionsEnded: revoked.length },
        });
      }
      if (disabling) {
        const details = { sessionsEnded: newRole === undefined ? revoked.length : 0 };
        await deps.audit.record(trx, { ...event, type: 'user_disabled', details });
      }
      if (enabling) await deps.audit.record(trx, { ...event, type: 'user_enabled' });
      return { row, revoked };
    });
    issuer.revoked(result.revoked);
    if (result.row === undefined) throw notFound();
    log.info(
      {
        actor: actor.userId,
        userId: result.row.id,
        role: result.row.role,
        disabled: result.row.disabled_at !== null,
        revokedSessions: result.revoked.length,
      },
      'administrator updated an account',
    );
    return toAdminUser(result.row);
  }

  /**
   * Deletes the accounts among `userIds` (an id given twice counts once, an unknown one not at all),
   * ending their sessions everywhere; returns how many were deleted.
   */
  async function deleteUsers(actor: AdminActor, userIds: readonly string[]): Promise<number> {
    const ids = [...new Set(userIds.map((id) => id.toLowerCase()))];
    if (ids.length > MAX_DELETE_IDS) {
      throw new ApiError('INVALID_INPUT', `body.userIds must have at most ${MAX_DELETE_IDS} items`);
    }
    const now = clock.now();
    const keepSince = new Date(now.getTime() - (config.accessTokenTtlSeconds + DELETED_SESSIONS_MARGIN_SECONDS) * 1000);
    const { deleted, revoked } = await db.transaction().execute(async (trx) => {
      // The targets' addresses first (their codes go with them: addressLock), then the accounts.
      await addressLimits.lockAddresses(trx, await accounts.addressesOf(trx, ids));
      const admins = await accounts.lockEnabledAdmins(trx);
      if (!admins.includes(actor.userId)) throw notAnAdmin();
      // Locked before their sessions are revoked: a sign-in or verification of one of them waits,
      // then finds no account (rather than adding a session the revocation missed).
      const targets = await accounts.lockAccounts(trx, ids);
      if (admins.every((id) => ids.includes(id))) throw lastAdmin();
      for (const target of targets) {
        await deps.audit.record(trx, {
          type: 'user_deleted',
          userId: target.id,
          actorId: actor.userId,
          sessionId: actor.sessionId,
          client: actor.client,
          email: target.email,
        });
      }
      return accounts.deleteAccounts(
        trx,
        targets.map((t) => t.id),
        now,
        keepSince,
      );
    });
    issuer.revoked(revoked);
    if (deleted > 0) {
      log.info({ actor: actor.userId, deleted, revokedSessions: revoked.length }, 'administrator deleted accounts');
    }
    return deleted;
  }

  return { getUser, updateUser, deleteUsers };
}

export type UserAdministration = ReturnType<typeof createUserAdministration>;
