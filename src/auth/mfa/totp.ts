// TOTP (RFC 6238) for second factors: SHA-1, 6 digits, 30-second steps, one step of clock skew
// either way. Codes come from `otpauth`; the comparison and the replay rule are the service's.
import { timingSafeEqual } from 'node:crypto';
import { Secret, TOTP } from 'otpauth';

const PERIOD_SECONDS = 30;
const DIGITS = 6;
/** Steps either side of the server's clock whose codes are accepted. */
const SKEW_STEPS = 1;

/** A new 160-bit secret, base32 (what authenticator apps are given). */
export function newTotpSecret(): string {
  return new Secret({ size: 20 }).base32;
}

/** The `otpauth://totp/` URI an authenticator app reads (label `issuer:account`). */
export function totpUri(secretBase32: string, issuer: string, account: string): string {
  return new TOTP({
    issuer,
    label: account,
    secret: Secret.fromBase32(secretBase32),
    algorithm: 'SHA1',
    digits: DIGITS,
    period: PERIOD_SECONDS,
  }).toString();
}

/** The URI as a QR code: an SVG image in a data URI. */
export async function qrCodeDataUri(uri: string): Promise<string> {
  // Loaded at the first enrolment: an idle service does not hold it.
  const { default: QRCode } = await import('qrcode');
  const svg = await QRCode.toString(uri, { type: 'svg', errorCorrectionLevel: 'M', margin: 2 });
  return `data:image/svg+xml;base64,${Buffer.from(svg).toString('base64')}`;
}

/** The 30-second step of a moment. */
export const totpStep = (at: Date): number => Math.floor(at.getTime() / 1000 / PERIOD_SECONDS);

/**
 * The step whose code `code` is, among the steps within the skew of `now`, or undefined. Every
 * candidate is computed and compared in constant time, whichever matches.
 */
export function matchTotpStep(secretBase32: string, code: string, now: Date): number | undefined {
  const secret = Secret.fromBase32(secretBase32);
  const offered = Buffer.from(code.padEnd(DIGITS, ' ').slice(0, DIGITS));
  const current = totpStep(now);
  let matched: number | undefined;
  for (let step = current - SKEW_STEPS; step <= current + SKEW_STEPS; step++) {
    const expected = Buffer.from(
      TOTP.generate({
        secret,
        algorithm: 'SHA1',
        digits: DIGITS,
        period: PERIOD_SECONDS,
        timestamp: step * PERIOD_SECONDS * 1000,
      }),
    );
    if (timingSafeEqual(expected, offered) && matched === undefined) matched = step;
  }
  return matched;
}
