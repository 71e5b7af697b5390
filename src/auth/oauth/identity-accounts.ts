import * as accounts from '../../db/repositories/mailbox-accounts.ts';
import * as oauth from '../../db/repositories/oauth.ts';
import type { UserRow } from '../../db/repositories/users.ts';
import * as users from '../../db/repositories/users.ts';
import { ApiError } from '../../errors.ts';
import type { AuthDeps } from '../auth-context.ts';
import { REFUSED_NAME_CHARACTERS } from '../profile-name.ts';
import type { UnprovenPasswords } from '../unproven-password.ts';
import type { ProviderIdentity } from './provider-clients.ts';

const disabled = () => new ApiError('ACCOUNT_DISABLED', 'This account is disabled');

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
 * - An identity already linked signs in to its account.
 * - Otherwise the provider must assert a verified address (else OAUTH_EMAIL_UNVERIFIED): an
 *   unverified claim proves nothing about the mailbox, and would hand its account to whoever
 *   typed the address at the provider.
 * - An account with that address is linked only when its own address is verified too (else
 *   OAUTH_ACCOUNT_UNVERIFIED): an unverified account may have been made by someone else with
 *   the owner's address, and linking would let that person's password into the owner's account.
 *   Linking proves the mailbox again: a password the verification left unproven goes, with the
 *   account's sessions and other identities (unproven-password.ts).
 * - No account: a new one, verified, without a password, unless sign-ups are closed.
 */
export async function accountForIdentity(
  deps: Pick<AuthDeps, 'db' | 'config' | 'clock'>,
  provider: string,
  identity: ProviderIdentity,
  unproven: UnprovenPasswords,
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
  for (let attempt = 0; attempt < 2; attempt++) {
    const existing = await users.findUserByEmail(db, email);
    if (existing !== undefined) return linkExisting(deps, provider, identity, existing, unproven);
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
      if (!(await oauth.linkIdentity(trx, user.id, provider, identity.subject))) return undefined;
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
  deps: Pick<AuthDeps, 'db' | 'clock'>,
  provider: string,
  identity: ProviderIdentity,
  existing: UserRow,
  unproven: UnprovenPasswords,
): Promise<UserRow> {
  if (existing.disabled_at !== null) throw disabled();
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
      const locked = await accounts.lockUserById(trx, existing.id);
      if (locked === undefined) throw notLinked;
      const removal = await unproven.removeOnProof(trx, locked, 'provider', deps.clock.now());
      if (!(await oauth.linkIdentity(trx, existing.id, provider, identity.subject))) throw notLinked;
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
