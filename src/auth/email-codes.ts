import * as addressLimits from '../db/repositories/address-limits.ts';
import * as emailCodes from '../db/repositories/email-codes.ts';
import type { EmailCodePurpose } from '../db/schema.ts';
import { type AuthDeps, invalidOtp, MAX_CODE_ATTEMPTS_PER_DAY, MAX_CODE_FAILURES } from './auth-context.ts';
import { constantTimeEqual, hmacHex } from './crypto.ts';

/**
 * The 6-digit codes of password resets and passwordless sign-in: stored as an HMAC bound to their
 * purpose and address, checked with the rules of the verification codes.
 */
export function createEmailCodeChecks(deps: AuthDeps) {
  const { db, clock } = deps;

  /** The HMAC a code is stored as: keyed with the server's code key, bound to purpose and address. */
  const codeHmac = (purpose: EmailCodePurpose, email: string, code: string) =>
    hmacHex(deps.keys.otp, `${purpose}\n${email}\n${code}`);

  /**
   * A code submission for a (lower-cased) address. The code's attempt is taken and the address's
   * daily attempt counted before comparing (one writing statement, account or not), so that
   * concurrent guesses cannot share attempts; an attempt without an unused code writes one row
   * instead of the code's count, so the statements and writes are the same whether the address has
   * an unused code or not. Wrong, expired, used, voided and missing codes all throw the same
   * INVALID_OTP. Returns the code's row, not yet consumed.
   */
  async function check(purpose: EmailCodePurpose, email: string, code: string): Promise<emailCodes.EmailCodeRow> {
    const now = clock.now();
    const { attempts, row } = await db.transaction().execute(async (trx) => {
      const taken = await emailCodes.takeCodeAttempt(trx, email, purpose);
      await emailCodes.recordAttemptWithoutCode(trx, email, purpose, taken !== undefined, now);
      const againstLiveCode = taken !== undefined && taken.expires_at > now;
      return { attempts: await addressLimits.recordCodeAttempt(trx, email, now, againstLiveCode), row: taken };
    });
    const matches = constantTimeEqual(row?.code_hmac ?? '0'.repeat(64), codeHmac(purpose, email, code));
    const live =
      row !== undefined &&
      row.expires_at > now &&
      row.failed_attempts <= MAX_CODE_FAILURES &&
      attempts <= MAX_CODE_ATTEMPTS_PER_DAY;
    if (!matches || !live) throw invalidOtp();
    return row;
  }

  return { codeHmac, check };
}

export type EmailCodeChecks = ReturnType<typeof createEmailCodeChecks>;
