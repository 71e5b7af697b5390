// Passkeys (WebAuthn credentials). Their challenges are one-time codes (one-time-codes.ts); whether
// the account has a second factor, passkeys included, is users.mfa_enabled (mfa.ts).
import type { Selectable } from 'kysely';
import type { Executor, PasskeysTable } from '../schema.ts';

export type PasskeyRow = Selectable<PasskeysTable>;

export async function listPasskeys(db: Executor, userId: string): Promise<PasskeyRow[]> {
  return db
    .selectFrom('passkeys')
    .selectAll()
    .where('user_id', '=', userId)
    .orderBy('created_at')
    .orderBy('id')
    .execute();
}

/** The passkey with this credential id, whoever's it is. */
export async function findByCredentialId(db: Executor, credentialId: string): Promise<PasskeyRow | undefined> {
  return db.selectFrom('passkeys').selectAll().where('credential_id', '=', credentialId).executeTakeFirst();
}

/** Inserts a passkey; undefined when its credential id is registered already (to any account). */
export async function insertPasskey(
  db: Executor,
  passkey: Omit<PasskeyRow, 'id' | 'last_used_at' | 'transports'> & { transports: readonly string[] },
): Promise<PasskeyRow | undefined> {
  return db
    .insertInto('passkeys')
    .values({ ...passkey, transports: JSON.stringify(passkey.transports) })
    .onConflict((oc) => oc.column('credential_id').doNothing())
    .returningAll()
    .executeTakeFirst();
}

/**
 * Records an assertion: the counter moves from the one the assertion was checked against to the
 * new one, only if no other assertion moved it meanwhile (of two at once, one gets the row).
 */
export async function recordPasskeyUse(
  db: Executor,
  passkey: { id: string; counter: number },
  newCounter: number,
  now: Date,
): Promise<boolean> {
  const row = await db
    .updateTable('passkeys')
    .set({ counter: newCounter, last_used_at: now })
    .where('id', '=', passkey.id)
    .where('counter', '=', passkey.counter)
    .returning('id')
    .executeTakeFirst();
  return row !== undefined;
}

export async function renamePasskey(
  db: Executor,
  userId: string,
  passkeyId: string,
  friendlyName: string,
): Promise<PasskeyRow | undefined> {
  return db
    .updateTable('passkeys')
    .set({ friendly_name: friendlyName })
    .where('id', '=', passkeyId)
    .where('user_id', '=', userId)
    .returningAll()
    .executeTakeFirst();
}
