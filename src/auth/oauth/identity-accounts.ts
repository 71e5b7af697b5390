import type { EventClient } from '../../audit/audit-trail.ts';
import type { Config } from '../../config.ts';
import * as addressLimits from '../../db/repositories/address-limits.ts';
import * as accounts from '../../db/repositories/mailbox-accounts.ts';
import * as oauth from '../../db/repositories/oauth.ts';
import type { UserRow } from '../../db/repositories/users.ts';
import * as users from '../../db/repositories/users.ts';
import type { Executor } from '../../db/schema.ts';
import { ApiError } from '../../errors.ts';
import type { AuthDeps } from '../auth-context.ts';
import { REFUSED_NAME_CHARACTERS } from '../profile-name.ts';
import type { UnprovenPasswords } from '../unproven-password.ts';
import type { ProviderIdentity } from './provider-clients.ts';

const disabled = () => new ApiError('ACCOUNT_DISABLED', 'This account is disabled');
const linkRequired = () =>
  new ApiError(
    'OAUTH_LINK_REQUIRED',
    'An account with this address exists and this provider does not link it by address; sign in to the account and link the provider from it',
  );

/** The deps of the linking rule: the database, the settings, the clock and the audit trail. */
export type LinkingDeps = Pick<AuthDeps, 'db' | 'config' | 'clock' | 'audit'>;

/** Whether the provider links identities to existing accounts by address (OAUTH_<NAME>_LINK_BY_EMAIL). */
function linksByAddress(config: Pick<Config, 'oauthProviders'>, provider: string): boolean {
  return config.oauthProviders.find((p) => p.name === provider)?.linkByEmail !== false;
}

/** Records a link in the audit log (and queues `user.updated`), in the link's transaction. */
export function recordLinked(
  deps: Pick<AuthDeps, 'audit'>,
  trx: Executor,
  link: {
    user: { id: string; email: string };
    provider: string;
    identityId: string;
    sessionId?: string | undefined;
    client: EventClient | undefined;
  },
): Promise<void> {
  return deps.audit.record(trx, {
    type: 'identity_linked',
    method: link.provider,
    userId: link.user.id,
    sessionId: link.sessionId,
    client: link.client,
    email: link.user.email,
    details: { provider: link.provider, identityId: link.identityId },
  });
}

/**
 * A provider's display name within the profile's rules: without the characters a profile name may
 * not hold (control, bidirectional and hiding characters: REFUSED_NAME_CHARACTERS), at most 100
 * characters (code points: a cut never splits one), and well-formed; null when nothing is left.
 */
export function profileName(name: string | undefined): string | null {
  if (name === undefined) return null;
  const kept = Array.from(name.toWellFormed().replace(REFUSED_NAME_CHARACTERS, '').trim()).slice(0, 100).join('');
  return kept === '' ? null : kept;
}

/**
 * The account a provider identity signs in to. The linking rule:
 *
 * - An identity already linked signs in to its account (linked by address, or from a session:
 *   identities.ts).
 * - Otherwise the provider must assert a verified address (else OAUTH_EMAIL_UNVERIFIED): an
 *   unverified claim proves nothing about the mailbox, and would hand its account to whoever
 *   typed the address at the provider.
 * - An account with that address is linked by address only when that is allowed (else
 *   OAUTH_LINK_REQUIRED): never an administrator's account (role admin, or the address of
 *   ADMIN_EMAIL even before its account exists), since any configured issuer can assert any
 *   address as verified, and one that does so for the administrator's would get an administrator's
 *   session; not when the provider has OAUTH_<NAME>_LINK_BY_EMAIL=false; and not an identity the
 *   account's owner unlinked. The owner links such an identity from a session instead.
 * - It is linked only when its own address is verified too (else OAUTH_ACCOUNT_UNVERIFIED): an
 *   unverified account may have been made by someone else with the owner's address, and linking
 *   would let that person's password into the owner's account. Linking proves the mailbox again:
 *   a password the verification left unproven goes, with the account's sessions and other
 *   identities (unproven-password.ts).
 * - No account: a new one, verified, without a password, unless sign-ups are closed.
 *
 * Every link is recorded in the audit log (`identity_linked`) in its transaction; `client` is
 * where the sign-in came from.
 */
export async function accountForIdentity(
  deps: LinkingDeps,
  provider: string,
  identity: ProviderIdentity,
  unproven: UnprovenPasswords,
  client?: EventClient,
): Promise<UserRow> {
  const { db, config } = deps;
  const linked = await oauth.findUserByIdentity(db, provider, identity.subject);
  if (linked !== undefined) {
    if (linked.disabled_at !== null) throw disabled();
    return linked;
  }
  if (identity.email === undefined || !identity.emailVerified) {
    throw new ApiError('OAUTH_EMAIL_UNVERIFIED', 'The provider did not confirm an email address for this account');
  }
  const email = identity.email;
  // The administrator's address, whether or not its account exists yet: an account made here now
  // would become the administrator at the next start, with this identity linked to it.
  if (config.admin !== undefined && email === config.admin.email) throw linkRequired();
  for (let attempt = 0; attempt < 2; attempt++) {
    const existing = await users.findUserByEmail(db, email);
    if (existing !== undefined) return linkExisting(deps, provider, { ...identity, email }, existing, unproven, client);
    if (!config.allowSignUp) throw new ApiError('SIGN_UP_DISABLED', 'This service does not allow sign-ups');
    const created = await db.transaction().execute(async (trx) => {
      const user = await users.insertProviderUser(trx, {
        email,
        name: profileName(identity.name),
        avatarUrl:
          identity.picture !== undefined && /^https?:\/\/\S{1,2040}$/.test(identity.picture)
            ? identity.picture
            : undefined,
      });
      if (user === undefined) return undefined;
      await deps.audit.record(trx, { type: 'sign_up', method: provider, userId: user.id, client, email });
      const identityId = await oauth.linkIdentity(trx, {
        userId: user.id,
        provider,
        subject: identity.subject,
        email,
      });
      if (identityId === undefined) return undefined;
      await recordLinked(deps, trx, { user, provider, identityId, client });
      return { ...user, providers: [provider] };
    });
    if (created !== undefined) return created;
    // A concurrent sign-in made the account (or linked the identity) first: look again.
    const now = await oauth.findUserByIdentity(db, provider, identity.subject);
    if (now !== undefined) return now.disabled_at === null ? now : Promise.reject(disabled());
  }
  throw new ApiError('SERVICE_UNAVAILABLE', 'The account could not be created; try again');
}

async function linkExisting(
  deps: LinkingDeps,
  provider: string,
  identity: ProviderIdentity & { email: string },
  existing: UserRow,
  unproven: UnprovenPasswords,
  client: EventClient | undefined,
): Promise<UserRow> {
  if (existing.disabled_at !== null) throw disabled();
  // Checked again under the account's lock below; here first, so that the refusal is this one.
  if (!linksByAddress(deps.config, provider) || existing.role === 'admin') throw linkRequired();
  if (!existing.email_verified) {
    throw new ApiError(
      'OAUTH_ACCOUNT_UNVERIFIED',
      'An account with this address exists but its address is not verified; sign in with a code sent to it, then sign in with the provider again',
    );
  }
  // The account's row is locked while an unproven password goes and the identity is linked; a
  // link that fails (the identity is another account's) rolls the removal back.
  const notLinked = Symbol('not linked');
  const linked = await deps.db
    .transaction()
    .execute(async (trx) => {
      // The address first: an unproven password goes with the address's codes (addressLock).
      await addressLimits.lockAddresses(trx, [existing.email]);
      const locked = await accounts.lockUserById(trx, existing.id);
      if (locked === undefined) throw notLinked;
      // Under the account's lock: a promotion to administrator, or an unlinking of this identity,
      // that committed since the account was read is seen here.
      if (locked.role === 'admin' || (await oauth.wasUnlinked(trx, locked.id, provider, identity.subject))) {
        throw linkRequired();
      }
      const removal = await unproven.removeOnProof(trx, locked, 'provider', deps.clock.now());
      const identityId = await oauth.linkIdentity(trx, {
        userId: existing.id,
        provider,
        subject: identity.subject,
        email: identity.email,
      });
      if (identityId === undefined) throw notLinked;
      await recordLinked(deps, trx, { user: locked, provider, identityId, client });
      return { removal, user: await users.findUserById(trx, existing.id) };
    })
    .catch((err: unknown) => (err === notLinked ? undefined : Promise.reject(err)));
  if (linked?.user !== undefined) {
    unproven.announce(linked.removal);
    if (linked.user.disabled_at !== null) throw disabled();
    return linked.user;
  }
  const now = await oauth.findUserByIdentity(deps.db, provider, identity.subject);
  if (now?.id === existing.id) return now;
  throw new ApiError('USER_ALREADY_EXISTS', `The account with this address is linked to another ${provider} identity`);
}
