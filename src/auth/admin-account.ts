import * as oneTimeCodes from '../db/repositories/one-time-codes.ts';
import * as sessions from '../db/repositories/sessions.ts';
import * as users from '../db/repositories/users.ts';
import type { Executor } from '../db/schema.ts';
import type { AuthDeps } from './auth-context.ts';
import { hashPassword, verifyPassword } from './crypto.ts';
import type { SessionIssuer } from './session-issuer.ts';

/**
 * app_settings key: the hash of the ADMIN_PASSWORD last applied to the account (a password hash like
 * any other), so that a start with the same ADMIN_PASSWORD leaves a password the administrator set
 * since (by a change or a reset) alone, while a new ADMIN_PASSWORD still replaces it.
 */
const APPLIED_KEY = 'admin_password_applied';

async function appliedPasswordHash(db: Executor): Promise<string | undefined> {
  const row = await db.selectFrom('app_settings').select('value').where('key', '=', APPLIED_KEY).executeTakeFirst();
  return row?.value;
}

async function rememberApplied(db: Executor, hash: string): Promise<void> {
  await db
    .insertInto('app_settings')
    .values({ key: APPLIED_KEY, value: hash })
    .onConflict((oc) => oc.column('key').doUpdateSet({ value: hash, updated_at: new Date() }))
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
    const samePassword = existing?.password_hash ? await verifyPassword(password, existing.password_hash) : false;
    const applied = await appliedPasswordHash(db);
    const alreadyApplied = applied !== undefined && (await verifyPassword(password, applied));
    if (existing?.role === 'admin' && existing.email_verified) {
      if (samePassword) {
        if (!alreadyApplied && existing.password_hash) await rememberApplied(db, existing.password_hash);
        return;
      }
      if (alreadyApplied && existing.password_hash !== null) {
        log.info(
          { userId: existing.id },
          'ADMIN_PASSWORD is the one applied before, and the administrator has set another password since: theirs is kept (a new ADMIN_PASSWORD would replace it)',
        );
        return;
      }
    }
    const hash = samePassword && existing?.password_hash ? existing.password_hash : await hashPassword(password);
    const ended = await db.transaction().execute(async (trx) => {
      const id = await users.upsertAdmin(trx, email, hash);
      await rememberApplied(trx, hash);
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
