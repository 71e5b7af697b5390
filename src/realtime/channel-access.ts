import type { Kysely } from 'kysely';
import { type SubscriptionQuestion, subscribable } from '../db/repositories/realtime-access.ts';
import type { Database } from '../db/schema.ts';

/** A subscribe check that met policy changes on every attempt: the client is asked to try again. */
export const SUBSCRIBE_ATTEMPTS = 3;

/** What the subscribe policies say of a subscription: allowed, refused, or still changing (ask again shortly). */
export type SubscribeDecision = 'allowed' | 'refused' | 'unsettled';

/**
 * Whether the caller may subscribe to `channel`: the subscribe policies decide, and nothing else
 * (realtime.subscribable, the same function the re-check of live subscriptions asks). `generation`
 * is bumped by every policy or channel change: when one came while the check ran, its re-check may
 * pass before the socket joins, so the check is asked again, at most SUBSCRIBE_ATTEMPTS times in all.
 */
export async function authorizeSubscribe(
  db: Kysely<Database>,
  question: SubscriptionQuestion,
  generation: () => number,
): Promise<SubscribeDecision> {
  for (let attempt = 1; attempt <= SUBSCRIBE_ATTEMPTS; attempt++) {
    const before = generation();
    const [allowed] = await subscribable(db, [question]);
    if (allowed !== true) return 'refused';
    if (before === generation()) return 'allowed';
  }
  return 'unsettled';
}
