import type { Transaction } from 'kysely';
import type { AuditTrail } from '../audit/audit-trail.ts';
import * as accounts from '../db/repositories/mailbox-accounts.ts';
import * as oneTimeCodes from '../db/repositories/one-time-codes.ts';
import * as sessions from '../db/repositories/sessions.ts';
import type { Database } from '../db/schema.ts';
import { type MailboxProof, unprovenPasswordRemovedNotice } from '../mail/templates.ts';
import type { BackgroundMail } from './background-mail.ts';
import type { SessionIssuer } from './session-issuer.ts';

// A sign-up's password becomes the account's when the address is verified, but a verification
// proves the mailbox, not who chose the password: an attacker can sign up with someone's address
// and wait for its owner to confirm it. A verification that carries the binding of the sign-up
// that chose the password (sign-up-binding.ts) proves both; any other marks the password unproven
// (users.password_unproven_since). An unproven password still signs in, but the first time the
// mailbox's owner proves the mailbox again (a sign-in code, a provider vouching for the address,
// a reset), it goes, with every session and provider identity added while it was there.

/** What a removal did, to be made known once the transaction has committed. */
export interface UnprovenPasswordRemoval {
  email: string;
  proof: MailboxProof;
  unlinked: string[];
  ended: string[];
}

/** Removing unproven passwords when the mailbox is proven again. */
export function createUnprovenPasswords(
  issuer: Pick<SessionIssuer, 'revoked'>,
  mail: Pick<BackgroundMail, 'send'>,
  audit: AuditTrail,
) {
  return {
    /**
     * In `trx`, with the account's row locked (FOR UPDATE): when its password is unproven, removes
     * it, unlinks every provider identity, ends every session (all of them came after the
     * verification that left it unproven) and deletes its verification codes and links (so that
     * no later one can bring a sign-up's password back). Undefined, and nothing changed, for any
     * other account.
     */
    async removeOnProof(
      trx: Transaction<Database>,
      account: { id: string; email: string; password_unproven_since: Date | null },
      proof: MailboxProof,
      now: Date,
    ): Promise<UnprovenPasswordRemoval | undefined> {
      if (account.password_unproven_since === null) return undefined;
      const unlinked = await accounts.removeUnprovenPassword(trx, account.id);
      await oneTimeCodes.deleteAccountCodes(trx, account, ['verification']);
      const ended = await sessions.revokeUserSessions(trx, account.id, now);
      const event = { userId: account.id, actorId: null, email: account.email };
      await audit.record(trx, { ...event, type: 'password_removed', details: { proof } });
      for (const provider of unlinked) {
        await audit.record(trx, { ...event, type: 'identity_unlinked', method: provider, details: { provider } });
      }
      await audit.recordSessionsEnded(trx, { ...event, sessionIds: ended, by: 'mailbox_proof' });
      return { email: account.email, proof, unlinked, ended };
    },

    /** After the commit: the ended sessions refused everywhere, and the owner told in one email. */
    announce(removal: UnprovenPasswordRemoval | undefined): void {
      if (removal === undefined) return;
      issuer.revoked(removal.ended);
      mail.send(unprovenPasswordRemovedNotice(removal.email, removal.proof, removal.unlinked), undefined);
    },
  };
}

export type UnprovenPasswords = ReturnType<typeof createUnprovenPasswords>;
