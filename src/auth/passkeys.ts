// Passkeys (WebAuthn), with @simplewebauthn/server for the ceremonies: registration from a signed-in
// session, sign-in (a passkey with user verification is both factors: aal2), the second step of a
// session that owes one, and their management. Challenges live in the one-time code store.
import { randomBytes } from 'node:crypto';
import type { AuthenticationResponseJSON, RegistrationResponseJSON } from '@simplewebauthn/server';
import * as mfa from '../db/repositories/mfa.ts';
import * as store from '../db/repositories/passkeys.ts';
import * as sessions from '../db/repositories/sessions.ts';
import * as users from '../db/repositories/users.ts';
import { ApiError } from '../errors.ts';
import { secondFactorNotice } from '../mail/templates.ts';
import { type AuthDeps, type ClientInfo, sessionEnded } from './auth-context.ts';
import type { BackgroundMail } from './background-mail.ts';
import { type FactorCaller, type Factors, MAX_FACTORS } from './mfa/factors.ts';
import type { SecondStep } from './mfa/second-step.ts';
import { type OneTimeCodes, PASSKEY_CHALLENGE_TTL_MS } from './one-time-codes.ts';
import type { IssuedSession, SessionIssuer } from './session-issuer.ts';

/** The ceremonies' library, loaded at the first passkey operation (an idle service does not hold it). */
const webauthn = () => import('@simplewebauthn/server');

/** WebAuthn's bound on a credential id (bytes). */
const MAX_CREDENTIAL_ID_BYTES = 1023;
/** The transports WebAuthn names; the browser's list is a hint it does not sign, kept to these. */
const TRANSPORTS = new Set(['ble', 'cable', 'hybrid', 'internal', 'nfc', 'smart-card', 'usb']);

/** EdDSA, ES256, RS256: what authenticators offer (COSE algorithm ids). */
const ALGORITHMS = [-8, -7, -257];
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The caller of a ceremony made with an access token: its account and session. */
export interface PasskeyCaller extends FactorCaller {
  sessionId: string;
}

const refused = () => new ApiError('PASSKEY_REFUSED', 'The passkey did not sign in');
const registrationInvalid = (why: string) =>
  new ApiError('PASSKEY_REGISTRATION_INVALID', `The passkey could not be registered: ${why}; ask for new options`);
const passkeyNotFound = () => new ApiError('NOT_FOUND', 'No such passkey');

/** The WebAuthn user handle of an account: its id's 16 bytes (never its address). */
const userHandle = (userId: string) => Buffer.from(userId.replaceAll('-', ''), 'hex');

/** A passkey as the contract shows it. */
export function toApiPasskey(row: store.PasskeyRow) {
  return {
    id: row.id,
    friendlyName: row.friendly_name,
    createdAt: row.created_at.toISOString(),
    lastUsedAt: row.last_used_at?.toISOString() ?? null,
    backedUp: row.backed_up,
    transports: row.transports,
  };
}

const descriptor = (row: store.PasskeyRow) => ({ id: row.credential_id, transports: row.transports as never[] });

export function createPasskeys(
  deps: AuthDeps,
  issuer: SessionIssuer,
  codes: OneTimeCodes,
  mail: BackgroundMail,
  factors: Factors,
  secondStep: SecondStep,
) {
  const { db, clock, config, log } = deps;
  const rp = config.webauthn;

  async function registrationOptions(caller: PasskeyCaller) {
    factors.requireRecentProof(caller);
    const now = clock.now();
    if ((await mfa.countFactors(db, caller.userId, now)) >= MAX_FACTORS) {
      throw new ApiError('FACTOR_STATE', `An account has at most ${MAX_FACTORS} factors`);
    }
    const existing = await store.listPasskeys(db, caller.userId);
    const options = await (await webauthn()).generateRegistrationOptions({
      rpName: rp.rpName,
      rpID: rp.rpId,
      userName: caller.email,
      userID: userHandle(caller.userId),
      userDisplayName: caller.email,
      challenge: randomBytes(32),
      timeout: PASSKEY_CHALLENGE_TTL_MS,
      attestationType: 'none',
      excludeCredentials: existing.map(descriptor),
      authenticatorSelection: { residentKey: 'required', requireResidentKey: true, userVerification: 'required' },
      supportedAlgorithmIDs: ALGORITHMS,
    });
    await codes.storeRegistrationChallenge(
      { id: caller.userId, email: caller.email },
      caller.sessionId,
      options.challenge,
    );
    return options;
  }

  /**
   * Registers the passkey that answers the session's challenge. A passkey is a verified second
   * factor from the start: the account's first brings its recovery codes, raises the caller's
   * session to aal2 (a new session, answered) and ends the account's other sessions below aal2.
   */
  async function register(
    caller: PasskeyCaller,
    response: RegistrationResponseJSON,
    friendlyName: string | null,
    client: ClientInfo,
  ): Promise<{
    passkey: ReturnType<typeof toApiPasskey> & { lastUsedAt: null; recoveryCodes?: string[] };
    session: IssuedSession | undefined;
  }> {
    factors.requireRecentProof(caller);
    const challenge = await codes.takeRegistrationChallenge(caller.sessionId);
    if (challenge === undefined) throw registrationInvalid('this session has no live challenge');
    let info: NonNullable<
      Awaited<ReturnType<typeof import('@simplewebauthn/server').verifyRegistrationResponse>>['registrationInfo']
    >;
    try {
      const verified = await (await webauthn()).verifyRegistrationResponse({
        response,
        expectedChallenge: (c) => challenge.matches(c),
        expectedOrigin: [...rp.origins],
        expectedRPID: rp.rpId,
        requireUserPresence: true,
        requireUserVerification: true,
        supportedAlgorithmIDs: ALGORITHMS,
      });
      if (!verified.verified) throw new Error('not verified');
      info = verified.registrationInfo;
    } catch (err) {
      log.info({ err: (err as Error).message, userId: caller.userId }, 'passkey registration refused');
      throw registrationInvalid('the answer does not verify');
    }
    if (Buffer.from(info.credential.id, 'base64url').length > MAX_CREDENTIAL_ID_BYTES) {
      throw registrationInvalid(`a credential id has at most ${MAX_CREDENTIAL_ID_BYTES} bytes`);
    }
    const transports = [...new Set(info.credential.transports ?? [])].filter((t) => TRANSPORTS.has(t));
    const now = clock.now();
    const done = await db.transaction().execute(async (trx) => {
      const account = await mfa.lockAccountMfa(trx, caller.userId);
      if (account === undefined) throw sessionEnded();
      const session = await sessions.findSessionForShare(trx, caller.sessionId);
      if (session === undefined || session.revoked_at !== null) throw sessionEnded();
      // The account may have gained a factor since this session's token was issued.
      if (account.mfa_enabled && session.aal !== 'aal2') {
        throw new ApiError('MFA_REQUIRED', 'This account has a second factor: prove it before adding a passkey');
      }
      if ((await mfa.countFactors(trx, caller.userId, now)) >= MAX_FACTORS) {
        throw new ApiError('FACTOR_STATE', `An account has at most ${MAX_FACTORS} factors`);
      }
      const row = await store.insertPasskey(trx, {
        user_id: caller.userId,
        credential_id: info.credential.id,
        public_key: Buffer.from(info.credential.publicKey).toString('base64url'),
        counter: info.credential.counter,
        transports,
        device_type: info.credentialDeviceType,
        backed_up: info.credentialBackedUp,
        friendly_name: friendlyName,
        created_at: now,
      });
      if (row === undefined) throw registrationInvalid('this passkey is registered already');
      const added = await secondStep.factorAdded(trx, account, row.id, now, {
        kind: 'passkey',
        sessionId: caller.sessionId,
        client,
      });
      if (session.aal === 'aal2') return { row, ...added, email: account.email, session: undefined };
      // The account's first factor, made by this session (its sign-in, and the authenticator with
      // user verification just now): the session is raised to aal2, as a TOTP factor's first code
      // raises it, and every other one below aal2 has ended.
      const user = await users.findUserById(trx, caller.userId);
      if (user === undefined) throw sessionEnded();
      const raised = await issuer.stepUp(trx, user, session, 'passkey', client);
      return { row, ...added, ended: [...added.ended, ...raised.ended], email: account.email, session: raised.issued };
    });
    issuer.revoked(done.ended);
    mail.send(secondFactorNotice(done.email, 'passkey added'), undefined);
    const registered = { ...toApiPasskey(done.row), lastUsedAt: null };
    return {
      passkey: done.recoveryCodes === undefined ? registered : { ...registered, recoveryCodes: done.recoveryCodes },
      session: done.session,
    };
  }

  /**
   * Options for an assertion. With a caller (a session's access token), its account's passkeys and
   * a challenge bound to that session; otherwise a discoverable sign-in, the same for any address.
   */
  async function authenticationOptions(
    email: string | undefined,
    caller: { userId: string; sessionId: string } | undefined,
  ) {
    // An address picks nothing: every passkey is discoverable (registration requires it), and
    // listing an account's passkeys, or made-up ones in their place, would tell who has one by
    // their number and the length of their ids. The address is kept with the challenge only.
    const allow = caller === undefined ? [] : (await store.listPasskeys(db, caller.userId)).map(descriptor);
    const address = email?.toLowerCase();
    const options = await (await webauthn()).generateAuthenticationOptions({
      rpID: rp.rpId,
      allowCredentials: allow,
      challenge: randomBytes(32),
      timeout: PASSKEY_CHALLENGE_TTL_MS,
      userVerification: 'required',
    });
    const challengeId = await codes.storeAuthenticationChallenge(options.challenge, {
      sessionId: caller?.sessionId ?? null,
      email: address ?? '',
    });
    return { challengeId, options: { ...options, allowCredentials: options.allowCredentials ?? [] } };
  }

  /**
   * Checks an assertion against its challenge (taken: single use whatever the outcome) and the
   * passkey's key and counter. Without a caller it signs in (aal2); with one, the challenge must be
   * that session's and the passkey that account's, and the session is raised to aal2.
   */
  async function authenticate(
    challengeId: string,
    response: AuthenticationResponseJSON,
    caller: { userId: string; sessionId: string } | undefined,
    client: ClientInfo,
  ): Promise<IssuedSession> {
    const challenge = await codes.takeAuthenticationChallenge(challengeId);
    if (challenge === undefined || challenge.sessionId !== (caller?.sessionId ?? null)) throw refused();
    const passkey = await store.findByCredentialId(db, response.id);
    if (passkey === undefined || (caller !== undefined && passkey.user_id !== caller.userId)) throw refused();
    const handle = response.response.userHandle;
    if (handle !== undefined && handle !== userHandle(passkey.user_id).toString('base64url')) throw refused();
    let newCounter: number;
    try {
      const verified = await (await webauthn()).verifyAuthenticationResponse({
        response,
        expectedChallenge: (c) => challenge.matches(c),
        expectedOrigin: [...rp.origins],
        expectedRPID: rp.rpId,
        credential: {
          id: passkey.credential_id,
          publicKey: new Uint8Array(Buffer.from(passkey.public_key, 'base64url')),
          counter: Number(passkey.counter),
          transports: passkey.transports as never[],
        },
        requireUserVerification: true,
      });
      if (!verified.verified || !verified.authenticationInfo.userVerified) throw new Error('not verified');
      newCounter = verified.authenticationInfo.newCounter;
    } catch (err) {
      const message = (err as Error).message;
      if (/counter/i.test(message)) {
        log.warn(
          { passkeyId: passkey.id, userId: passkey.user_id, storedCounter: Number(passkey.counter) },
          'passkey assertion refused: its signature counter did not move forward (a cloned authenticator?)',
        );
      } else {
        log.info({ err: message, passkeyId: passkey.id }, 'passkey assertion refused');
      }
      await deps.audit.record(db, {
        type: caller === undefined ? 'sign_in' : 'mfa_verified',
        outcome: 'failure',
        method: 'passkey',
        userId: passkey.user_id,
        actorId: null,
        sessionId: caller?.sessionId,
        client,
        details: { passkeyId: passkey.id },
      });
      throw refused();
    }
    const used = { id: passkey.id, counter: Number(passkey.counter) };
    if (caller !== undefined) {
      return secondStep.raise(caller, client, 'passkey', async (trx, _account, _previous, now) => {
        if (!(await store.recordPasskeyUse(trx, used, newCounter, now))) throw refused();
        return {};
      });
    }
    return db.transaction().execute(async (trx) => {
      // The account's row first (as every change of its factors and sessions takes it): an
      // administrator disabling it, changing its role or removing its factors meanwhile either
      // commits before (and the account is read as it is now) or waits, then ends this session too.
      if ((await mfa.lockAccountMfa(trx, passkey.user_id)) === undefined) throw refused();
      const now = clock.now();
      if (!(await store.recordPasskeyUse(trx, used, newCounter, now))) throw refused();
      const user = await users.findUserById(trx, passkey.user_id);
      if (user === undefined || user.disabled_at !== null) throw refused();
      return issuer.start(user, client, 'passkey', trx, 'aal2');
    });
  }

  async function list(userId: string) {
    return (await store.listPasskeys(db, userId)).map(toApiPasskey);
  }

  async function rename(userId: string, passkeyId: string, friendlyName: string) {
    if (!UUID.test(passkeyId)) throw passkeyNotFound();
    const row = await store.renamePasskey(db, userId, passkeyId, friendlyName);
    if (row === undefined) throw passkeyNotFound();
    return toApiPasskey(row);
  }

  /** Removes a passkey as any factor is removed (factors.ts). */
  async function remove(caller: FactorCaller, passkeyId: string) {
    await factors.remove(caller, passkeyId, 'passkey');
  }

  return { registrationOptions, register, authenticationOptions, authenticate, list, rename, remove };
}

export type Passkeys = ReturnType<typeof createPasskeys>;
