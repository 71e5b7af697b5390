import { createHash } from 'node:crypto';
import type { components } from '../../generated/openapi.ts';
import type { Config } from '../config.ts';
import { specDocument } from '../spec.ts';

export type PublicAuthConfig = components['schemas']['PublicAuthConfig'];
type BuiltInName = PublicAuthConfig['oAuthProviders'][number];

interface LengthRule {
  minLength?: number;
  maxLength?: number;
}

/**
 * The password rules as the contract enforces them: the lengths of SignUpRequest's password (the
 * password-setting operations share them, which a test checks), and no rule on which characters.
 */
function passwordLengths(): { min: number; max: number } {
  const schemas = (specDocument.components as { schemas: Record<string, { properties?: Record<string, LengthRule> }> })
    .schemas;
  const rule = schemas.SignUpRequest?.properties?.password;
  if (rule?.minLength === undefined || rule.maxLength === undefined) {
    throw new Error('openapi.yaml: SignUpRequest.password has no minLength or maxLength');
  }
  return { min: rule.minLength, max: rule.maxLength };
}

/**
 * The public auth configuration and its ETag. It depends on the configuration alone (read once at
 * start), so it is computed once; the ETag is a hash of the body, so a changed configuration has
 * another one and caches that revalidate see it at once.
 */
export function createPublicAuthConfig(config: Readonly<Config>): { body: PublicAuthConfig; etag: string } {
  const password = passwordLengths();
  const body: PublicAuthConfig = {
    oAuthProviders: config.oauthProviders.filter((p) => p.builtIn).map((p) => p.name as BuiltInName),
    customOAuthProviders: config.oauthProviders.filter((p) => !p.builtIn).map((p) => p.name),
    requireEmailVerification: config.requireEmailVerification,
    passwordMinLength: password.min,
    passwordMaxLength: password.max,
    requireNumber: false,
    requireLowercase: false,
    requireUppercase: false,
    requireSpecialChar: false,
    // Every email carries a code to type and a link; the code is what an app asks for.
    verifyEmailMethod: 'code',
    resetPasswordMethod: 'code',
    disableSignup: !config.allowSignUp,
    redirectUrl: config.authRedirectUrl ?? null,
    verifyEmailUrl: config.emailVerifyUrl,
    // Browsers refuse an IP address as a relying party's id: passkeys cannot work there.
    mfaFactorTypes: /^[\d.]+$/.test(config.webauthn.rpId) ? ['totp'] : ['totp', 'passkey'],
    mfaRequiredForAdmins: config.mfa.requiredForAdmins,
    resetPasswordUrl: config.resetPasswordUrl,
  };
  const etag = `"${createHash('sha256').update(JSON.stringify(body)).digest('base64url').slice(0, 22)}"`;
  return { body, etag };
}

/**
 * Whether an If-None-Match header names `etag` (RFC 9110, 13.1.2: `*`, or a list of entity tags
 * compared weakly, so `W/"x"` matches `"x"`).
 */
export function etagMatches(ifNoneMatch: string | undefined, etag: string): boolean {
  if (ifNoneMatch === undefined) return false;
  const wanted = etag.replace(/^W\//, '');
  return ifNoneMatch
    .split(',')
    .map((tag) => tag.trim())
    .some((tag) => tag === '*' || tag.replace(/^W\//, '') === wanted);
}
