import type { FastifyInstance } from 'fastify';
import type { Config } from '../config.ts';
import { escapeHtml } from '../html-page.ts';
import type { AuthService } from './auth-service.ts';
import { linkFields, registerLinkPage } from './link-pages.ts';

// The page a password-reset link opens (unless RESET_PASSWORD_URL sends the link to an app): a form
// for the new password, posted back here, which resets it as POST /api/auth/email/reset-password
// does. It needs no script.

export const RESET_PAGE_PATH = '/auth/reset-password';

function form(token: string, redirectTo: string | undefined, error?: string): string {
  return `${error === undefined ? '' : `<p class="error" role="alert">${escapeHtml(error)}</p>\n`}<form method="post" action="${RESET_PAGE_PATH}">
${linkFields(token, redirectTo)}  <label>New password (8 to 256 characters)
    <input type="password" name="newPassword" autocomplete="new-password" minlength="8" maxlength="256" required autofocus>
  </label>
  <label>The same password again
    <input type="password" name="confirmPassword" autocomplete="new-password" minlength="8" maxlength="256" required>
  </label>
  <button type="submit">Set the new password</button>
</form>
<p>Setting a new password signs you out on every device.</p>`;
}

/** GET and POST /auth/reset-password: the page of password-reset links (not part of the JSON API). */
export async function registerResetPasswordPage(
  app: FastifyInstance,
  deps: { auth: Pick<AuthService, 'resetPassword' | 'resetLinkIsLive'>; config: Readonly<Config> },
): Promise<void> {
  await registerLinkPage(app, deps.config, {
    path: RESET_PAGE_PATH,
    title: 'Choose a new password',
    doneTitle: 'Password changed',
    form,
    live: (token) => deps.auth.resetLinkIsLive(token),
    incomplete: 'This link is incomplete. Open the link from your email again, or ask for a new password-reset email.',
    invalid: 'This link is invalid, has expired or was already used. Ask for a new password-reset email.',
    retry: 'The password could not be set just now. Go back and try again in a moment.',
    async submit(token, fields, request) {
      const password = fields.get('newPassword') ?? '';
      const length = [...password].length;
      if (length < 8 || length > 256) return { error: 'The new password must have 8 to 256 characters.' };
      if (password !== (fields.get('confirmPassword') ?? '')) return { error: 'The two passwords are not the same.' };
      await deps.auth.resetPassword(token, password, {
        ip: request.ip,
        userAgent: request.headers['user-agent'] ?? null,
      });
      return {
        done: 'Your password has been changed, and you are signed out everywhere. Sign in with the new password.',
      };
    },
  });
}
