import type { Executor, Profile } from '../schema.ts';

/** The profile of an account that is not disabled; undefined for an unknown or disabled one. */
export async function findEnabledProfile(db: Executor, id: string): Promise<{ profile: Profile } | undefined> {
  return db
    .selectFrom('users')
    .select('profile')
    .where('id', '=', id)
    .where('disabled_at', 'is', null)
    .executeTakeFirst();
}

/** The same, with the account's row locked FOR UPDATE until the transaction ends (a merge reads, then writes). */
export async function lockEnabledProfile(db: Executor, id: string): Promise<{ profile: Profile } | undefined> {
  return db
    .selectFrom('users')
    .select('profile')
    .where('id', '=', id)
    .where('disabled_at', 'is', null)
    .forUpdate()
    .executeTakeFirst();
}

/** Replaces the stored profile. */
export async function storeProfile(db: Executor, id: string, profile: Profile): Promise<void> {
  await db
    .updateTable('users')
    .set({ profile: JSON.stringify(profile) as never })
    .where('id', '=', id)
    .execute();
}
