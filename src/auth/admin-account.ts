import * as addressLimits from '../db/repositories/address-limits.ts';
import * as oneTimeCodes from '../db/repositories/one-time-codes.ts';
import * as sessions from '../db/repositories/sessions.ts';
import * as users from '../db/repositories/users.ts';
import type { Executor } from '../db/schema.ts';
import type { AuthDeps } from './auth-context.ts';
import { hashPassword, verifyPassword } from './crypto.ts';
import type { SessionIssuer } from './session-issuer.ts';

/**
 * app_settings key: which ADMIN_PASSWORD was last applied, to which account: its hash (a password
 * hash like any other), the account's id and address. A start with that same ADMIN_PASSWORD and
 * ADMIN_EMAIL leaves alone a password the administrator set since (by a change or a reset), and
 * never makes anyone the administrator again: if the account was demoted, deleted or replaced (say
 * after the environment file leaked), a restart must not hand the role back to whoever knows the old
 * password. Only a new ADMIN_PASSWORD (or ADMIN_EMAIL) is applied.
 */
const APPLIED_KEY = 'admin_password_applied';

interface Applied {
  userId: string;
  email: string;
  hash: string;
}

async function lastApplied(db: Executor): Promise<Applied | undefined> {
  const row = await db.selectFrom('app_settings').select('value').where('key', '=', APPLIED_KEY).executeTakeFirst();
  if (row === undefined) return undefined;
  try {
    const value = JSON.parse(row.value) as Partial<Applied>;
    return typeof value.userId === 'string' && typeof value.email === 'string' && typeof value.hash === 'string'
      ? { userId: value.userId, email: value.email, hash: value.hash }
      : undefined;
  } catch {
    return undefined;
  }
}

async function rememberApplied(db: Executor, applied: Applied): Promise<void> {
  const value = JSON.stringify(applied);
  await db
    .insertInto('app_settings')
    .values({ key: APPLIED_KEY, value })
    .onConflict((oc) => oc.column('key').doUpdateSet({ value, updated_at: new Date() }))
    .execute();
}

/** The administrator named by ADMIN_EMAIL and ADMIN_PASSWORD, kept in place at every start. */
export function createAdminAccount(deps: AuthDeps, issuer: SessionIssuer) {
  const { db, config, clock, log } = deps;

  /**
   * Creates the administrator, or makes the account with that address the administrator. Whenever
   * the account becomes the administrator or its password changes, every session it had ends and
   * its pending verifications are deleted: whoever held them (a squatter who signed up with the
   * address first, say) must not carry them over into administrator rights.
   */
  return async function ensureAdmin(): Promise<void> {
    if (!config.admin) return;
    const { email, password } = config.admin;
    const existing = await users.findUserByEmail(db, email);
    const applied = await lastApplied(db);
    const unchanged = applied?.email === email && (await verifyPassword(password, applied.hash));
    // Each verification is a scrypt: the usual start (the account's hash is the one applied) needs one.
    const samePassword = !existing?.password_hash
      ? false
      : applied?.email === email && existing.password_hash === applied.hash
        ? unchanged
        : await verifyPassword(password, existing.password_hash);
    const stillTheAdministrator =
      existing !== undefined && existing.role === 'admin' && existing.email_verified && existing.id === applied?.userId;
    if (unchanged) {
      if (!stillTheAdministrator) {
        log.warn(
          { userId: applied?.userId },
          `ADMIN_PASSWORD and ADMIN_EMAIL were applied before to ${email}, which is no longer that administrator (demoted, deleted or replaced since): nothing was done. Set a new ADMIN_PASSWORD to make it the administrator again`,
        );
      } else if (!samePassword) {
        log.info(
          { userId: existing.id },
          'ADMIN_PASSWORD is the one applied before, and the administrator has set another password since: theirs is kept (a new ADMIN_PASSWORD would replace it)',
        );
      }
      return;
    }
    if (existing?.role === 'admin' && existing.email_verified && samePassword && existing.password_hash) {
      await rememberApplied(db, { userId: existing.id, email, hash: existing.password_hash });
      return;
    }
    const hash = samePassword && existing?.password_hash ? existing.password_hash : await hashPassword(password);
    const ended = await db.transaction().execute(async (trx) => {
      // The address first: its codes are deleted (addressLock).
      await addressLimits.lockAddresses(trx, [email]);
      const id = await users.upsertAdmin(trx, email, hash);
      await rememberApplied(trx, { userId: id, email, hash });
      await oneTimeCodes.deleteAccountCodes(trx, { id, email }, ['verification']);
      const revoked = await sessions.revokeUserSessions(trx, id, clock.now());
      // Changes the service made by itself at start: no actor.
      const event = { userId: id, actorId: null, email };
      if (existing === undefined)
        await deps.audit.record(trx, { ...event, type: 'user_created', method: 'admin_email' });
      else if (existing.role !== 'admin') {
        await deps.audit.record(trx, {
          ...event,
          type: 'user_role_changed',
          method: 'admin_email',
          details: { from: existing.role, to: 'admin' },
        });
      } else if (!samePassword) {
        await deps.audit.record(trx, { ...event, type: 'password_changed', method: 'admin_password' });
      }
      await deps.audit.recordSessionsEnded(trx, {
        ...event,
        sessionIds: revoked,
        by: existing?.role === 'admin' ? 'password_change' : 'promotion',
      });
      return revoked;
    });
    issuer.revoked(ended);
    if (existing && existing.role !== 'admin') {
      log.warn(
        { userId: existing.id, revokedSessions: ended.length, pendingVerificationsDeleted: true },
        'ADMIN_EMAIL names an account that was not created as the administrator: it was promoted, its sessions were revoked and its pending verifications deleted',
      );
    } else if (ended.length > 0) {
      log.info(
        { userId: existing?.id, revokedSessions: ended.length },
        'administrator password changed: sessions revoked',
      );
    }
  };
}
