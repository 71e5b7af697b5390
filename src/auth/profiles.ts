import type { EventClient } from '../audit/audit-trail.ts';
import * as profiles from '../db/repositories/profiles.ts';
import type { Profile } from '../db/schema.ts';
import { ApiError } from '../errors.ts';
import type { AuthDeps } from './auth-context.ts';
import { type ApiProfile, MAX_PROFILE_BYTES, MAX_PROFILE_FIELDS, toApiProfile } from './user-view.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Account fields, compared without case and underscores: none of them may be a profile field
 * (`Email`, `EMAIL` and `e_mail` are refused like `email`), so that nothing reading a profile can
 * take one of its fields for the account's.
 */
const ACCOUNT_FIELDS = new Set([
  'id',
  'email',
  'role',
  'password',
  'passwordhash',
  'emailverified',
  'metadata',
  'providers',
  'createdat',
  'updatedat',
  'disabled',
  'disabledat',
  'userid',
]);
const isAccountField = (name: string) => ACCOUNT_FIELDS.has(name.toLowerCase().replaceAll('_', ''));

export interface UserProfile {
  id: string;
  profile: ApiProfile;
}

const notFound = () => new ApiError('NOT_FOUND', 'No such user');

/** Reading any user's public profile, and changing one's own. */
export function createProfiles(deps: AuthDeps) {
  const { db } = deps;
  const read = deps.read ?? ((work) => work(db));

  /**
   * The public part of an account (its id and profile). An id that is not a UUID, an unknown one and
   * a disabled account's are answered alike (one query each, the same 404).
   */
  async function getProfile(userId: string): Promise<UserProfile> {
    if (!UUID.test(userId)) throw notFound();
    const id = userId.toLowerCase();
    const found = await read((reader) => profiles.findEnabledProfile(reader, id));
    if (found === undefined) throw notFound();
    return { id, profile: toApiProfile(found.profile) };
  }

  /**
   * Merges `patch` into the caller's profile (a JSON merge patch: null removes a field). The row is
   * locked while the merge is computed, so that two concurrent patches cannot together exceed the
   * limits each one checked.
   */
  async function updateProfile(
    caller: { userId: string; sessionId: string; client: EventClient },
    patch: Record<string, unknown>,
  ): Promise<UserProfile> {
    const { userId } = caller;
    for (const name of Object.keys(patch)) {
      if (isAccountField(name)) {
        throw new ApiError('INVALID_INPUT', `body.profile.${name} is an account field and cannot be set here`);
      }
    }
    return db.transaction().execute(async (trx) => {
      const current = await profiles.lockEnabledProfile(trx, userId);
      if (current === undefined) throw new ApiError('UNAUTHORIZED', 'The account of this token no longer exists');
      // The stored fields as shown (null and unshowable ones dropped), then the patch over them.
      const merged: Profile = {};
      for (const [name, value] of Object.entries(toApiProfile(current.profile))) {
        if (value !== null) merged[name] = value;
      }
      for (const [name, value] of Object.entries(patch)) {
        if (value === null) delete merged[name];
        else merged[name] = value as string | number | boolean;
      }
      const shown = toApiProfile(merged);
      const fields = new Set([...Object.keys(merged), 'name', 'avatar_url']).size;
      if (fields > MAX_PROFILE_FIELDS) {
        throw new ApiError(
          'INVALID_INPUT',
          `body.profile: a profile holds at most ${MAX_PROFILE_FIELDS} fields, name and avatar_url included (this one would have ${fields})`,
        );
      }
      const bytes = Buffer.byteLength(JSON.stringify(merged), 'utf8');
      if (bytes > MAX_PROFILE_BYTES) {
        throw new ApiError(
          'INVALID_INPUT',
          `body.profile: a profile holds at most ${MAX_PROFILE_BYTES} bytes of JSON (this one would have ${bytes})`,
        );
      }
      await profiles.storeProfile(trx, userId, merged);
      await deps.audit.record(trx, {
        type: 'profile_updated',
        userId,
        sessionId: caller.sessionId,
        client: caller.client,
        details: { fields: Object.keys(patch).sort().join(',') },
      });
      return { id: userId, profile: shown };
    });
  }

  return { getProfile, updateProfile };
}

export type Profiles = ReturnType<typeof createProfiles>;
