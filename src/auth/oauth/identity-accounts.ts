import * as oauth from '../../db/repositories/oauth.ts';
import type { UserRow } from '../../db/repositories/users.ts';
import * as users from '../../db/repositories/users.ts';
import { ApiError } from '../../errors.ts';
import type { AuthDeps } from '../auth-context.ts';
import type { ProviderIdentity } from './provider-clients.ts';

const disabled = () => new ApiError(403, 'ACCOUNT_DISABLED', 'This account is disabled');

/**
 * A provider's display name within the profile's rules: no control characters, at most 100
 * characters (code points: a cut never splits one), and well-formed; null when nothing is left.
 */
export function profileName(name: string | undefined): string | null {
  if (name === undefined) return null;
  const kept = Array.from(
    name
      .toWellFormed()
      .replace(/\p{Cc}/gu, '')
      .trim(),
  )
    .slice(0, 100)
    .join('');
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
 * - No account: a new one, verified, without a password, unless sign-ups are closed.
 */
export async function accountForIdentity(
  deps: Pick<AuthDeps, 'db' | 'config'>,
  provider: string,
  identity: ProviderIdentity,
): Promise<UserRow> {
  const { db, config } = deps;
  const linked = await oauth.findUserByIdentity(db, provider, identity.subject);
  if (linked !== undefined) {
    if (linked.disabled_at !== null) throw disabled();
    return linked;
  }
  if (identity.email === undefined || !identity.emailVerified) {
    throw new ApiError(403, 'OAUTH_EMAIL_UNVERIFIED', 'The provider did not confirm an email address for this account');
  }
  const email = identity.email;
  for (let attempt = 0; attempt < 2; attempt++) {
    const existing = await users.findUserByEmail(db, email);
    if (existing !== undefined) return linkExisting(deps, provider, identity, existing);
    if (!config.allowSignUp) throw new ApiError(403, 'SIGN_UP_DISABLED', 'This service does not allow sign-ups');
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
  throw new ApiError(503, 'SERVICE_UNAVAILABLE', 'The account could not be created; try again');
}

async function linkExisting(
  deps: Pick<AuthDeps, 'db'>,
  provider: string,
  identity: ProviderIdentity,
  existing: UserRow,
): Promise<UserRow> {
  if (existing.disabled_at !== null) throw disabled();
  if (!existing.email_verified) {
    throw new ApiError(
      409,
      'OAUTH_ACCOUNT_UNVERIFIED',
      'An account with this address exists but its address is not verified; sign in with a code sent to it, then sign in with the provider again',
    );
  }
  if (await oauth.linkIdentity(deps.db, existing.id, provider, identity.subject)) {
    return { ...existing, providers: [...existing.providers, provider].sort() };
  }
  const now = await oauth.findUserByIdentity(deps.db, provider, identity.subject);
  if (now?.id === existing.id) return now;
  throw new ApiError(
    409,
    'USER_ALREADY_EXISTS',
    `The account with this address is linked to another ${provider} identity`,
  );
}
