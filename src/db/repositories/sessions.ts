import type { Selectable } from 'kysely';
import type { ClientType, Executor, SessionsTable } from '../schema.ts';

export type SessionRow = Selectable<SessionsTable>;

export async function insertSession(
  db: Executor,
  s: {
    userId: string;
    refreshTokenHash: string;
    clientType: ClientType;
    now: Date;
    expiresAt: Date;
    userAgent: string | null;
    ip: string | null;
  },
): Promise<SessionRow> {
  return db
    .insertInto('sessions')
    .values({
      user_id: s.userId,
      refresh_token_hash: s.refreshTokenHash,
      client_type: s.clientType,
      created_at: s.now,
      last_used_at: s.now,
      expires_at: s.expiresAt,
      user_agent: s.userAgent,
      ip: s.ip,
    })
    .returningAll()
    .executeTakeFirstOrThrow();
}

export async function findSessionByRefreshHash(db: Executor, hash: string): Promise<SessionRow | undefined> {
  return db.selectFrom('sessions').selectAll().where('refresh_token_hash', '=', hash).executeTakeFirst();
}

/** The session a rotated (no longer current) refresh token belonged to. */
export async function findSessionOfRotatedToken(db: Executor, hash: string): Promise<SessionRow | undefined> {
  return db
    .selectFrom('rotated_refresh_tokens as r')
    .innerJoin('sessions', 'sessions.id', 'r.session_id')
    .selectAll('sessions')
    .where('r.token_hash', '=', hash)
    .executeTakeFirst();
}

/**
 * Swaps the current refresh token for a new one, atomically: only a caller presenting the current
 * token wins; the old hash is kept so that presenting it again is recognised as reuse.
 */
export async function rotateRefreshToken(
  db: Executor,
  sessionId: string,
  oldHash: string,
  newHash: string,
  now: Date,
): Promise<boolean> {
  const updated = await db
    .updateTable('sessions')
    .set({ refresh_token_hash: newHash, last_used_at: now })
    .where('id', '=', sessionId)
    .where('refresh_token_hash', '=', oldHash)
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
  if (Number(updated.numUpdatedRows) !== 1) return false;
  await db
    .insertInto('rotated_refresh_tokens')
    .values({ token_hash: oldHash, session_id: sessionId, rotated_at: now })
    .execute();
  return true;
}

export async function revokeSession(db: Executor, sessionId: string, now: Date): Promise<void> {
  await db
    .updateTable('sessions')
    .set({ revoked_at: now })
    .where('id', '=', sessionId)
    .where('revoked_at', 'is', null)
    .execute();
}
