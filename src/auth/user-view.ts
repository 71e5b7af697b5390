import type { components } from '../../generated/openapi.ts';
import type { UserRow } from '../db/repositories/users.ts';

export type ApiUser = components['schemas']['User'];

/** A users row as the API's User: camelCase, ISO dates, providers always an array. */
export function toApiUser(row: UserRow): ApiUser {
  const profile = (row.profile ?? {}) as { name?: string | null; avatar_url?: string | null };
  return {
    id: row.id,
    email: row.email,
    profile: { name: profile.name ?? null, avatar_url: profile.avatar_url ?? null },
    metadata: row.metadata ?? {},
    emailVerified: row.email_verified,
    providers: Array.isArray(row.providers) ? row.providers : [],
    createdAt: new Date(row.created_at).toISOString(),
    updatedAt: new Date(row.updated_at).toISOString(),
  };
}
