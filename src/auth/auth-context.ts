import { isIPv6 } from 'node:net';
import type { FastifyBaseLogger } from 'fastify';
import type { Kysely } from 'kysely';
import type { AuditTrail } from '../audit/audit-trail.ts';
import type { Clock } from '../clock.ts';
import type { Config } from '../config.ts';
import * as addressLimits from '../db/repositories/address-limits.ts';
import type { ClientType, Database, Executor } from '../db/schema.ts';
import { ApiError } from '../errors.ts';
import type { Mailer } from '../mail/mailer.ts';
import type { AccessTokenSubject } from './access-token.ts';
import type { DerivedKeys } from './crypto.ts';
import { deviceAccount, deviceSignals, knownDevice } from './known-device.ts';
import type { SignInThrottle } from './sign-in-throttle.ts';

/** Failed code attempts after which a verification is void. */
export const MAX_CODE_FAILURES = 5;
/**
 * Emails to one address: the minimum gap between two, how many it gets per day, and how many of
 * those one requester (client IP) can cause; beyond them, one reset or sign-in email per 15
 * minutes (the reserve); and the known devices' own budget (5 a day each, 10 for all), so that
 * others cannot keep the owner from a way back in. At most 10 + 96 + 10 = 116 emails a day.
 */
export const EMAIL_LIMITS = {
  cooldownSeconds: 60,
  perDay: 10,
  perRequesterPerDay: 3,
  reservePeriodSeconds: 15 * 60,
  perKnownDevicePerDay: 5,
  knownDevicesPerDay: 10,
};

/** Why an email was not sent when the address's limits refused it (for the development log only). */
export const EMAIL_LIMITED = `the address got an email less than ${EMAIL_LIMITS.cooldownSeconds} s ago, or has had its ${EMAIL_LIMITS.perDay} emails for the day (${EMAIL_LIMITS.perRequesterPerDay} of them from one client address) and no reserve is left (one reset or sign-in email per ${EMAIL_LIMITS.reservePeriodSeconds / 60} minutes, and a known device's own ${EMAIL_LIMITS.perKnownDevicePerDay} a day)`;
/** Code submissions one address takes per day, over all its codes (the emails' worth of attempts). */
export const MAX_CODE_ATTEMPTS_PER_DAY = MAX_CODE_FAILURES * EMAIL_LIMITS.perDay;

/** Outcomes the auth flows report as they happen (the metrics count them). */
export interface AuthEvents {
  /** A sign-in that opened a session, or was refused (wrong credentials, an unverified address). */
  signIn(result: 'ok' | 'failed'): void;
  /** An email verification (code or link) that opened a session, or was refused (INVALID_OTP). */
  emailVerification(result: 'ok' | 'failed'): void;
  /** A rotated refresh token was presented again: its session was ended. */
  refreshTokenReused(): void;
  /** A sign-in refused by the per-address back-off (429) before the password was looked at. */
  signInThrottled(): void;
}

/** What the auth flows are built on. */
export interface AuthDeps {
  db: Kysely<Database>;
  /** Reads that tolerate a little lag (public profiles): the replica's when one is configured; else `db`. */
  read?: <T>(work: (db: Kysely<Database>) => Promise<T>) => Promise<T>;
  config: Readonly<Config>;
  clock: Clock;
  mailer: Mailer;
  keys: DerivedKeys;
  signAccessToken(claims: AccessTokenSubject): string;
  /** Where revocations made here are recorded at once (other instances learn of them by notification). */
  revocations: { add(sessionIds: readonly string[]): void };
  /** Per-address back-off after failed sign-ins. */
  signInThrottle: SignInThrottle;
  log: FastifyBaseLogger;
  events?: AuthEvents | undefined;
  /** The audit log and the webhook outbox: every account event is recorded through it. */
  audit: AuditTrail;
}

export interface ClientInfo {
  clientType: ClientType;
  userAgent: string | null;
  ip: string | null;
  /** The device signals the request carries (the device cookie, the X-Device-Token header), unchecked. */
  devices?: readonly (string | undefined)[] | undefined;
}

/**
 * The id of the known device among the client's signals for `account` (its id and device epoch; undefined when
 * none was issued for it, or it has expired). See known-device.ts.
 */
export function knownDeviceFor(
  keys: DerivedKeys,
  client: Pick<ClientInfo, 'devices'>,
  account: { id: string; device_epoch: number } | undefined,
  now: Date,
): string | undefined {
  return knownDevice(keys.device, deviceSignals(client.devices ?? [], now), account && deviceAccount(account));
}

/** Whether the client sent a device signal worth checking against an account (well-formed, unexpired). */
export function offersDevice(client: Pick<ClientInfo, 'devices'>, now: Date): boolean {
  return deviceSignals(client.devices ?? [], now).length > 0;
}

/**
 * The known device of the account at `email` among the client's signals, for the email flows that
 * have an address rather than an account (the account is read only when a signal was offered).
 */
export async function knownDeviceOfAddress(
  db: Executor,
  keys: DerivedKeys,
  client: Pick<ClientInfo, 'devices'>,
  email: string,
  now: Date,
): Promise<string | undefined> {
  if (!offersDevice(client, now)) return undefined;
  return knownDeviceFor(keys, client, await addressLimits.accountIdOf(db, email), now);
}

/**
 * Who asked, for per-requester limits: the client's IP, or for IPv6 its /64 (one subscriber's
 * network: every address in it counts as one requester).
 */
export function requesterOf(client: Pick<ClientInfo, 'ip'>): string {
  const ip = client.ip ?? 'unknown';
  if (isIPv6(ip) && !ip.startsWith('::ffff:')) {
    const [head = '', tail = ''] = ip.split('::');
    const left = head === '' ? [] : head.split(':');
    const right = tail === '' ? [] : tail.split(':');
    const groups = ip.includes('::') ? [...left, ...Array(8 - left.length - right.length).fill('0'), ...right] : left;
    return `${groups
      .slice(0, 4)
      .map((g) => g.replace(/^0+(?=.)/, '').toLowerCase())
      .join(':')}::/64`;
  }
  return ip;
}

export const inSeconds = (now: Date, seconds: number) => new Date(now.getTime() + seconds * 1000);

export const invalidOtp = () => new ApiError('INVALID_OTP', 'The code or link is invalid or has expired');
export const invalidCredentials = () => new ApiError('INVALID_CREDENTIALS', 'Email or password is incorrect');
/** The caller's session ended (found so under a lock, after its token was verified). */
export const sessionEnded = () => new ApiError('SESSION_REVOKED', 'This session has ended; sign in again');

/**
 * A refused sign-in in the audit log, on its own (nothing else is written). `userId` is the
 * account at the address when there is one; the address itself is not kept: what was typed into
 * it may be a password.
 */
export function recordFailedSignIn(
  deps: Pick<AuthDeps, 'db' | 'audit'>,
  userId: string | null,
  method: 'password' | 'otp' | 'passkey' | 'totp' | 'recovery_code',
  client: Pick<ClientInfo, 'ip' | 'userAgent'>,
): Promise<void> {
  return deps.audit.record(deps.db, { type: 'sign_in', outcome: 'failure', method, userId, actorId: null, client });
}
