/**
 * The attributes of the service's own cookies (the refresh cookie, the sign-up binding): HttpOnly
 * always; Secure, SameSite, Domain, Partitioned, path and lifetime as given. A cookie is only
 * replaced by one with the same name, domain, path and partition, so clearing one takes the
 * attributes it was set with and a Max-Age of 0.
 */
export function cookieAttributes(
  secure: boolean,
  sameSite: 'lax' | 'strict' | 'none',
  domain: string | undefined,
  partitioned: boolean,
  maxAge: number,
  path: string,
) {
  return {
    httpOnly: true,
    secure,
    sameSite,
    path,
    maxAge,
    ...(domain !== undefined ? { domain } : {}),
    ...(partitioned ? { partitioned: true } : {}),
  };
}
