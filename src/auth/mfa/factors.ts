// An account's second factors (TOTP; passkeys, registered in passkeys.ts, are listed and removed here too): enrollment, the list, removal (by their owner or an administrator)
// and the recovery codes. Proving a factor is second-step.ts.
import { randomUUID } from 'node:crypto';
import type { AdminActor, EventClient } from '../../audit/audit-trail.ts';
import { lockUserById } from '../../db/repositories/mailbox-accounts.ts';
import * as mfa from '../../db/repositories/mfa.ts';
import * as passkeys from '../../db/repositories/passkeys.ts';
import * as sessions from '../../db/repositories/sessions.ts';
import type { AuthMethod, Executor } from '../../db/schema.ts';
import { ApiError } from '../../errors.ts';
import { secondFactorNotice } from '../../mail/templates.ts';
import { type AuthDeps, sessionEnded } from '../auth-context.ts';
import type { BackgroundMail } from '../background-mail.ts';
import { seal } from '../crypto.ts';
import type { OneTimeCodes } from '../one-time-codes.ts';
import type { SessionIssuer } from '../session-issuer.ts';
import { newTotpSecret, qrCodeDataUri, totpUri } from './totp.ts';

/** The most factors (verified, and enrollments under way) an account may have. */
export const MAX_FACTORS = 10;
/** How old a session's last proof (sign-in or second factor) may be for it to change the factors. */
export const RECENT_PROOF_SECONDS = 10 * 60;

/** The caller of an operation that changes the second factors: its account and its session's proofs. */
export interface FactorCaller {
  userId: string;
  email: string;
  /** The session's proofs (the token's `amr`). */
  amr: readonly AuthMethod[] | undefined;
  /** The session (the token's `sid`): it must still be live once the account is locked. */
  sessionId: string;
  /** Where the request came from (the audit log). */
  client?: EventClient | undefined;
}

/** A factor as the contract shows it. */
export function toApiFactor(row: mfa.FactorRow) {
  return {
    id: row.id,
    type: row.type,
    friendlyName: row.friendly_name,
    status: row.status,
    createdAt: row.created_at.toISOString(),
    lastUsedAt: row.last_used_at?.toISOString() ?? null,
  };
}

const factorNotFound = () => new ApiError('NOT_FOUND', 'No such factor');
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The secret of a factor, sealed for storage (bound to the factor's id). */
export const sealFactorSecret = (deps: AuthDeps, factorId: string, secret: string) =>
  seal(deps.keys.mfa, secret, `mfa-factor:${factorId}`);

export function createFactors(deps: AuthDeps, issuer: SessionIssuer, codes: OneTimeCodes, mail: BackgroundMail) {
  const { db, clock, config } = deps;

  /**
   * Changing the factors needs a recent proof: an access token that leaked (or outlived its sign-in
   * by refreshes) cannot add a factor that would lock the owner out, nor remove one.
   */
  function requireRecentProof(caller: FactorCaller): void {
    const last = Math.max(0, ...(caller.amr ?? []).map((m) => m.timestamp));
    if (clock.now().getTime() / 1000 - last > RECENT_PROOF_SECONDS) {
      throw new ApiError(
        'REAUTHENTICATION_REQUIRED',
        `Changing second factors needs a sign-in or a second factor in the last ${RECENT_PROOF_SECONDS / 60} minutes; sign in again`,
      );
    }
  }

  /**
   * Under the account's lock, the caller's session must still be live: a request that waited for
   * the lock while the account's first factor was verified (which ends the sessions below aal2)
   * must not change the factors afterwards. The revocation list was checked before it waited.
   */
  async function requireLiveSession(trx: Executor, caller: FactorCaller): Promise<void> {
    const session = await sessions.findSessionForShare(trx, caller.sessionId);
    if (session === undefined || session.revoked_at !== null || session.user_id !== caller.userId) {
      throw sessionEnded();
    }
  }

  /** The account's TOTP factors and passkeys, oldest first. */
  async function list(userId: string) {
    const [totp, keys] = await Promise.all([
      mfa.listFactors(db, userId, clock.now()),
      passkeys.listPasskeys(db, userId),
    ]);
    return [
      ...totp.map(toApiFactor),
      ...keys.map((row) => ({
        id: row.id,
        type: 'passkey' as const,
        friendlyName: row.friendly_name,
        status: 'verified' as const,
        createdAt: row.created_at.toISOString(),
        lastUsedAt: row.last_used_at?.toISOString() ?? null,
      })),
    ].sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id));
  }

  /** Starts a TOTP enrollment: the factor is unverified until its first code (second-step.ts). */
  async function enroll(account: FactorCaller, friendlyName: string | null) {
    requireRecentProof(account);
    const id = randomUUID();
    const secret = newTotpSecret();
    const now = clock.now();
    const row = await db.transaction().execute(async (trx) => {
      if ((await mfa.lockAccountMfa(trx, account.userId)) === undefined) throw sessionEnded();
      await requireLiveSession(trx, account);
      const inserted = await mfa.insertFactor(
        trx,
        { id, userId: account.userId, friendlyName, secretSealed: sealFactorSecret(deps, id, secret), now },
        MAX_FACTORS,
      );
      if (inserted !== undefined) await recordFactorEvent(trx, 'factor_enrolled', account, 'totp', id);
      return inserted;
    });
    if (row === undefined) throw new ApiError('FACTOR_STATE', `An account has at most ${MAX_FACTORS} factors`);
    const uri = totpUri(secret, config.mfa.issuer, account.email);
    return {
      ...toApiFactor(row),
      status: 'unverified' as const,
      lastUsedAt: null,
      totp: { secret, uri, qrCode: await qrCodeDataUri(uri) },
    };
  }

  /**
   * Removes one of the caller's factors. When the last verified one goes, the account no longer
   * has a second factor: its recovery codes go too, and its sessions that owe a second step end.
   */
  async function remove(account: FactorCaller, factorId: string, kind?: mfa.FactorKind) {
    const notFound = () => (kind === 'passkey' ? new ApiError('NOT_FOUND', 'No such passkey') : factorNotFound());
    // An id that is not a UUID is answered as an unknown one.
    if (!UUID.test(factorId)) throw notFound();
    requireRecentProof(account);
    const now = clock.now();
    const { ended, notify } = await db.transaction().execute(async (trx) => {
      const locked = await mfa.lockAccountMfa(trx, account.userId);
      if (locked === undefined) throw notFound();
      await requireLiveSession(trx, account);
      const deleted = await mfa.deleteFactor(trx, account.userId, factorId, kind);
      if (deleted === undefined) throw notFound();
      const type = deleted.kind === 'passkey' ? 'passkey_removed' : 'factor_removed';
      await recordFactorEvent(trx, type, account, deleted.kind, factorId);
      const notify = deleted.wasVerified ? locked.email : undefined;
      if (!deleted.wasVerified || (await mfa.refreshMfaEnabled(trx, account.userId))) return { ended: [], notify };
      await codes.removeRecoveryCodes(trx, { id: locked.id, email: locked.email }, now);
      const ended = await sessions.revokeUserSessionsBelowAal2(trx, account.userId, now);
      await deps.audit.recordSessionsEnded(trx, {
        userId: account.userId,
        sessionIds: ended,
        by: 'second_factor',
        client: account.client,
      });
      return { ended, notify };
    });
    issuer.revoked(ended);
    if (notify !== undefined) mail.send(secondFactorNotice(notify, 'removed'), undefined);
  }

  /** New recovery codes, voiding the earlier ones; the account needs a verified factor. */
  async function regenerateRecoveryCodes(caller: FactorCaller) {
    requireRecentProof(caller);
    const { userId } = caller;
    const now = clock.now();
    return db.transaction().execute(async (trx) => {
      const locked = await mfa.lockAccountMfa(trx, userId);
      if (locked !== undefined) await requireLiveSession(trx, caller);
      if (locked?.mfa_enabled !== true) {
        throw new ApiError('FACTOR_STATE', 'Recovery codes need a verified factor; enroll one first');
      }
      const issued = await codes.issueRecoveryCodes(trx, { id: locked.id, email: locked.email }, now);
      await recordFactorEvent(trx, 'recovery_codes_regenerated', caller, 'recovery_code', undefined);
      return issued;
    });
  }

  /** A change to the caller's factors, in the audit log (with the change's transaction). */
  function recordFactorEvent(
    trx: Executor,
    type: 'factor_enrolled' | 'factor_removed' | 'passkey_removed' | 'recovery_codes_regenerated',
    caller: FactorCaller,
    method: string,
    factorId: string | undefined,
  ): Promise<void> {
    return deps.audit.record(trx, {
      type,
      method,
      userId: caller.userId,
      sessionId: caller.sessionId,
      client: caller.client,
      ...(factorId === undefined ? {} : { details: { factorId } }),
    });
  }

  /** An administrator removes every factor and recovery code of an account, and ends its sessions. */
  async function removeAllOf(userId: string, actor: AdminActor): Promise<boolean> {
    const now = clock.now();
    const result = await db.transaction().execute(async (trx) => {
      const locked = await lockUserById(trx, userId);
      if (locked === undefined) return undefined;
      await mfa.removeSecondFactors(trx, userId);
      const ended = await sessions.revokeUserSessions(trx, userId, now);
      await deps.audit.recordSessionsEnded(trx, {
        userId,
        sessionIds: ended,
        by: 'administrator',
        actorId: actor.userId,
        client: actor.client,
      });
      await deps.audit.record(trx, {
        type: 'user_factors_reset',
        userId,
        actorId: actor.userId,
        sessionId: actor.sessionId,
        client: actor.client,
        details: { sessionsEnded: ended.length },
      });
      return { ended, email: locked.email };
    });
    if (result === undefined) return false;
    issuer.revoked(result.ended);
    mail.send(secondFactorNotice(result.email, 'removed by an administrator'), undefined);
    return true;
  }

  return { list, enroll, remove, regenerateRecoveryCodes, removeAllOf, requireRecentProof };
}

export type Factors = ReturnType<typeof createFactors>;
