import type { FastifyInstance, FastifyReply } from 'fastify';
import type { Config } from '../config.ts';
import { toErrorResponse } from '../errors.ts';
import type { AuthService } from './auth-service.ts';
import { allowedRedirect } from './redirects.ts';

// The page a password-reset link opens (unless RESET_PASSWORD_URL sends the link to an app): a form
// for the new password. Opening it changes nothing (mail scanners follow links); the token is only
// spent when the form is posted back here, which needs no script. Every value shown is escaped.

export const RESET_PAGE_PATH = '/auth/reset-password';
const TOKEN = /^[0-9a-fA-F]{64}$/;

const escapeHtml = (s: string) =>
  s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] as string);

const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
};

function layout(body: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<meta name="robots" content="noindex">
<title>Choose a new password</title>
<style>
  body { font-family: system-ui, sans-serif; max-width: 28rem; margin: 4rem auto; padding: 0 1rem; color: #1f2328; }
  label { display: block; margin-top: 1rem; }
  input[type=password] { width: 100%; box-sizing: border-box; font-size: 1rem; padding: 0.5rem; margin-top: 0.25rem; }
  button { margin-top: 1.5rem; font-size: 1rem; padding: 0.6rem 1.2rem; border-radius: 6px; border: 0; background: #1f6feb; color: #fff; cursor: pointer; }
  .error { color: #cf222e; }
</style>
</head>
<body>
<h1>Choose a new password</h1>
${body}
</body>
</html>
`;
}

function form(token: string, redirectTo: string | undefined, error?: string): string {
  return `${error === undefined ? '' : `<p class="error" role="alert">${escapeHtml(error)}</p>\n`}<form method="post" action="${RESET_PAGE_PATH}">
  <input type="hidden" name="token" value="${escapeHtml(token)}">
${redirectTo === undefined ? '' : `  <input type="hidden" name="redirect_to" value="${escapeHtml(redirectTo)}">\n`}  <label>New password (8 to 256 characters)
    <input type="password" name="newPassword" autocomplete="new-password" minlength="8" maxlength="256" required autofocus>
  </label>
  <label>The same password again
    <input type="password" name="confirmPassword" autocomplete="new-password" minlength="8" maxlength="256" required>
  </label>
  <button type="submit">Set the new password</button>
</form>
<p>Setting a new password signs you out on every device.</p>`;
}

const message = (text: string, error = false) =>
  `<p${error ? ' class="error" role="alert"' : ' role="status"'}>${escapeHtml(text)}</p>`;

const INCOMPLETE =
  'This link is incomplete. Open the link from your email again, or ask for a new password-reset email.';
const INVALID = 'This link is invalid, has expired or was already used. Ask for a new password-reset email.';

/** A redirect the page may offer: an allowed one (redirects.ts) from the link, else AUTH_REDIRECT_URL. */
function safeRedirect(config: Readonly<Config>, asked: string | undefined): string | undefined {
  try {
    return allowedRedirect(config, asked === '' ? undefined : asked, 'redirect_to');
  } catch {
    return undefined;
  }
}

function send(reply: FastifyReply, status: number, body: string) {
  return reply.code(status).headers(SECURITY_HEADERS).type('text/html; charset=utf-8').send(layout(body));
}

/**
 * GET and POST /auth/reset-password: the page of password-reset links (not part of the JSON API).
 * The POST takes the form (application/x-www-form-urlencoded, accepted on this route only) and
 * resets the password as POST /api/auth/email/reset-password does, under the same per-IP limit.
 */
export async function registerResetPasswordPage(
  app: FastifyInstance,
  deps: { auth: Pick<AuthService, 'resetPassword'>; config: Readonly<Config> },
): Promise<void> {
  const { auth, config } = deps;
  // Cache-Control: no-store and nosniff come from the app's security headers (security-headers.ts).
  await app.register(async (scope) => {
    scope.removeContentTypeParser('application/json');
    scope.addContentTypeParser(
      'application/x-www-form-urlencoded',
      { parseAs: 'string', bodyLimit: 16 * 1024 },
      (_request, body, done) => done(null, new URLSearchParams(String(body))),
    );

    scope.get<{ Querystring: Record<string, string | undefined> }>(
      RESET_PAGE_PATH,
      { schema: { hide: true } },
      async (request, reply) => {
        const token = typeof request.query.token === 'string' ? request.query.token : '';
        if (!TOKEN.test(token)) return send(reply, 400, message(INCOMPLETE, true));
        const asked = typeof request.query.redirect_to === 'string' ? request.query.redirect_to : undefined;
        return send(reply, 200, form(token, safeRedirect(config, asked)));
      },
    );

    scope.post(
      RESET_PAGE_PATH,
      {
        schema: { hide: true },
        config: {
          rateLimit: { max: config.rateLimits.verify, timeWindow: config.rateLimits.windowSeconds * 1000 },
        },
      },
      async (request, reply) => {
        const fields = request.body instanceof URLSearchParams ? request.body : new URLSearchParams();
        const token = fields.get('token') ?? '';
        if (!TOKEN.test(token)) return send(reply, 400, message(INCOMPLETE, true));
        const redirect = safeRedirect(config, fields.get('redirect_to') ?? undefined);
        const password = fields.get('newPassword') ?? '';
        const length = [...password].length;
        if (length < 8 || length > 256) {
          return send(reply, 400, form(token, redirect, 'The new password must have 8 to 256 characters.'));
        }
        if (password !== (fields.get('confirmPassword') ?? '')) {
          return send(reply, 400, form(token, redirect, 'The two passwords are not the same.'));
        }
        try {
          await auth.resetPassword(token, password);
        } catch (err) {
          const { body } = toErrorResponse(err);
          if (body.error === 'INVALID_OTP') return send(reply, 400, message(INVALID, true));
          request.log.warn({ code: body.error }, 'reset page: password not reset');
          const retry = 'The password could not be set just now. Go back and try again in a moment.';
          return send(reply, body.statusCode >= 400 ? body.statusCode : 500, message(retry, true));
        }
        const done = message(
          'Your password has been changed, and you are signed out everywhere. Sign in with the new password.',
        );
        const next = redirect ?? config.authRedirectUrl;
        return send(
          reply,
          200,
          next === undefined ? done : `${done}\n<p><a href="${escapeHtml(next)}">Continue</a></p>`,
        );
      },
    );
  });
}
