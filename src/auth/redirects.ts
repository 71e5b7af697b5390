import type { Config } from '../config.ts';
import { ApiError } from '../errors.ts';

/**
 * A redirect URL a client asked for (`redirectTo`), accepted only on the origin (scheme, host and
 * port) of the service's own redirect URL, AUTH_REDIRECT_URL, and without user information: the
 * service never sends anyone to an address a caller chose. Returns the URL as a browser reads it
 * (WHATWG-serialised, so that what was checked is exactly what is used later), undefined when
 * none was asked for; any other value is a 400 that names the rule. A pure check of the input:
 * it looks nothing up, so its answer tells nothing about any account.
 */
export function allowedRedirect(
  config: Pick<Readonly<Config>, 'authRedirectUrl'>,
  redirectTo: string | undefined,
  field = 'body.redirectTo',
): string | undefined {
  if (redirectTo === undefined) return undefined;
  const origin = URL.parse(config.authRedirectUrl ?? '')?.origin;
  if (origin === undefined || origin === 'null') {
    throw new ApiError(
      400,
      'INVALID_INPUT',
      `${field} is not accepted: the service has no redirect URL (AUTH_REDIRECT_URL) whose origin it must be on`,
    );
  }
  const url = URL.parse(redirectTo) ?? undefined;
  if (url === undefined || url.origin !== origin || url.username !== '' || url.password !== '') {
    throw new ApiError(400, 'INVALID_INPUT', `${field} must be a URL on ${origin}, the service's redirect origin`);
  }
  return url.href;
}

/** The link of a verification email: the page, its token, and the allowed redirect the page goes to afterwards. */
export function linkWithRedirect(page: string, token: string, redirectTo: string | undefined): string {
  // Through the URL API: the page's own query string (EMAIL_VERIFY_URL may have one) is kept.
  const link = new URL(page);
  link.searchParams.set('token', token);
  if (redirectTo !== undefined) link.searchParams.set('redirect_to', redirectTo);
  return link.href;
}
