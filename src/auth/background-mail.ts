import type { FastifyBaseLogger } from 'fastify';
import type { Kysely } from 'kysely';
import { type EmailClaim, releaseEmailSend } from '../db/repositories/address-limits.ts';
import type { Database } from '../db/schema.ts';
import type { Mailer, MailMessage } from '../mail/mailer.ts';

/** The claim an email was sent under (given back when sending fails). */
export interface SendClaim {
  requester: string;
  claimedAt: Date;
  /** The budget it came from (the address's daily budget when not given). */
  claim?: EmailClaim | undefined;
}

/**
 * Mail goes out after the answer is decided and never delays it, so that timing says nothing about
 * whether an address exists. Sends in flight are awaited at shutdown; a failed one gives its claim
 * back (so the person can ask again at once) and is logged without secrets.
 */
export function createBackgroundMail(mailer: Mailer, db: Kysely<Database>, log: FastifyBaseLogger) {
  const pending = new Set<Promise<void>>();
  return {
    /** Sends `message`; `claim` is the email limits' claim it went out under (none for security notices). */
    send(message: MailMessage, claim: SendClaim | undefined): void {
      const sending: Promise<void> = mailer
        .send(message)
        .catch(async (err: Error) => {
          log.error({ err: { message: err.message }, to: message.to }, 'sending email failed');
          if (claim === undefined) return;
          await releaseEmailSend(db, message.to, claim.requester, claim.claimedAt, claim.claim).catch(() => {});
        })
        .finally(() => pending.delete(sending));
      pending.add(sending);
    },
    /** Waits for the emails still being sent (called when the app closes). */
    async drain(): Promise<void> {
      await Promise.allSettled([...pending]);
    },
  };
}

export type BackgroundMail = ReturnType<typeof createBackgroundMail>;
