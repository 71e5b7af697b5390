import type { FastifyInstance } from 'fastify';
import type { Config } from '../config.ts';
import { clearSignUpBindingCookie, hasSignUpBindingCookie, presentedBindings } from '../handlers/sign-up-binding.ts';
import type { AuthService } from './auth-service.ts';
import { linkFields, registerLinkPage } from './link-pages.ts';

// The page a verification link opens when EMAIL_VERIFY_URL does not send it to an app: a button
// that posts the form back here, which confirms the address as POST /api/auth/email/verify does
// with a link token, but opens no session: no app could use a session opened on the service's page
// (apps point EMAIL_VERIFY_URL at their own page, which calls the verify operation). No script.

export const VERIFY_PAGE_PATH = '/auth/verify-email';

function form(token: string, redirectTo: string | undefined): string {
  return `<form method="post" action="${VERIFY_PAGE_PATH}">
${linkFields(token, redirectTo)}  <p>Press the button to confirm the address this link was sent to.</p>
  <p>If you did not sign up, do not press it: someone else may have typed your address.</p>
  <button type="submit">Confirm my email</button>
</form>`;
}

/** GET and POST /auth/verify-email: the page of verification links (not part of the JSON API). */
export async function registerVerifyEmailPage(
  app: FastifyInstance,
  deps: { auth: Pick<AuthService, 'confirmEmail'>; config: Readonly<Config> },
): Promise<void> {
  await registerLinkPage(app, deps.config, {
    path: VERIFY_PAGE_PATH,
    title: 'Confirm your email address',
    doneTitle: 'Email address confirmed',
    form,
    incomplete: 'This link is incomplete. Open the link from your email again, or enter the 6-digit code in the app.',
    invalid: 'This link is invalid, has expired or was already used. Ask the app for a new verification email.',
    retry: 'The address could not be confirmed just now. Go back and try again in a moment.',
    async submit(token, _fields, request, reply) {
      // The browser that signed up carries its binding here too (sign-up-binding.ts); once the
      // address is confirmed the binding has served, and its cookie is cleared.
      const client = { ip: request.ip, userAgent: request.headers['user-agent'] ?? null };
      const bindings = presentedBindings(deps.config, request, undefined);
      const { hasPassword } = await deps.auth.confirmEmail(token, bindings, client);
      if (hasSignUpBindingCookie(deps.config, request)) clearSignUpBindingCookie(deps.config, reply);
      return {
        done: hasPassword
          ? 'Your email address is confirmed. You can now sign in with it.'
          : 'Your email address is confirmed. It has no password yet (it was signed up for more than once): sign in with a code sent to it, or choose a password with "Forgot password".',
      };
    },
  });
}
