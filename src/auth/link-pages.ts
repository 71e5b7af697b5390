import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../config.ts';
import { toErrorResponse } from '../errors.ts';
import { escapeHtml, htmlPage } from '../html-page.ts';
import { FORM_PAGE_CSP } from '../security-headers.ts';
import { allowedRedirect } from './redirects.ts';

// What the pages emailed links open have in common (the verification and the password-reset page):
// server-rendered HTML without script, a form posted back to the same path, every value escaped.

/** The heading of a link that cannot be used (incomplete, unknown, expired or used). */
const REFUSED = 'This link cannot be used';

/** A link's token: 64 hexadecimal characters. */
const LINK_TOKEN = /^[0-9a-fA-F]{64}$/;

/** A paragraph for people: a status, or an error announced as an alert. */
const message = (text: string, error = false) =>
  `<p${error ? ' class="error" role="alert"' : ' role="status"'}>${escapeHtml(text)}</p>`;

/** The hidden fields that carry a link's token and redirect through its form. */
export function linkFields(token: string, redirectTo: string | undefined): string {
  return `  <input type="hidden" name="token" value="${escapeHtml(token)}">\n${
    redirectTo === undefined ? '' : `  <input type="hidden" name="redirect_to" value="${escapeHtml(redirectTo)}">\n`
  }`;
}

/** "Continue" to where the person goes next, when there is such a place. */
const continueLink = (next: string | undefined) =>
  next === undefined ? '' : `\n<p><a href="${escapeHtml(next)}">Continue</a></p>`;

/** A redirect a page may offer: an allowed one (redirects.ts) from the link, else none. */
function safeRedirect(config: Readonly<Config>, asked: string | undefined): string | undefined {
  try {
    return allowedRedirect(config, asked === '' ? undefined : asked, 'redirect_to');
  } catch {
    return undefined;
  }
}

function sendPage(reply: FastifyReply, status: number, heading: string, appName: string, body: string) {
  return reply.code(status).type('text/html; charset=utf-8').send(htmlPage({ heading, appName, body }));
}

/** What makes one link page: its path, words, form, and what posting the form does. */
export interface LinkPage {
  path: string;
  /** The heading while the page asks (and when it refuses). */
  title: string;
  /** The heading once the form was taken. */
  doneTitle: string;
  /** The form, with the link's token and redirect in hidden fields, and an error to show above it. */
  form(token: string, redirectTo: string | undefined, error?: string): string;
  /** Shown when the link has no well-formed token. */
  incomplete: string;
  /** Shown when the token is wrong, expired or used (INVALID_OTP). */
  invalid: string;
  /** Shown when the work failed for another reason (a busy database, say). */
  retry: string;
  /**
   * Whether the link's token can still be used, asked before the form is shown (read only: a GET
   * changes nothing), so that a used or expired link says so before anything is typed. Without it
   * the form is shown and posting it tells.
   */
  live?(token: string): Promise<boolean>;
  /**
   * Does the page's work with the posted form (and the request and reply, for cookies): an error
   * that sends the form back, or the message of success.
   */
  submit(
    token: string,
    fields: URLSearchParams,
    request: FastifyRequest,
    reply: FastifyReply,
  ): Promise<{ error: string } | { done: string }>;
}

/**
 * GET and POST on a link page's path: the GET shows the form (opening it changes nothing: mail
 * scanners follow links); the POST takes the form (application/x-www-form-urlencoded, at most
 * 16 KiB, accepted on this path only; JSON is not), under a per-IP limit of the verify operation's
 * size, and offers the way on: the link's allowed redirect, else AUTH_REDIRECT_URL. Every answer
 * gets FORM_PAGE_CSP; Cache-Control: no-store and the other headers come from security-headers.ts.
 */
export async function registerLinkPage(app: FastifyInstance, config: Readonly<Config>, page: LinkPage) {
  const send = (reply: FastifyReply, status: number, body: string, heading = page.title) =>
    sendPage(reply, status, heading, config.appName, body);
  const options = { schema: { hide: true }, config: { csp: FORM_PAGE_CSP } };
  await app.register(async (scope) => {
    scope.removeContentTypeParser('application/json');
    scope.addContentTypeParser(
      'application/x-www-form-urlencoded',
      { parseAs: 'string', bodyLimit: 16 * 1024 },
      (_request, body, done) => done(null, new URLSearchParams(String(body))),
    );

    scope.get<{ Querystring: Record<string, string | undefined> }>(page.path, options, async (request, reply) => {
      const token = typeof request.query.token === 'string' ? request.query.token : '';
      if (!LINK_TOKEN.test(token)) return send(reply, 400, message(page.incomplete, true), REFUSED);
      if (page.live !== undefined && !(await page.live(token)))
        return send(reply, 400, message(page.invalid, true), REFUSED);
      const asked = typeof request.query.redirect_to === 'string' ? request.query.redirect_to : undefined;
      return send(reply, 200, page.form(token, safeRedirect(config, asked)));
    });

    const rateLimit = { max: config.rateLimits.verify, timeWindow: config.rateLimits.windowSeconds * 1000 };
    scope.post(page.path, { ...options, config: { ...options.config, rateLimit } }, async (request, reply) => {
      const fields = request.body instanceof URLSearchParams ? request.body : new URLSearchParams();
      const token = fields.get('token') ?? '';
      if (!LINK_TOKEN.test(token)) return send(reply, 400, message(page.incomplete, true), REFUSED);
      const redirect = safeRedirect(config, fields.get('redirect_to') ?? undefined);
      let outcome: { error: string } | { done: string };
      try {
        outcome = await page.submit(token, fields, request, reply);
      } catch (err) {
        const { body } = toErrorResponse(err);
        if (body.error === 'INVALID_OTP') return send(reply, 400, message(page.invalid, true), REFUSED);
        request.log.warn({ code: body.error, page: page.path }, 'link page: the form was not taken');
        return send(reply, body.statusCode >= 400 ? body.statusCode : 500, message(page.retry, true));
      }
      if ('error' in outcome) return send(reply, 400, page.form(token, redirect, outcome.error));
      return send(reply, 200, message(outcome.done) + continueLink(redirect ?? config.authRedirectUrl), page.doneTitle);
    });
  });
}
