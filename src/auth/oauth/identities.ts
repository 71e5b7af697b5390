// The provider identities of a signed-in account: the list, linking one from a session (the
// callback of a link started with POST /api/auth/identities), and unlinking one. Linking by
// address, as a sign-in does it, is identity-accounts.ts.
import type { EventClient } from '../../audit/audit-trail.ts';
import { lockUserById } from '../../db/repositories/mailbox-accounts.ts';
import * as oauth from '../../db/repositories/oauth.ts';
import * as sessions from '../../db/repositories/sessions.ts';
import type { AuthMethod } from '../../db/schema.ts';
import { ApiError } from '../../errors.ts';
import { type AuthDeps, sessionEnded } from '../auth-context.ts';
import { RECENT_PROOF_SECONDS } from '../mfa/factors.ts';
import { recordLinked } from './identity-accounts.ts';
import type { ProviderIdentity } from './provider-clients.ts';

/** The caller of an operation on its identities: its account, its session and the session's proofs. */
export interface IdentityCaller {
  userId: string;
  /** The session (the token's `sid`): it must still be live once the account is locked. */
  sessionId: string;
  /** The session's proofs (the token's `amr`). */
  amr: readonly AuthMethod[] | undefined;
}

/** An identity as the contract shows it. */
export function toApiIdentity(row: oauth.IdentityRow) {
  return {
    id: row.id,
    provider: row.provider,
    subject: row.provider_account_id,
    email: row.email,
    linkedAt: row.created_at.toISOString(),
  };
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const identityNotFound = () => new ApiError('NOT_FOUND', 'No such identity');
export const identityTaken = (provider: string) =>
  new ApiError(
    'IDENTITY_ALREADY_LINKED',
    `This ${provider} identity is linked to another account, or this account has another ${provider} identity`,
  );

export function createIdentities(deps: AuthDeps) {
  const { db, clock, config, audit } = deps;

  /**
   * Linking and unlinking need a recent proof, as changing the second factors does: an access
   * token that leaked (or outlived its sign-in by refreshes) cannot add a way into the account
   * that would outlast it, nor take one away.
   */
  function requireRecentProof(caller: IdentityCaller): void {
    const last = Math.max(0, ...(caller.amr ?? []).map((m) => m.timestamp));
    if (clock.now().getTime() / 1000 - last > RECENT_PROOF_SECONDS) {
      throw new ApiError(
        'REAUTHENTICATION_REQUIRED',
        `Linking or unlinking an identity needs a sign-in or a second factor in the last ${RECENT_PROOF_SECONDS / 60} minutes; sign in again`,
      );
    }
  }

  /** The account's identities, oldest first. */
  async function list(userId: string) {
    return (await oauth.listIdentities(db, userId)).map(toApiIdentity);
  }

  /**
   * Links the identity a provider returned to the account a link was started for, from the
   * session that started it. Linking from a session proves that one person holds both, so the
   * provider's address is not compared with the account's (it is kept only when the provider
   * vouched for it). Under the account's lock: the session must still be live (not ended, not
   * expired, the account's) and at the account's assurance level, the account enabled; an identity
   * linked to another account is not moved, and an account has one identity per provider.
   */
  async function linkFromSession(
    link: { userId: string; sessionId: string },
    provider: string,
    identity: ProviderIdentity,
    client: EventClient | undefined,
  ): Promise<void> {
    const now = clock.now();
    await db.transaction().execute(async (trx) => {
      const account = await lockUserById(trx, link.userId);
      if (account === undefined) throw sessionEnded();
      const session = await sessions.findSessionForShare(trx, link.sessionId);
      if (
        session === undefined ||
        session.revoked_at !== null ||
        session.expires_at <= now ||
        session.user_id !== account.id
      ) {
        throw sessionEnded();
      }
      if (account.disabled_at !== null) throw new ApiError('ACCOUNT_DISABLED', 'This account is disabled');
      // The account may have gained a second factor since the link started.
      if (account.mfa_enabled && session.aal !== 'aal2') {
        throw new ApiError('MFA_REQUIRED', 'This account has a second factor: prove it before linking an identity');
      }
      const owner = await oauth.findIdentityOwner(trx, provider, identity.subject);
      if (owner?.user_id === account.id) return; // linked already: nothing changes
      if (owner !== undefined) throw identityTaken(provider);
      const identityId = await oauth.linkIdentity(trx, {
        userId: account.id,
        provider,
        subject: identity.subject,
        email: identity.emailVerified ? (identity.email ?? null) : null,
      });
      // The account has another identity of this provider, or a concurrent link took this one.
      if (identityId === undefined) throw identityTaken(provider);
      await oauth.forgetUnlinked(trx, account.id, provider, identity.subject);
      await recordLinked(deps, trx, { user: account, provider, identityId, sessionId: session.id, client });
    });
  }

  /**
   * Unlinks one of the caller's identities, unless it is the account's last way to sign in: a
   * password, another identity of a configured provider, or a passkey count; the mailbox alone
   * (emailed codes) does not. The check and the deletion run under the account's row lock, so two
   * unlinks at once cannot both pass it. The provider does not link the identity to the account by
   * address again (identity-accounts.ts). The account's sessions stay open.
   */
  async function unlink(caller: IdentityCaller, identityId: string, client: EventClient | undefined): Promise<void> {
    // An id that is not a UUID is answered as an unknown one.
    if (!UUID.test(identityId)) throw identityNotFound();
    requireRecentProof(caller);
    const configured = config.oauthProviders.map((p) => p.name);
    await db.transaction().execute(async (trx) => {
      const account = await lockUserById(trx, caller.userId);
      if (account === undefined) throw sessionEnded();
      const session = await sessions.findSessionForShare(trx, caller.sessionId);
      if (session === undefined || session.revoked_at !== null || session.user_id !== account.id) throw sessionEnded();
      const identity = await oauth.findIdentityOf(trx, account.id, identityId);
      if (identity === undefined) throw identityNotFound();
      const others = await oauth.otherSignInMethods(trx, account.id, identityId, configured);
      if (account.password_hash === null && others.identities === 0 && others.passkeys === 0) {
        throw new ApiError(
          'LAST_SIGN_IN_METHOD',
          "This identity is the account's last way to sign in; set a password, add a passkey or link another identity first",
        );
      }
      await oauth.deleteIdentity(trx, account.id, identityId);
      await oauth.rememberUnlinked(trx, {
        userId: account.id,
        provider: identity.provider,
        subject: identity.provider_account_id,
        now: clock.now(),
      });
      await audit.record(trx, {
        type: 'identity_unlinked',
        method: identity.provider,
        userId: account.id,
        sessionId: session.id,
        client,
        email: account.email,
        details: { provider: identity.provider, identityId },
      });
    });
  }

  return { list, linkFromSession, unlink, requireRecentProof };
}

export type Identities = ReturnType<typeof createIdentities>;
