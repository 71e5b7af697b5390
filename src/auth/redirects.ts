import type { Config } from '../config.ts';
import { ApiError } from '../errors.ts';

/** Whether `url` (WHATWG-serialised) matches an allow-list entry: an origin, or a URL prefix. */
export function matchesRedirectEntry(url: URL, entry: string): boolean {
  if (url.origin !== 'null' && url.origin === entry) return true;
  const href = url.href;
  if (entry.endsWith('/')) return href.startsWith(entry);
  return href === entry || href.startsWith(`${entry}/`) || href.startsWith(`${entry}?`);
}

/**
 * A redirect URL a client asked for (`redirectTo`, OAuth's `redirect_uri`), accepted only when it
 * matches the allow-list (AUTH_REDIRECT_ALLOWLIST, else the origin of AUTH_REDIRECT_URL) and has no
 * user information: the service never sends anyone to an address a caller chose. Returns the URL as
 * a browser reads it (WHATWG-serialised, so that what was checked is exactly what is used later),
 * undefined when none was asked for; any other value is a 400 that names the rule. A pure check of
 * the input: it looks nothing up, so its answer tells nothing about any account.
 */
export function allowedRedirect(
  config: Pick<Readonly<Config>, 'authRedirectAllowlist'>,
  redirectTo: string | undefined,
  field = 'body.redirectTo',
): string | undefined {
  if (redirectTo === undefined) return undefined;
  const allowed = config.authRedirectAllowlist;
  if (allowed.length === 0) {
    throw new ApiError(
      'INVALID_INPUT',
      `${field} is not accepted: the service allows no redirect (AUTH_REDIRECT_ALLOWLIST or AUTH_REDIRECT_URL)`,
    );
  }
  const url = URL.parse(redirectTo) ?? undefined;
  if (
    url === undefined ||
    url.username !== '' ||
    url.password !== '' ||
    // Encoded slashes, backslashes and dots in the path: a server that decodes them before routing
    // would serve another path than the one the prefix check saw.
    /%2f|%5c|%2e/i.test(url.pathname) ||
    !allowed.some((entry) => matchesRedirectEntry(url, entry))
  ) {
    throw new ApiError('INVALID_INPUT', `${field} must be a URL the service allows: ${allowed.join(', ')}`);
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
