import {
  createCipheriv,
  createDecipheriv,
  createHash,
  createHmac,
  hkdfSync,
  randomBytes,
  randomInt,
  scrypt,
  timingSafeEqual,
} from 'node:crypto';
import { queuedHash } from './password-hashing.ts';

/** Keys derived from the one server secret, one per purpose, so that no value can pass for another. */
export interface DerivedKeys {
  otp: Buffer;
  csrf: Buffer;
  /** Derives a refresh token's successor from it (the successor is reproducible within the reuse interval). */
  refresh: Buffer;
  /** Pseudonymises the end-user ids sent to the embeddings provider. */
  endUser: Buffer;
  /** Signs known-device signals (the device cookie and token, known-device.ts). */
  device: Buffer;
  /** Seals the private halves of the signing keys at rest (signing-keys.ts). */
  signingKeys: Buffer;
  /** Seals the TOTP secrets of second factors at rest (mfa/totp.ts). */
  mfa: Buffer;
}

export function deriveKeys(secret: string): DerivedKeys {
  const derive = (purpose: string) => Buffer.from(hkdfSync('sha256', secret, 'accounts-service', purpose, 32));
  return {
    otp: derive('email-otp'),
    csrf: derive('csrf'),
    refresh: derive('refresh-token'),
    endUser: derive('embeddings-end-user'),
    device: derive('known-device'),
    signingKeys: derive('signing-key-sealing'),
    mfa: derive('mfa-factor-sealing'),
  };
}

const SEALED_PREFIX = 'v1.';

/**
 * Encrypts a secret for storage (AES-256-GCM, a random 96-bit IV): `v1.` and base64url of IV, tag
 * and ciphertext. `context` (a key id) is authenticated with it, so that a sealed value moved to
 * another row does not open.
 */
export function seal(key: Buffer, plaintext: string, context: string): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  cipher.setAAD(Buffer.from(context));
  const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  return SEALED_PREFIX + Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64url');
}

/** The secret `seal` sealed under the same key and context; throws when either differs or the value was altered. */
export function unseal(key: Buffer, sealed: string, context: string): string {
  if (!sealed.startsWith(SEALED_PREFIX)) throw new Error('not a sealed value');
  const raw = Buffer.from(sealed.slice(SEALED_PREFIX.length), 'base64url');
  if (raw.length < 28) throw new Error('not a sealed value');
  // The whole 16-byte tag, always: GCM would accept a shortened one.
  const decipher = createDecipheriv('aes-256-gcm', key, raw.subarray(0, 12), { authTagLength: 16 });
  decipher.setAAD(Buffer.from(context));
  decipher.setAuthTag(raw.subarray(12, 28));
  return Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString('utf8');
}

/** A 6-digit code from the CSPRNG, leading zeros kept. */
export function newOtpCode(): string {
  return String(randomInt(0, 1_000_000)).padStart(6, '0');
}

/** 32 random bytes as 64 lowercase hex characters (magic-link tokens). */
export function newHexToken(): string {
  return randomBytes(32).toString('hex');
}

/** 32 random bytes, base64url (refresh tokens). */
export function newOpaqueToken(): string {
  return randomBytes(32).toString('base64url');
}

export function sha256Hex(value: string): string {
  return createHash('sha256').update(value).digest('hex');
}

export function hmacHex(key: Buffer, value: string): string {
  return createHmac('sha256', key).update(value).digest('hex');
}

/** Equality of two strings in time that depends only on their lengths. */
export function constantTimeEqual(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  if (x.length !== y.length) {
    timingSafeEqual(x, x);
    return false;
  }
  return timingSafeEqual(x, y);
}

// scrypt with N=2^15, r=8, p=1 (32 MiB per hash), 16-byte salt, 32-byte key: OWASP's minimum
// parameters for scrypt. Stored as scrypt$N$r$p$salt$key so that parameters can change later.
const SCRYPT = { N: 2 ** 15, r: 8, p: 1, keyLength: 32, maxmem: 64 * 1024 * 1024 };

/** One scrypt run, in its turn in the hash queue of the request it serves (password-hashing.ts). */
function scryptAsync(password: string, salt: Buffer, N: number, r: number, p: number, keyLength: number) {
  return queuedHash(
    () =>
      new Promise<Buffer>((resolve, reject) =>
        scrypt(password, salt, keyLength, { N, r, p, maxmem: SCRYPT.maxmem }, (err, key) =>
          err ? reject(err) : resolve(key),
        ),
      ),
  );
}

/**
 * A memory-hard hash of a password with its own random salt. During a request it waits its turn in
 * the instance's hash queue, and throws 503 SERVICE_UNAVAILABLE when that queue has no place.
 */
export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await scryptAsync(password, salt, SCRYPT.N, SCRYPT.r, SCRYPT.p, SCRYPT.keyLength);
  return `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$${salt.toString('base64url')}$${key.toString('base64url')}`;
}

/**
 * Checks a password against a stored hash in constant time; a malformed hash never matches. Queued
 * like hashPassword (the check of an unknown address against dummyPasswordHash too).
 */
export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const [scheme, n, r, p, salt, key] = stored.split('$');
  if (scheme !== 'scrypt' || !n || !r || !p || !salt || !key) return false;
  const expected = Buffer.from(key, 'base64url');
  const actual = await scryptAsync(
    password,
    Buffer.from(salt, 'base64url'),
    Number(n),
    Number(r),
    Number(p),
    expected.length,
  );
  return timingSafeEqual(actual, expected);
}

/** A hash to check against when the account does not exist, so that the answer takes as long. */
export const dummyPasswordHash: Promise<string> = hashPassword(randomBytes(16).toString('hex'));
