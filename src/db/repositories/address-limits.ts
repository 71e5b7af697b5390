import { sql } from 'kysely';
import type { Executor } from '../schema.ts';

const DAY_MS = 86_400_000;

/**
 * The address's lock (a transaction-level advisory lock on its name). Every transaction that
 * writes an address's codes or its email limits takes it first, before the account's row and the
 * codes: the claims of every send (then their codes), the guesses (the code, then the address's
 * count), and every flow that spends or deletes the address's codes (the sign-in by code, the
 * verification, the reset and its code exchange, the password change, the administrator's
 * actions). So two of them at one address run one after the other and never each hold a row the
 * other waits for; a lock on the address's row of email_send_log could not do it, since that row
 * is not always there, and no one order of the rows fits every flow (a code written for an account
 * takes a key-share lock on its row after the code's).
 */
export const addressLock = (email: string) =>
  sql`pg_advisory_xact_lock(hashtextextended(${`address:${email.toLowerCase()}`}, 0))`;

/**
 * Takes the locks of these addresses (addressLock, whatever their case) in one order, in `db`'s
 * transaction: the first statement of every flow that spends or deletes an address's codes.
 */
export async function lockAddresses(db: Executor, emails: readonly string[]): Promise<void> {
  const sorted = [...new Set(emails.map((e) => e.toLowerCase()))].sort();
  if (sorted.length === 1) await sql`select ${addressLock(sorted[0] as string)}`.execute(db);
  else if (sorted.length > 1) {
    // unnest yields the array's order, so the locks are taken in it.
    await sql`select pg_advisory_xact_lock(hashtextextended('address:' || e, 0))
      from unnest(${sorted}::text[]) as e`.execute(db);
  }
}

/** The limits on emails to one address. */
export interface EmailLimits {
  /** Minimum gap between two emails to one address (between two asked for from one known device). */
  cooldownSeconds: number;
  /** Emails one address gets per day from requesters that are not its known devices. */
  perDay: number;
  /** Of those, how many one requester (client IP) can cause. */
  perRequesterPerDay: number;
  /**
   * Beyond perDay, one reset or sign-in email per this many seconds (the reserve): whoever used up
   * the day's budget, the owner gets a way back in by email within this time of asking.
   */
  reservePeriodSeconds: number;
  /** Emails one known device (signed in to the address's account before) can cause per day, its own budget. */
  perKnownDevicePerDay: number;
  /** Emails all known devices of the address together can cause per day. */
  knownDevicesPerDay: number;
}

/** What an email is for: resets and sign-in codes may use the reserve, verification emails may not. */
export type EmailKind = 'verification' | 'reset' | 'sign_in';

/** Who asks for an email to an address. */
export interface EmailClaimant {
  /** The client's IP (requesterOf). */
  requester: string;
  /** The id of the known device asking (its signal checked against the address's account), if any. */
  device?: string | undefined;
  kind: EmailKind;
}

/**
 * The budget an email went out under: the address's daily budget, the reserve beyond it, or the
 * known device's own budget.
 */
export type EmailClaim = { pool: 'address' | 'reserve' } | { pool: 'device'; device: string };

/** The id and device epoch of the account with this (lower-cased) address, if any (what device signals are bound to). */
export async function accountIdOf(
  db: Executor,
  email: string,
): Promise<{ id: string; device_epoch: number } | undefined> {
  return db.selectFrom('users').select(['id', 'device_epoch']).where('email', '=', email).executeTakeFirst();
}

/**
 * Claims the right to send an email to an address for `claimant`; undefined when refused.
 *
 * - A known device (`claimant.device`) has its own budget: perKnownDevicePerDay emails a day
 *   (knownDevicesPerDay for all of the address's devices together) and one per cooldown, whatever
 *   others have asked for (one writing statement).
 * - Anyone else shares the address's budget: refused while the cooldown runs, once the address's
 *   daily cap is reached, or once this requester has used its share of that cap (each email
 *   resets the code's attempts, so the cap also bounds the guesses per day). Beyond that, a reset
 *   or sign-in email still goes out when the address has had none from the reserve for
 *   reservePeriodSeconds (the cooldown still applies). Works the same for every address, with or
 *   without an account: one statement writing two rows (see addressClaim).
 *
 * Run it in a transaction.
 */
export async function claimEmailSend(
  db: Executor,
  email: string,
  claimant: EmailClaimant,
  now: Date,
  limits: EmailLimits,
): Promise<EmailClaim | undefined> {
  const cutoff = new Date(now.getTime() - limits.cooldownSeconds * 1000);
  const dayAgo = new Date(now.getTime() - DAY_MS);
  const { device } = claimant;
  if (device !== undefined) {
    // The address's devices together: a device seen for the first time (each sign-in may bring one)
    // is inserted only under the cap too, and claims for one address run one after another (the
    // address's lock) so that two new devices cannot both take its last place.
    const devicesUnderCap = sql`(
      select coalesce(sum(o.sent_in_window), 0) from email_send_devices o
      where o.email = ${email} and o.window_started_at > ${dayAgo}
    ) < ${limits.knownDevicesPerDay}`;
    await lockAddresses(db, [email]);
    const claimed = await sql<{ email: string }>`
      insert into email_send_devices as d (email, device_id, window_started_at, sent_in_window, last_sent_at)
      select ${email}, ${device}, ${now}::timestamptz, 1, ${now}::timestamptz
      where ${devicesUnderCap}
      on conflict (email, device_id) do update set
        last_sent_at = excluded.last_sent_at,
        window_started_at = case when d.window_started_at <= ${dayAgo} then excluded.window_started_at else d.window_started_at end,
        sent_in_window = case when d.window_started_at <= ${dayAgo} then 1 else d.sent_in_window + 1 end
      where d.last_sent_at <= ${cutoff}
        and (d.window_started_at <= ${dayAgo} or d.sent_in_window < ${limits.perKnownDevicePerDay})
        and ${devicesUnderCap}
      returning email
    `.execute(db);
    return claimed.rows.length === 1 ? { pool: 'device', device } : undefined;
  }
  const claim = addressClaim(email, claimant, now, limits);
  const claimed = await sql<{ granted: boolean; reserve: boolean | null }>`
    with ${claim.claimed}
    ${claim.requesterShare}
    returning exists (select 1 from claimed) as granted, (select reserve from claimed) as reserve
  `.execute(db);
  const row = claimed.rows[0];
  if (row?.granted !== true) return undefined;
  return { pool: row.reserve === true ? 'reserve' : 'address' };
}

/**
 * The claim of the address's budget (claimEmailSend without a known device) as one statement:
 * `claimed`, a common table expression (the address's row when the claim is granted; its column
 * `reserve` says whether from the reserve), and `requesterShare`, the statement's own INSERT (the
 * requester's share, counted when the daily budget granted the claim), to which the caller adds
 * its RETURNING. Expressions between them may ask whether `claimed` has a row.
 */
export function addressClaim(email: string, claimant: EmailClaimant, now: Date, limits: EmailLimits) {
  const cutoff = new Date(now.getTime() - limits.cooldownSeconds * 1000);
  const dayAgo = new Date(now.getTime() - DAY_MS);
  const { requester } = claimant;
  const reserveOpen = claimant.kind !== 'verification';
  const reserveCutoff = new Date(now.getTime() - limits.reservePeriodSeconds * 1000);
  // Within the address's daily budget and this requester's share of it (on the row before the update).
  const withinBudget = sql`(l.window_started_at <= ${dayAgo} or l.sent_in_window < ${limits.perDay})
    and coalesce((
      select r.sent_in_window from email_send_requesters r
      where r.email = ${email} and r.requester = ${requester} and r.window_started_at > ${dayAgo}
    ), 0) < ${limits.perRequesterPerDay}`;
  // Both rows are written in one statement (so one snapshot: the requester's share is read as it
  // was before this claim, as it was when the claim and the share were two statements in a row).
  return {
    claimed: sql`claimed as (
    insert into email_send_log as l (email, last_sent_at, window_started_at, sent_in_window)
    select ${email}, ${now}::timestamptz, ${now}::timestamptz, 1 from (select ${addressLock(email)}) as locked
    on conflict (email) do update set
      last_sent_at = excluded.last_sent_at,
      window_started_at = case when l.window_started_at <= ${dayAgo} then excluded.last_sent_at else l.window_started_at end,
      sent_in_window = case when l.window_started_at <= ${dayAgo} then 1
        when ${withinBudget} then l.sent_in_window + 1 else l.sent_in_window end,
      code_attempts_in_window = case when l.window_started_at <= ${dayAgo} then 0 else l.code_attempts_in_window end,
      reserve_sent_at = case when ${withinBudget} then l.reserve_sent_at else excluded.last_sent_at end
    where l.last_sent_at <= ${cutoff}
      and ((${withinBudget}) or (${reserveOpen} and l.reserve_sent_at <= ${reserveCutoff}))
    returning reserve_sent_at = last_sent_at as reserve
  )`,
    // Only the daily budget counts toward the requester's share.
    requesterShare: sql`
    insert into email_send_requesters as r (email, requester, window_started_at, sent_in_window)
    values (${email}, ${requester}, ${now}, (select count(*) from claimed where not reserve))
    on conflict (email, requester) do update set
      window_started_at = case when r.window_started_at <= ${dayAgo} then excluded.window_started_at else r.window_started_at end,
      sent_in_window = case when r.window_started_at <= ${dayAgo} then excluded.sent_in_window
        else r.sent_in_window + excluded.sent_in_window end`,
  };
}

/** Gives back a claim whose email could not be sent, so that the person can ask again at once. */
export async function releaseEmailSend(
  db: Executor,
  email: string,
  requester: string,
  claimedAt: Date,
  claim: EmailClaim = { pool: 'address' },
): Promise<void> {
  if (claim.pool === 'device') {
    await sql`
      update email_send_devices
      set last_sent_at = to_timestamp(0), sent_in_window = greatest(sent_in_window - 1, 0)
      where email = ${email} and device_id = ${claim.device} and last_sent_at = ${claimedAt}
    `.execute(db);
    return;
  }
  if (claim.pool === 'reserve') {
    await sql`
      update email_send_log set last_sent_at = to_timestamp(0), reserve_sent_at = to_timestamp(0)
      where email = ${email} and last_sent_at = ${claimedAt} and reserve_sent_at = ${claimedAt}
    `.execute(db);
    return;
  }
  const released = await sql`
    update email_send_log
    set last_sent_at = to_timestamp(0), sent_in_window = greatest(sent_in_window - 1, 0)
    where email = ${email} and last_sent_at = ${claimedAt}
  `.execute(db);
  if (Number(released.numAffectedRows ?? 0) === 0) return;
  await sql`
    update email_send_requesters set sent_in_window = greatest(sent_in_window - 1, 0)
    where email = ${email} and requester = ${requester}
  `.execute(db);
}

/** Deletes the records of addresses and requesters whose daily window and cooldown are over. */
export async function deleteStaleAddressRecords(db: Executor, now: Date, cooldownSeconds: number): Promise<number> {
  const dayAgo = new Date(now.getTime() - DAY_MS);
  const cutoff = new Date(now.getTime() - cooldownSeconds * 1000);
  const addresses = await db
    .deleteFrom('email_send_log')
    .where('window_started_at', '<=', dayAgo)
    .where('last_sent_at', '<=', cutoff)
    .executeTakeFirst();
  const requesters = await db
    .deleteFrom('email_send_requesters')
    .where('window_started_at', '<=', dayAgo)
    .executeTakeFirst();
  const devices = await db
    .deleteFrom('email_send_devices')
    .where('window_started_at', '<=', dayAgo)
    .where('last_sent_at', '<=', cutoff)
    .executeTakeFirst();
  return Number(addresses.numDeletedRows) + Number(requesters.numDeletedRows) + Number(devices.numDeletedRows);
}
