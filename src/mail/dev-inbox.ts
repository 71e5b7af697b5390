import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { errorBody } from '../errors.ts';
import { escapeHtml, htmlPage } from '../html-page.ts';
import { FORM_PAGE_CSP } from '../security-headers.ts';
import type { MailMessage } from './mailer.ts';

// Development without SMTP_URL: the emails the service would have sent, kept in memory (the last
// 100) and shown at GET /dev/inbox (a page) and GET /dev/inbox.json, so that a developer reads a
// code or opens a link without searching the log. Never in production (config requires SMTP_URL
// there), never with SMTP_URL set, and only to this machine: a service started without
// NODE_ENV=production on a public address must not hand out everyone's codes.

export const INBOX_CAPACITY = 100;
export const INBOX_PATH = '/dev/inbox';

/** An email as the inbox keeps it; `id` grows by one per email since the start. */
export interface InboxMessage {
  id: number;
  receivedAt: string;
  to: string;
  subject: string;
  /** The 6-digit code it carries, if any. */
  code: string | null;
  /** The link it carries, if any. */
  link: string | null;
  text: string;
}

export class DevInbox {
  readonly #messages: InboxMessage[] = [];
  #lastId = 0;

  add(message: MailMessage, at: Date): InboxMessage {
    const kept: InboxMessage = {
      id: ++this.#lastId,
      receivedAt: at.toISOString(),
      to: message.to,
      subject: message.subject,
      code: message.code ?? null,
      link: message.link ?? null,
      text: message.text,
    };
    this.#messages.push(kept);
    if (this.#messages.length > INBOX_CAPACITY) this.#messages.shift();
    return kept;
  }

  /** Newest first; only those to `to` (any case) when given. */
  list(to?: string): InboxMessage[] {
    const wanted = to?.toLowerCase();
    return this.#messages.filter((m) => wanted === undefined || m.to.toLowerCase() === wanted).reverse();
  }
}

const LOOPBACK = /^(127\.\d{1,3}\.\d{1,3}\.\d{1,3}|::1|::ffff:127\.\d{1,3}\.\d{1,3}\.\d{1,3})$/;
/** The names this machine is reached by from itself (a DNS-rebound name is none of them). */
const LOCAL_HOST = /^(localhost|127\.0\.0\.1|\[::1\])(:\d{1,5})?$/i;
const PROXY_HEADERS = ['x-forwarded-for', 'forwarded', 'x-real-ip', 'x-forwarded-host'];

/**
 * Whether the request came from this machine itself: from a loopback address, naming the machine by
 * a local name (not a DNS name rebound to 127.0.0.1), through no proxy that says so, and not from
 * a web page of another site (a browser sends Origin on a cross-origin request, and Sec-Fetch-Site).
 */
function fromThisMachine(request: FastifyRequest): boolean {
  const peer = request.raw.socket.remoteAddress ?? '';
  const { headers } = request;
  const proxied = PROXY_HEADERS.some((name) => headers[name] !== undefined);
  const site = headers['sec-fetch-site'];
  const fromAPage = headers.origin !== undefined || (site !== undefined && site !== 'none' && site !== 'same-origin');
  return LOOPBACK.test(peer) && LOCAL_HOST.test(headers.host ?? '') && !proxied && !fromAPage;
}

function refuse(reply: FastifyReply) {
  return reply
    .code(403)
    .send(
      errorBody(
        'FORBIDDEN',
        'The development inbox answers only requests made on this machine (loopback, as localhost, 127.0.0.1 or [::1]), not through a proxy and not from another site’s page',
      ),
    );
}

const queryTo = (request: FastifyRequest): string | undefined => {
  const to = (request.query as Record<string, unknown>).to;
  return typeof to === 'string' && to !== '' ? to : undefined;
};

function page(messages: InboxMessage[], to: string | undefined): string {
  const intro = `<p>The emails the service would have sent (SMTP_URL is not set): the last ${INBOX_CAPACITY}, newest first${
    to === undefined ? '' : `, to ${escapeHtml(to)} only (<a href="${INBOX_PATH}">all</a>)`
  }. Reload for new ones; <a href="${INBOX_PATH}.json">as JSON</a>.</p>`;
  if (messages.length === 0) return `${intro}\n<p role="status">No email yet.</p>`;
  const items = messages.map(
    (m) => `<article class="mail" id="mail-${m.id}">
<h2>${escapeHtml(m.subject)}</h2>
<p class="meta">To <a href="${INBOX_PATH}?to=${encodeURIComponent(m.to)}">${escapeHtml(m.to)}</a> · <time datetime="${m.receivedAt}">${escapeHtml(m.receivedAt.replace('T', ' ').slice(0, 19))} UTC</time> · #${m.id}</p>
${m.code === null ? '' : `<p>Code: <span class="code">${escapeHtml(m.code)}</span></p>\n`}${
  m.link === null
    ? ''
    : `<p><a href="${escapeHtml(m.link)}">Open the link</a></p>\n<p class="link">${escapeHtml(m.link)}</p>\n`
}<details><summary>The whole email</summary><pre>${escapeHtml(m.text)}</pre></details>
</article>`,
  );
  return `${intro}\n${items.join('\n')}`;
}

/** GET /dev/inbox (HTML) and GET /dev/inbox.json (`{ messages }`), both with `?to=` to pick one address. */
export function registerDevInbox(app: FastifyInstance, inbox: DevInbox, appName: string): void {
  const options = { schema: { hide: true }, config: { csp: FORM_PAGE_CSP } };
  app.get(INBOX_PATH, options, async (request, reply) => {
    if (!fromThisMachine(request)) return refuse(reply);
    const to = queryTo(request);
    return reply
      .type('text/html; charset=utf-8')
      .send(htmlPage({ heading: 'Development inbox', appName, body: page(inbox.list(to), to), wide: true }));
  });
  app.get(`${INBOX_PATH}.json`, { schema: { hide: true } }, async (request, reply) => {
    if (!fromThisMachine(request)) return refuse(reply);
    return reply.send({ messages: inbox.list(queryTo(request)) });
  });
}
