import { randomInt } from 'node:crypto';
import * as store from '../db/repositories/one-time-codes.ts';
import type { EmailCodePurpose, Executor, OneTimeCodePurpose } from '../db/schema.ts';
import { createAttemptBatches } from './attempt-batches.ts';
import {
  type AuthDeps,
  inSeconds,
  invalidOtp,
  MAX_CODE_ATTEMPTS_PER_DAY,
  MAX_CODE_FAILURES,
  sessionEnded,
} from './auth-context.ts';
import {
  constantTimeEqual,
  type DerivedKeys,
  hmacHex,
  newHexToken,
  newOpaqueToken,
  newOtpCode,
  sha256Hex,
} from './crypto.ts';

export type OneTimeCodeRow = store.OneTimeCodeRow;

/** A code and a link token, before they are stored (as an HMAC and a hash) and mailed. */
export interface NewCode {
  code: string;
  token: string;
  stored: store.StoredSecret;
}

/**
 * Verification codes issued before migration 0019 carry this prefix: their HMAC covers the address
 * and code only (`address:code`). They stop mattering once expired (emailOtpTtlSeconds after the upgrade).
 */
const ADDRESS_ONLY_LAYOUT = 'address:';

/**
 * The HMAC a 6-digit code is stored as: keyed with the server's code key, bound to its purpose and
 * (lower-cased) address, so that a code is worth nothing for another purpose or address.
 */
export const oneTimeCodeHmac = (keys: DerivedKeys, purpose: EmailCodePurpose, email: string, code: string) =>
  hmacHex(keys.otp, `${purpose}\n${email}\n${code}`);

/** How many recovery codes an account has after it verifies its first factor (or regenerates them). */
export const RECOVERY_CODE_COUNT = 10;
const RECOVERY_ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';

/** A recovery code: 12 characters of [a-z0-9] from the CSPRNG (62 bits), written in groups of four. */
function newRecoveryCode(): string {
  const chars = Array.from({ length: 12 }, () => RECOVERY_ALPHABET[randomInt(RECOVERY_ALPHABET.length)]).join('');
  return `${chars.slice(0, 4)}-${chars.slice(4, 8)}-${chars.slice(8)}`;
}

/** A typed recovery code as stored: lower case, without spaces or dashes; undefined when it cannot be one. */
function normalizeRecoveryCode(input: string): string | undefined {
  const compact = input.toLowerCase().replace(/[\s-]/g, '');
  return /^[a-z0-9]{12}$/.test(compact) ? compact : undefined;
}

/** The HMAC a recovery code is stored as, bound to its account. */
const recoveryCodeHmac = (keys: DerivedKeys, userId: string, normalized: string) =>
  hmacHex(keys.otp, `recovery\n${userId}\n${normalized}`);

/** How long a WebAuthn challenge works. */
export const PASSKEY_CHALLENGE_TTL_MS = 5 * 60_000;

/** A WebAuthn challenge taken from the store: whether a challenge is the one issued, and its session. */
export interface TakenChallenge {
  matches(challenge: string): boolean;
  sessionId: string | null;
}

/**
 * The one-time code store: makes codes and tokens, stores them (through the purpose's issuing
 * statement), and checks and consumes them, with the attempt rules every purpose shares.
 */
export function createOneTimeCodes(deps: AuthDeps) {
  const { db, clock, config, keys } = deps;

  /** What `stored` must equal for `code`: the HMAC of the one layout, or of the old one for old rows. */
  function expectedHmac(purpose: EmailCodePurpose, email: string, code: string, stored: string): string {
    if (purpose === 'verification' && stored.startsWith(ADDRESS_ONLY_LAYOUT)) {
      return ADDRESS_ONLY_LAYOUT + hmacHex(keys.otp, `${email}:${code}`);
    }
    return oneTimeCodeHmac(keys, purpose, email, code);
  }

  /**
   * A fresh code and link token for `purpose` at the (lower-cased) address; `unusable` ones are
   * expired from the start (they are never mailed).
   */
  function next(purpose: EmailCodePurpose, email: string, now: Date, options: { unusable?: boolean } = {}): NewCode {
    const code = newOtpCode();
    const token = newHexToken();
    const expiry = (seconds: number) => (options.unusable ? now : inSeconds(now, seconds));
    return {
      code,
      token,
      stored: {
        codeHmac: oneTimeCodeHmac(keys, purpose, email, code),
        codeExpiresAt: expiry(config.emailOtpTtlSeconds),
        tokenHash: sha256Hex(token),
        tokenExpiresAt: expiry(config.emailLinkTtlSeconds),
      },
    };
  }

  /** Guesses at one address and purpose arriving together share one counting statement. */
  const attempts = createAttemptBatches(async (key, size) => {
    const [purpose, email] = JSON.parse(key) as [EmailCodePurpose, string];
    const now = clock.now();
    return { now, ...(await store.recordCodeAttempt(db, purpose, email, now, size)) };
  });

  /**
   * A code submission for a (lower-cased) address. The code's attempt is taken and the address's
   * daily attempt counted (over every purpose) before comparing, in one statement that commits
   * whatever the answer, so that concurrent guesses cannot share attempts (guesses at one address
   * that arrive together are counted by one statement, each with its own attempt number: see
   * attempt-batches.ts); an attempt without an unused code writes one row instead of the code's
   * count, so the statement and its writes are the same whether the address has an account or an
   * unused code or not. The code is compared in constant time. Wrong, expired, used, voided and
   * missing codes all throw the same INVALID_OTP. Returns the code's row, not yet consumed.
   */
  async function check(purpose: EmailCodePurpose, email: string, code: string): Promise<OneTimeCodeRow> {
    const { result, size, index } = await attempts.submit(JSON.stringify([purpose, email]));
    const { now, row, addressAttempts } = result;
    // This guess's attempt numbers: those before it in the batch were counted first.
    const before = size - 1 - index;
    const failedAttempts = (row?.failed_attempts ?? 0) - before;
    const counted = row?.code_expires_at != null && row.code_expires_at > now;
    const attemptsToday = addressAttempts - (counted ? before : 0);
    const stored = row?.code_hmac ?? '0'.repeat(64);
    const matches = constantTimeEqual(stored, expectedHmac(purpose, email, code, stored));
    const live = counted && failedAttempts <= MAX_CODE_FAILURES && attemptsToday <= MAX_CODE_ATTEMPTS_PER_DAY;
    if (!matches || !live || row === undefined) throw invalidOtp();
    return { ...row, failed_attempts: failedAttempts };
  }

  /**
   * A link token of `purpose`, unused and unexpired (failed code attempts do not void it: guessing
   * codes must not lock the owner out). Throws INVALID_OTP otherwise. Not consumed.
   */
  async function checkToken(purpose: OneTimeCodePurpose, token: string): Promise<OneTimeCodeRow> {
    const row = await store.findByTokenHash(db, purpose, sha256Hex(token.toLowerCase()));
    const now = clock.now();
    if (row?.token_expires_at == null || row.consumed_at !== null || row.token_expires_at <= now) throw invalidOtp();
    return row;
  }

  /**
   * Consumes a checked code or token in `trx` (one atomic UPDATE: of concurrent callers exactly
   * one gets the row). A row of an account disabled since is refused like a used one. Throws
   * INVALID_OTP when the row is no longer there to consume.
   */
  async function consume(trx: Executor, row: OneTimeCodeRow, now: Date): Promise<OneTimeCodeRow> {
    const consumed = await store.consume(trx, row, now);
    if (consumed === undefined) throw invalidOtp();
    return consumed;
  }

  /** Takes (deletes) a live token of `purpose` in `trx`: single use. Returns its account, if any. */
  async function takeToken(trx: Executor, purpose: OneTimeCodePurpose, token: string, now: Date) {
    const taken = await store.takeToken(trx, purpose, sha256Hex(token.toLowerCase()), now);
    return taken?.user_id ?? undefined;
  }

  /** New recovery codes for the account (replacing its earlier ones, in `trx`): shown once, stored as HMACs. */
  async function issueRecoveryCodes(trx: Executor, account: { id: string; email: string }, now: Date) {
    const codes = Array.from({ length: RECOVERY_CODE_COUNT }, newRecoveryCode);
    const hmacs = codes.map((code) => recoveryCodeHmac(keys, account.id, normalizeRecoveryCode(code) as string));
    await store.replaceRecoveryCodes(trx, account, hmacs, now);
    return codes;
  }

  /** Uses one of the account's unused recovery codes (atomic: one of two concurrent uses succeeds). */
  async function useRecoveryCode(trx: Executor, userId: string, input: string, now: Date): Promise<boolean> {
    const normalized = normalizeRecoveryCode(input);
    // A malformed code costs the same statement as a wrong one.
    const hmac = recoveryCodeHmac(keys, userId, normalized ?? '-');
    return store.useRecoveryCode(trx, userId, hmac, now);
  }

  /** A WebAuthn challenge (base64url) as stored: an HMAC, so that the table alone answers no ceremony. */
  const challengeHmac = (challenge: string) => hmacHex(keys.otp, `webauthn-challenge\n${challenge}`);

  /** The check of a taken challenge row: unexpired and equal, compared in constant time. */
  function taken(
    row: { code_hmac: string | null; code_expires_at: Date | null; session_id?: string | null } | undefined,
  ): TakenChallenge | undefined {
    if (row?.code_hmac == null || row.code_expires_at === null || row.code_expires_at <= clock.now()) return undefined;
    const stored = row.code_hmac;
    return { matches: (c) => constantTimeEqual(challengeHmac(c), stored), sessionId: row.session_id ?? null };
  }

  /** Keeps a registration challenge for the session (replacing its earlier one). */
  async function storeRegistrationChallenge(
    account: { id: string; email: string },
    sessionId: string,
    challenge: string,
  ): Promise<void> {
    const now = clock.now();
    const expiresAt = new Date(now.getTime() + PASSKEY_CHALLENGE_TTL_MS);
    const stored = await db
      .transaction()
      .execute((trx) =>
        store.replaceRegistrationChallenge(
          trx,
          account,
          { challengeHmac: challengeHmac(challenge), expiresAt, sessionId },
          now,
        ),
      );
    if (!stored) throw sessionEnded();
  }

  /** Keeps an authentication challenge; returns the id the client sends back with the answer. */
  async function storeAuthenticationChallenge(
    challenge: string,
    binding: { sessionId: string | null; email: string },
  ): Promise<string> {
    const now = clock.now();
    const id = newOpaqueToken();
    const stored = await store.insertAuthenticationChallenge(
      db,
      {
        idHash: sha256Hex(id),
        email: binding.email,
        sessionId: binding.sessionId,
        challengeHmac: challengeHmac(challenge),
        expiresAt: new Date(now.getTime() + PASSKEY_CHALLENGE_TTL_MS),
      },
      now,
    );
    if (!stored) throw sessionEnded();
    return id;
  }

  return {
    next,
    check,
    storeRegistrationChallenge,
    /** Takes the session's registration challenge (single use, whatever follows); undefined when none is live. */
    takeRegistrationChallenge: async (sessionId: string) => taken(await store.takeRegistrationChallenge(db, sessionId)),
    storeAuthenticationChallenge,
    /** Takes an authentication challenge by its id (single use, whatever follows); undefined when none is live. */
    takeAuthenticationChallenge: async (challengeId: string) =>
      taken(await store.takeAuthenticationChallenge(db, sha256Hex(challengeId))),
    issueRecoveryCodes,
    useRecoveryCode,
    /** Removes the account's recovery codes (its last verified factor went). */
    removeRecoveryCodes: (trx: Executor, account: { id: string; email: string }, now: Date) =>
      store.replaceRecoveryCodes(trx, account, [], now),
    checkToken,
    consume,
    takeToken,
    /** Issuing, per purpose (each decides who may get one, by the same statements for every address). */
    recordSignUp: store.recordSignUp,
    claimAndReissueVerification: store.claimAndReissueVerification,
    issueSignInCode: store.issueSignInCode,
    issueResetCode: store.issueResetCode,
    insertToken: store.insertToken,
  };
}

export type OneTimeCodes = ReturnType<typeof createOneTimeCodes>;
