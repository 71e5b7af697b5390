import { type Selectable, sql } from 'kysely';
import type { Aal, AuthMethod, ClientType, Executor, Role, SessionsTable } from '../schema.ts';

export type SessionRow = Selectable<SessionsTable>;

/** A new session's row. */
export interface NewSession {
  aal: Aal;
  amr: AuthMethod[];
  userId: string;
  refreshTokenHash: string;
  clientType: ClientType;
  now: Date;
  expiresAt: Date;
  userAgent: string | null;
  ip: string | null;
}

/**
 * Inserts a session for a live account (undefined when it is gone). It owes a second step when it
 * is below aal2 and the account has a verified factor, read from the account's row FOR SHARE: a
 * first factor's verification (which updates that row) commits first, or waits for this insert
 * and then ends this session with the account's others below aal2.
 */
export async function insertSession(db: Executor, s: NewSession): Promise<SessionRow> {
  return insertFromAccount(db, s, (q) => q).executeTakeFirstOrThrow();
}

/** `insert into sessions ... select ... from users where id = <s.userId> ... for share`. */
function insertFromAccount(
  db: Executor,
  s: NewSession,
  conditions: (q: ReturnType<typeof accountRow>) => ReturnType<typeof accountRow>,
) {
  return db
    .insertInto('sessions')
    .columns([
      'user_id',
      'refresh_token_hash',
      'client_type',
      'created_at',
      'last_used_at',
      'expires_at',
      'user_agent',
      'ip',
      'aal',
      'amr',
      'mfa_pending',
    ])
    .expression(conditions(accountRow(db, s)).forShare())
    .returningAll();
}

function accountRow(db: Executor, s: NewSession) {
  return db
    .selectFrom('users')
    .select((eb) => [
      'id',
      eb.val(s.refreshTokenHash).as('refresh_token_hash'),
      eb.val(s.clientType).as('client_type'),
      eb.val(s.now).as('created_at'),
      eb.val(s.now).as('last_used_at'),
      eb.val(s.expiresAt).as('expires_at'),
      eb.val(s.userAgent).as('user_agent'),
      eb.val(s.ip).as('ip'),
      eb.val(s.aal).as('aal'),
      sql<string>`${JSON.stringify(s.amr)}::jsonb`.as('amr'),
      (s.aal === 'aal1' ? sql<boolean>`users.mfa_enabled` : sql<boolean>`false`).as('mfa_pending'),
    ])
    .where('id', '=', s.userId);
}

/**
 * Inserts a session only while the account still has the credentials that were checked (the
 * password hash and the role read before the slow password check) and is not disabled. The user
 * row is read FOR SHARE: a password change, a promotion, a role change or disabling either commits
 * first (then nothing is inserted: undefined) or waits for this insert, and then its revocation of
 * every session sees this one. Without it, a sign-in racing a password change could open a session
 * the change never ends.
 */
export async function insertSessionIfCredentialsHold(
  db: Executor,
  s: NewSession,
  checked: { passwordHash: string; role: Role },
): Promise<SessionRow | undefined> {
  return insertFromAccount(db, s, (q) =>
    q
      .where('password_hash', '=', checked.passwordHash)
      .where('role', '=', checked.role)
      .where('disabled_at', 'is', null),
  ).executeTakeFirst();
}

export async function findSessionByRefreshHash(db: Executor, hash: string): Promise<SessionRow | undefined> {
  return db.selectFrom('sessions').selectAll().where('refresh_token_hash', '=', hash).executeTakeFirst();
}

/** The session a rotated (no longer current) refresh token belonged to, and when it was rotated. */
export async function findSessionOfRotatedToken(
  db: Executor,
  hash: string,
): Promise<(SessionRow & { rotated_at: Date }) | undefined> {
  return db
    .selectFrom('rotated_refresh_tokens as r')
    .innerJoin('sessions', 'sessions.id', 'r.session_id')
    .selectAll('sessions')
    .select('r.rotated_at')
    .where('r.token_hash', '=', hash)
    .executeTakeFirst();
}

/**
 * A session as it is now, locked FOR SHARE until the transaction ends: a revocation (FOR UPDATE
 * by its UPDATE) waits for it, or commits first and is seen.
 */
export async function findSessionForShare(db: Executor, sessionId: string): Promise<SessionRow | undefined> {
  return db.selectFrom('sessions').selectAll().where('id', '=', sessionId).forShare().executeTakeFirst();
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

/** The PostgreSQL notification that announces a revoked session (its id is the payload) to every instance. */
export const SESSION_REVOKED_CHANNEL = 'auth_session_revoked';

/**
 * Revokes the sessions the filter selects that are not revoked yet and announces each one, in the
 * same statement: a notification is only ever sent for a committed revocation. Returns their ids.
 */
async function revokeWhere(
  db: Executor,
  now: Date,
  filter:
    | { sessionId: string; ofUser?: string | undefined }
    | { userId: string; exceptSessionId?: string | undefined; belowAal2?: boolean | undefined },
): Promise<string[]> {
  const condition =
    'sessionId' in filter
      ? filter.ofUser === undefined
        ? sql`id = ${filter.sessionId}`
        : sql`id = ${filter.sessionId} and user_id = ${filter.ofUser} and expires_at > ${now}`
      : sql.join(
          [
            sql`user_id = ${filter.userId}`,
            ...(filter.exceptSessionId === undefined ? [] : [sql`id <> ${filter.exceptSessionId}`]),
            ...(filter.belowAal2 ? [sql`aal = 'aal1'`] : []),
          ],
          sql` and `,
        );
  const result = await sql<{ id: string }>`
    with revoked as (
      update sessions set revoked_at = ${now}
      where ${condition} and revoked_at is null
      returning id
    )
    select id, pg_notify(${SESSION_REVOKED_CHANNEL}, id::text) from revoked
  `.execute(db);
  return result.rows.map((r) => r.id);
}

/** Locks a session that is not revoked (FOR UPDATE, until the transaction ends); false when it is. */
export async function lockLiveSession(db: Executor, sessionId: string): Promise<boolean> {
  const row = await db
    .selectFrom('sessions')
    .select('id')
    .where('id', '=', sessionId)
    .where('revoked_at', 'is', null)
    .forUpdate()
    .executeTakeFirst();
  return row !== undefined;
}

/**
 * The sessions revoked after `since` (their ids and when), oldest first: those in the table, and
 * those of accounts deleted since (their rows went with the account).
 */
export async function listRevokedSince(db: Executor, since: Date): Promise<{ id: string; revoked_at: Date | null }[]> {
  return db
    .selectFrom('sessions')
    .select(['id', 'revoked_at'])
    .where('revoked_at', '>', since)
    .unionAll(
      db
        .selectFrom('deleted_account_sessions')
        .select(['session_id as id', 'revoked_at'])
        .where('revoked_at', '>', since),
    )
    .orderBy('revoked_at')
    .execute();
}

/**
 * Revokes one session; returns its id when this call revoked it (empty when it already was). With
 * `ofUser`, only a live (unexpired) session of that account.
 */
export function revokeSession(db: Executor, sessionId: string, now: Date, ofUser?: string): Promise<string[]> {
  return revokeWhere(db, now, { sessionId, ofUser });
}

/** A session as its owner and administrators see it (GET /api/auth/sessions). */
export type LiveSession = Pick<
  SessionRow,
  'id' | 'client_type' | 'created_at' | 'last_used_at' | 'expires_at' | 'ip' | 'user_agent' | 'aal'
>;

/** An account's live sessions (not revoked, not expired), the most recently used first. */
export async function listLiveSessions(db: Executor, userId: string, now: Date): Promise<LiveSession[]> {
  return db
    .selectFrom('sessions')
    .select(['id', 'client_type', 'created_at', 'last_used_at', 'expires_at', 'ip', 'user_agent', 'aal'])
    .where('user_id', '=', userId)
    .where('revoked_at', 'is', null)
    .where('expires_at', '>', now)
    .orderBy('last_used_at', 'desc')
    .orderBy('id')
    .limit(MAX_LISTED_SESSIONS)
    .execute();
}

/** The most sessions a listing shows (the most recently used). */
export const MAX_LISTED_SESSIONS = 200;

/** Revokes every live session of a user, but for `exceptSessionId` when given; returns their ids. */
export function revokeUserSessions(
  db: Executor,
  userId: string,
  now: Date,
  exceptSessionId?: string,
): Promise<string[]> {
  return revokeWhere(db, now, { userId, exceptSessionId });
}

/** Revokes every live session of a user below aal2; returns their ids. */
export function revokeUserSessionsBelowAal2(db: Executor, userId: string, now: Date): Promise<string[]> {
  return revokeWhere(db, now, { userId, belowAal2: true });
}
