import { sql } from 'kysely';
import type { Executor, SigningKeysTable } from '../schema.ts';

/** The PostgreSQL notification that tells every instance the signing keys changed (the kid is the payload). */
export const SIGNING_KEYS_CHANNEL = 'auth_signing_keys';

export type SigningKeyAlgorithm = SigningKeysTable['alg'];
export type SigningKeyStatus = SigningKeysTable['status'];

export interface SigningKeyRow {
  kid: string;
  alg: SigningKeyAlgorithm;
  status: SigningKeyStatus;
  public_jwk: Record<string, string>;
  private_key_sealed: string;
  created_at: Date;
  activated_at: Date | null;
  retired_at: Date | null;
  revoked_at: Date | null;
}

export interface NewSigningKey {
  kid: string;
  alg: SigningKeyAlgorithm;
  publicJwk: Record<string, string>;
  privateKeySealed: string;
}

const columns = [
  'kid',
  'alg',
  'status',
  'public_jwk',
  'private_key_sealed',
  'created_at',
  'activated_at',
  'retired_at',
  'revoked_at',
] as const;

/** Every key, newest first. */
export function listSigningKeys(db: Executor): Promise<SigningKeyRow[]> {
  return db.selectFrom('signing_keys').select(columns).orderBy('created_at', 'desc').orderBy('kid').execute();
}

/** Serializes the changes of keys (one at a time across instances), until the transaction ends. */
async function lockKeys(db: Executor): Promise<void> {
  await sql`select pg_advisory_xact_lock(hashtext('signing_keys'))`.execute(db);
}

/** The key in a state that only one key may be in (current, standby), if any. */
function keyIn(db: Executor, status: 'current' | 'standby'): Promise<{ kid: string } | undefined> {
  return db.selectFrom('signing_keys').select('kid').where('status', '=', status).executeTakeFirst();
}

async function announce(db: Executor, kid: string): Promise<void> {
  await sql`select pg_notify(${SIGNING_KEYS_CHANNEL}, ${kid})`.execute(db);
}

function insert(db: Executor, key: NewSigningKey, status: 'standby' | 'current', now: Date) {
  return db
    .insertInto('signing_keys')
    .values({
      kid: key.kid,
      alg: key.alg,
      status,
      public_jwk: JSON.stringify(key.publicJwk),
      private_key_sealed: key.privateKeySealed,
      created_at: now,
      activated_at: status === 'current' ? now : null,
      retired_at: null,
      revoked_at: null,
    })
    .returning(columns)
    .executeTakeFirstOrThrow();
}

/** Makes `key` the current key when there is none (a fresh deployment); false when one exists. */
export async function insertFirstKey(db: Executor, key: NewSigningKey, now: Date): Promise<boolean> {
  return db.transaction().execute(async (trx) => {
    await lockKeys(trx);
    const current = await keyIn(trx, 'current');
    if (current !== undefined) return false;
    await insert(trx, key, 'current', now);
    await announce(trx, key.kid);
    return true;
  });
}

/** Records a change of the keys (the audit log) in its transaction, with the kid it concerns. */
export type RecordChange = (trx: Executor, kid: string) => Promise<void>;
const noRecord: RecordChange = async () => {};

/** Adds a standby key; undefined when there is one already. */
export async function insertStandbyKey(
  db: Executor,
  key: NewSigningKey,
  now: Date,
  record: RecordChange = noRecord,
): Promise<SigningKeyRow | undefined> {
  return db.transaction().execute(async (trx) => {
    await lockKeys(trx);
    const standby = await keyIn(trx, 'standby');
    if (standby !== undefined) return undefined;
    const row = await insert(trx, key, 'standby', now);
    await announce(trx, key.kid);
    await record(trx, key.kid);
    return row;
  });
}

/**
 * The standby key becomes current (`fresh` is inserted as the standby first when there is none),
 * the current one previous. Returns the kid now current, or undefined when there was no standby
 * key and no `fresh` one (a standby seen before was revoked meanwhile: the caller may try again).
 */
export async function rotateKeys(
  db: Executor,
  fresh: NewSigningKey | undefined,
  now: Date,
  record: RecordChange = noRecord,
): Promise<string | undefined> {
  return db.transaction().execute(async (trx) => {
    await lockKeys(trx);
    let standby = await keyIn(trx, 'standby');
    if (standby === undefined) {
      if (fresh === undefined) return undefined;
      standby = await insert(trx, fresh, 'standby', now);
    }
    await trx
      .updateTable('signing_keys')
      .set({ status: 'previous', retired_at: now })
      .where('status', '=', 'current')
      .execute();
    await trx
      .updateTable('signing_keys')
      .set({ status: 'current', activated_at: now })
      .where('kid', '=', standby.kid)
      .execute();
    await announce(trx, standby.kid);
    await record(trx, standby.kid);
    return standby.kid;
  });
}

export type RevokeOutcome = { revoked: SigningKeyRow } | { refused: 'current' } | { refused: 'unknown' };

/** Revokes a previous or standby key (a revoked one is answered as it is). */
export async function revokeKey(
  db: Executor,
  kid: string,
  now: Date,
  record: RecordChange = noRecord,
): Promise<RevokeOutcome> {
  return db.transaction().execute(async (trx) => {
    await lockKeys(trx);
    const key = await trx.selectFrom('signing_keys').select(columns).where('kid', '=', kid).executeTakeFirst();
    if (key === undefined) return { refused: 'unknown' };
    if (key.status === 'current') return { refused: 'current' };
    if (key.status === 'revoked') {
      // Announced again: an instance that missed the first announcement (its read failed) hears it now.
      await announce(trx, kid);
      return { revoked: key };
    }
    const revoked = await trx
      .updateTable('signing_keys')
      .set({ status: 'revoked', revoked_at: now })
      .where('kid', '=', kid)
      .returning(columns)
      .executeTakeFirstOrThrow();
    await announce(trx, kid);
    await record(trx, kid);
    return { revoked };
  });
}

/** Automatic rotation: how long a key signs, how early its successor is published, how long a previous key stays. */
export interface RotationSchedule {
  now: Date;
  signMs: number;
  leadMs: number;
  keepPreviousMs: number;
}

export interface ScheduleOutcome {
  /** A standby key is due and none was given: make one and call again. */
  needsKey: boolean;
  changed: boolean;
}

/**
 * One step of automatic rotation, under the keys' lock (so that instances running it at once change
 * nothing twice): publish a standby key `leadMs` before the current key's time is up (`fresh`),
 * rotate to it once the time is up and it has been published for `leadMs`, and revoke the previous
 * keys retired more than `keepPreviousMs` ago (their tokens have expired).
 */
export async function applyRotationSchedule(
  db: Executor,
  schedule: RotationSchedule,
  fresh: NewSigningKey | undefined,
): Promise<ScheduleOutcome> {
  return db.transaction().execute(async (trx) => {
    await lockKeys(trx);
    const { now } = schedule;
    const keys = await trx
      .selectFrom('signing_keys')
      .select(['kid', 'status', 'created_at', 'activated_at', 'retired_at'])
      .where('status', '!=', 'revoked')
      .execute();
    const current = keys.find((k) => k.status === 'current');
    if (current?.activated_at == null) return { needsKey: false, changed: false };
    let standby = keys.find((k) => k.status === 'standby');
    let changed = false;
    const dueAt = current.activated_at.getTime() + schedule.signMs;
    if (standby === undefined && now.getTime() >= dueAt - schedule.leadMs) {
      if (fresh === undefined) return { needsKey: true, changed: false };
      standby = await insert(trx, fresh, 'standby', now);
      changed = true;
    }
    if (
      standby !== undefined &&
      now.getTime() >= dueAt &&
      now.getTime() >= standby.created_at.getTime() + schedule.leadMs
    ) {
      await trx
        .updateTable('signing_keys')
        .set({ status: 'previous', retired_at: now })
        .where('kid', '=', current.kid)
        .execute();
      await trx
        .updateTable('signing_keys')
        .set({ status: 'current', activated_at: now })
        .where('kid', '=', standby.kid)
        .execute();
      changed = true;
    }
    const expired = await trx
      .updateTable('signing_keys')
      .set({ status: 'revoked', revoked_at: now })
      .where('status', '=', 'previous')
      .where('retired_at', '<=', new Date(now.getTime() - schedule.keepPreviousMs))
      .returning('kid')
      .execute();
    if (expired.length > 0) changed = true;
    if (changed) await announce(trx, current.kid);
    return { needsKey: false, changed };
  });
}

/** When the HS256 tokens of the version before signing keys began to be phased out (migration 0020), if ever. */
export async function legacyTokensSince(db: Executor): Promise<Date | undefined> {
  const row = await db
    .selectFrom('app_settings')
    .select('value')
    .where('key', '=', 'legacy_hs256_since')
    .executeTakeFirst();
  return row === undefined ? undefined : new Date(row.value);
}
