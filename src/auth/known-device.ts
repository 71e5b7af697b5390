import { randomBytes } from 'node:crypto';
import { constantTimeEqual, hmacHex } from './crypto.ts';

/**
 * Known devices (OWASP's device cookie): a signal, issued when a session opens, that this device
 * has signed in to this account before. Web clients keep it in the HttpOnly cookie DEVICE_COOKIE,
 * mobile and desktop clients get it as `deviceToken` and send it back in the DEVICE_HEADER header.
 *
 * The value is `d1.<device id>.<expiry, unix seconds>.<HMAC>`, the HMAC (with the `device` key of
 * deriveKeys) binding the random device id and the expiry to the account's id: the id is not in
 * the value, so the signal counts only for the account it was issued for, and says nothing to
 * anyone who reads it. A known device has its own email budget (address-limits.ts) and its own
 * sign-in back-off (sign-in-throttle.ts), so that strangers can neither use up the owner's emails
 * nor hold the owner's sign-ins back.
 */
export const DEVICE_COOKIE = 'device_id';
/** The header mobile and desktop clients send their deviceToken in (lower-cased, as Node gives headers). */
export const DEVICE_HEADER = 'x-device-token';
/** How long a device signal stays valid (and the cookie's Max-Age): a year from the last session it opened. */
export const DEVICE_TTL_SECONDS = 365 * 24 * 60 * 60;

const VERSION = 'd1';
const SIGNAL = /^d1\.([A-Za-z0-9_-]{22})\.(\d{1,12})\.([0-9a-f]{64})$/;

/** A device signal's parts, before its HMAC is checked against an account. */
export interface DeviceSignal {
  deviceId: string;
  expiresAt: number;
  mac: string;
}

const macOf = (key: Buffer, deviceId: string, expiresAt: number, userId: string) =>
  hmacHex(key, `${VERSION}:${deviceId}:${expiresAt}:${userId}`);

/** A fresh random device id (128 bits, base64url). */
export function newDeviceId(): string {
  return randomBytes(16).toString('base64url');
}

/** The signal for `deviceId` on the account `userId`, valid DEVICE_TTL_SECONDS from `now`. */
export function signDevice(key: Buffer, deviceId: string, userId: string, now: Date): string {
  const expiresAt = Math.floor(now.getTime() / 1000) + DEVICE_TTL_SECONDS;
  return `${VERSION}.${deviceId}.${expiresAt}.${macOf(key, deviceId, expiresAt, userId)}`;
}

/** The parts of a well-formed, unexpired signal (its HMAC not checked yet); undefined otherwise. */
export function parseDevice(value: string | undefined, now: Date): DeviceSignal | undefined {
  if (value === undefined) return undefined;
  const match = SIGNAL.exec(value);
  if (match === null) return undefined;
  const [, deviceId = '', expiry = '', mac = ''] = match;
  const expiresAt = Number(expiry);
  if (expiresAt * 1000 <= now.getTime()) return undefined;
  return { deviceId, expiresAt, mac };
}

/** The well-formed, unexpired signals among the values a request carries (its cookie and its header). */
export function deviceSignals(values: readonly (string | undefined)[], now: Date): DeviceSignal[] {
  return values.flatMap((value) => parseDevice(value, now) ?? []);
}

/**
 * What a device signal is bound to: the account's id and its device epoch, which goes up whenever
 * the account's password is removed, reset or changed, so that the devices known before (perhaps
 * someone else's) are known no more.
 */
export function deviceAccount(user: { id: string; device_epoch: number }): string {
  return `${user.id}.${user.device_epoch}`;
}

/** The id of the first of `signals` that was issued for the account `userId`; undefined when none was. */
export function knownDevice(key: Buffer, signals: readonly DeviceSignal[], userId: string | undefined) {
  if (userId === undefined) return undefined;
  return signals.find((s) => constantTimeEqual(s.mac, macOf(key, s.deviceId, s.expiresAt, userId)))?.deviceId;
}
