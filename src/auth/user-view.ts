import type { components } from '../../generated/openapi.ts';
import type { UserRow } from '../db/repositories/users.ts';

export type ApiUser = components['schemas']['User'];
export type ApiProfile = components['schemas']['Profile'];
export type ApiAdminUser = components['schemas']['AdminUser'];

/** At most this many fields in a profile, name and avatar_url (always shown) included. */
export const MAX_PROFILE_FIELDS = 50;
/** At most this many bytes of JSON (UTF-8) in a stored profile. */
export const MAX_PROFILE_BYTES = 4096;
/** The name of a profile field (the spec's ProfileFieldName pattern). */
export const PROFILE_FIELD_NAME = /^[A-Za-z][A-Za-z0-9_]{0,63}$/;
const HTTP_URL = /^https?:\/\//;

type StoredValue = string | number | boolean;

const isStoredValue = (v: unknown): v is StoredValue =>
  typeof v === 'string' || typeof v === 'boolean' || (typeof v === 'number' && Number.isFinite(v));

/**
 * A stored profile (users.profile) as the API's Profile: name and avatar_url always (null when not
 * set), then the free-form fields. Only what the spec allows is shown, whatever the column holds
 * (a field the service never writes, such as a nested object an operator stored, is left out).
 */
export function toApiProfile(stored: unknown): ApiProfile {
  const source =
    stored !== null && typeof stored === 'object' && !Array.isArray(stored) ? (stored as Record<string, unknown>) : {};
  const profile: Record<string, StoredValue | null> = {
    name: typeof source.name === 'string' ? source.name : null,
    avatar_url: typeof source.avatar_url === 'string' && HTTP_URL.test(source.avatar_url) ? source.avatar_url : null,
  };
  let fields = 2;
  for (const [key, value] of Object.entries(source)) {
    if (fields >= MAX_PROFILE_FIELDS) break;
    if (key === 'name' || key === 'avatar_url' || !PROFILE_FIELD_NAME.test(key) || !isStoredValue(value)) continue;
    profile[key] = value;
    fields++;
  }
  // name and avatar_url may be null, which the generated index signature of the free-form fields does not say.
  return profile as ApiProfile;
}

/** A users row as the API's User: camelCase, ISO dates, providers always an array. */
export function toApiUser(row: UserRow): ApiUser {
  return {
    id: row.id,
    email: row.email,
    profile: toApiProfile(row.profile),
    metadata: row.metadata ?? {},
    emailVerified: row.email_verified,
    providers: Array.isArray(row.providers) ? row.providers : [],
    createdAt: new Date(row.created_at).toISOString(),
    updatedAt: new Date(row.updated_at).toISOString(),
  };
}

/** A users row as administrators see it: the User, its role and whether (since when) it is disabled. */
export function toAdminUser(row: UserRow): ApiAdminUser {
  return {
    ...toApiUser(row),
    role: row.role,
    disabled: row.disabled_at !== null,
    disabledAt: row.disabled_at === null ? null : new Date(row.disabled_at).toISOString(),
  };
}
