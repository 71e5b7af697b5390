import { sql } from 'kysely';
import type { Executor } from '../schema.ts';

const DAY_MS = 86_400_000;

/** The limits on emails to one address. */
export interface EmailLimits {
  /** Minimum gap between two emails to one address. */
  cooldownSeconds: number;
  /** Emails one address gets per day. */
  perDay: number;
  /** Of those, how many one requester (client IP) can cause. */
  perRequesterPerDay: number;
}

/**
 * Claims the right to send an email to an address for `requester`: false while the cooldown runs,
 * once the address's daily cap is reached, or once this requester has used its share of that cap
 * (each email resets the code's attempts, so the cap also bounds the guesses per day). Works the
 * same for every address, with or without an account: two statements, both writing. Run it in a
 * transaction.
 */
export async function claimEmailSend(
  db: Executor,
  email: string,
  requester: string,
  now: Date,
  limits: EmailLimits,
): Promise<boolean> {
  const cutoff = new Date(now.getTime() - limits.cooldownSeconds * 1000);
  const dayAgo = new Date(now.getTime() - DAY_MS);
  const claimed = await sql<{ email: string }>`
    insert into email_send_log as l (email, last_sent_at, window_started_at, sent_in_window)
    values (${email}, ${now}, ${now}, 1)
    on conflict (email) do update set
      last_sent_at = excluded.last_sent_at,
      window_started_at = case when l.window_started_at <= ${dayAgo} then excluded.last_sent_at else l.window_started_at end,
      sent_in_window = case when l.window_started_at <= ${dayAgo} then 1 else l.sent_in_window + 1 end,
      code_attempts_in_window = case when l.window_started_at <= ${dayAgo} then 0 else l.code_attempts_in_window end
    where l.last_sent_at <= ${cutoff}
      and (l.window_started_at <= ${dayAgo} or l.sent_in_window < ${limits.perDay})
      and coalesce((
        select r.sent_in_window from email_send_requesters r
        where r.email = ${email} and r.requester = ${requester} and r.window_started_at > ${dayAgo}
      ), 0) < ${limits.perRequesterPerDay}
    returning email
  `.execute(db);
  const sent = claimed.rows.length === 1 ? 1 : 0;
  await sql`
    insert into email_send_requesters as r (email, requester, window_started_at, sent_in_window)
    values (${email}, ${requester}, ${now}, ${sent})
    on conflict (email, requester) do update set
      window_started_at = case when r.window_started_at <= ${dayAgo} then excluded.window_started_at else r.window_started_at end,
      sent_in_window = case when r.window_started_at <= ${dayAgo} then ${sent} else r.sent_in_window + ${sent} end
  `.execute(db);
  return sent === 1;
}

/** Gives back a claim whose email could not be sent, so that the person can ask again at once. */
export async function releaseEmailSend(db: Executor, email: string, requester: string, claimedAt: Date): Promise<void> {
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

/**
 * Counts a code submitted for an address (in one writing statement whether or not it has an account
 * or a code) and returns how many it has had in the current daily window. Only guesses at a live
 * code count (`againstLiveCode`): guesses where there is none cannot succeed, and counting them
 * let a stranger use up the address's allowance and so refuse the owner's next right code.
 */
export async function recordCodeAttempt(
  db: Executor,
  email: string,
  now: Date,
  againstLiveCode: boolean,
): Promise<number> {
  const counted = againstLiveCode ? 1 : 0;
  const dayAgo = new Date(now.getTime() - DAY_MS);
  const result = await sql<{ attempts: number }>`
    insert into email_send_log as l (email, last_sent_at, window_started_at, sent_in_window, code_attempts_in_window)
    values (${email}, to_timestamp(0), ${now}, 0, ${counted})
    on conflict (email) do update set
      window_started_at = case when l.window_started_at <= ${dayAgo} then excluded.window_started_at else l.window_started_at end,
      sent_in_window = case when l.window_started_at <= ${dayAgo} then 0 else l.sent_in_window end,
      code_attempts_in_window = case when l.window_started_at <= ${dayAgo} then ${counted}
        else l.code_attempts_in_window + ${counted} end
    returning code_attempts_in_window as attempts
  `.execute(db);
  return Number(result.rows[0]?.attempts ?? 0);
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
  return Number(addresses.numDeletedRows) + Number(requesters.numDeletedRows);
}
