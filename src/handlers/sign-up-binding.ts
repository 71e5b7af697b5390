import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../config.ts';

// The sign-up binding of web clients travels as an HttpOnly cookie (see unproven-password.ts for
// what it proves). Its path is `/`: the verify operation (/api/auth/email/verify) and the service's
// own link page (/auth/verify-email) both receive it.

export const SIGN_UP_BINDING_COOKIE = 'sign_up_binding';

/** The cookie's attributes: those of the refresh cookie but for its path and lifetime. */
function attributes(config: Readonly<Config>, maxAge: number) {
  const { secure, sameSite, domain } = config.cookie;
  return {
    httpOnly: true,
    secure,
    sameSite,
    path: '/',
    maxAge,
    ...(domain !== undefined ? { domain } : {}),
    ...(sameSite === 'none' ? { partitioned: true } : {}),
  };
}

/** Sets the binding cookie of a web client's sign-up, for as long as its verification link lives. */
export function setSignUpBindingCookie(config: Readonly<Config>, reply: FastifyReply, binding: string): void {
  reply.setCookie(SIGN_UP_BINDING_COOKIE, binding, attributes(config, config.emailLinkTtlSeconds));
}

/** Clears the binding cookie (after the verification it was for). */
export function clearSignUpBindingCookie(config: Readonly<Config>, reply: FastifyReply): void {
  reply.setCookie(SIGN_UP_BINDING_COOKIE, '', attributes(config, 0));
}

/** The bindings a request carries: the body's `signUpBinding` and the cookie, when present. */
export function presentedBindings(request: FastifyRequest, bodyBinding: string | undefined): string[] {
  const cookie = request.cookies[SIGN_UP_BINDING_COOKIE];
  return [bodyBinding, cookie].filter((b): b is string => b !== undefined && b !== '');
}
