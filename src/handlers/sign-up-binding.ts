import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../config.ts';
import { cookieAttributes } from './cookie-attributes.ts';

// The sign-up binding of web clients travels as an HttpOnly cookie (see unproven-password.ts for
// what it proves). Its path is `/`: the verify operation (/api/auth/email/verify) and the service's
// own link page (/auth/verify-email) both receive it. It is host-only, and named with the `__Host-`
// prefix whenever it is Secure: browsers then refuse it from any other host (a sibling subdomain
// cannot plant its own binding in the owner's browser to make its password count as proven).

const COOKIE_NAME = 'sign_up_binding';

/** The cookie's name: `__Host-sign_up_binding` when cookies are Secure, else `sign_up_binding`. */
export function signUpBindingCookie(config: Readonly<Config>): string {
  return config.cookie.secure ? `__Host-${COOKIE_NAME}` : COOKIE_NAME;
}

/** The cookie's attributes: those of the refresh cookie but host-only, for its path and lifetime. */
function attributes(config: Readonly<Config>, maxAge: number) {
  const { secure, sameSite } = config.cookie;
  return cookieAttributes(secure, sameSite, undefined, sameSite === 'none', maxAge, '/');
}

/** Sets the binding cookie of a web client's sign-up, for as long as its verification link lives. */
export function setSignUpBindingCookie(config: Readonly<Config>, reply: FastifyReply, binding: string): void {
  reply.setCookie(signUpBindingCookie(config), binding, attributes(config, config.emailLinkTtlSeconds));
}

/** Clears the binding cookie (after the verification it was for). */
export function clearSignUpBindingCookie(config: Readonly<Config>, reply: FastifyReply): void {
  reply.setCookie(signUpBindingCookie(config), '', attributes(config, 0));
}

/** Whether a request carries the binding cookie (the answer then clears it). */
export function hasSignUpBindingCookie(config: Readonly<Config>, request: FastifyRequest): boolean {
  return request.cookies[signUpBindingCookie(config)] !== undefined;
}

/** The bindings a request carries: the body's `signUpBinding` and the cookie, when present. */
export function presentedBindings(
  config: Readonly<Config>,
  request: FastifyRequest,
  bodyBinding: string | undefined,
): string[] {
  const cookie = request.cookies[signUpBindingCookie(config)];
  return [bodyBinding, cookie].filter((b): b is string => b !== undefined && b !== '');
}
