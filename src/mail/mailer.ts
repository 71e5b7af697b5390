import { createRequire } from 'node:module';
import type { FastifyBaseLogger } from 'fastify';
import type { Config } from '../config.ts';
import { DevInbox, INBOX_PATH } from './dev-inbox.ts';
import { withAppName } from './templates.ts';

// Loaded at the first email sent over SMTP: about 60 ms, and some 10 MB that an idle service does
// not hold.
const requirePackage = createRequire(import.meta.url);

export interface MailMessage {
  to: string;
  subject: string;
  text: string;
  html: string;
  /** The 6-digit code the email carries, if any (for the development inbox and log line). */
  code?: string;
  /** The link the email carries, if any. */
  link?: string;
}

/** Sends mail; the only outgoing side effect of the accounts flow. */
export interface Mailer {
  send(message: MailMessage): Promise<void>;
  /**
   * An email that was asked for and not sent (`reason` says why). Only the development mailer says
   * so, in the log where its reader waits for the email; the answer to the request never does.
   */
  notSent(to: string, reason: string): void;
  /** Without SMTP_URL (development): where the emails are kept instead of being sent. */
  readonly inbox?: DevInbox;
  close(): void;
}

/**
 * SMTP through nodemailer when SMTP_URL is set. Without it (never in production: config refuses)
 * nothing is sent: every message goes to the development inbox (dev-inbox.ts) and one log line
 * with its code and link. Every message carries APP_NAME.
 */
export function createMailer(config: Readonly<Config>, log: FastifyBaseLogger): Mailer {
  if (config.smtpUrl === undefined) {
    const inbox = new DevInbox();
    const where = `${config.publicUrl}${INBOX_PATH}`;
    return {
      inbox,
      async send(message) {
        const kept = inbox.add(withAppName(message, config.appName), new Date());
        const carries = [kept.code && `code ${kept.code}`, kept.link && `link ${kept.link}`].filter(Boolean).join(', ');
        log.info(
          { mail: { id: kept.id, to: kept.to } },
          `Email to ${kept.to} NOT sent (no SMTP_URL, development only): "${kept.subject}"${carries ? `, ${carries}` : ''}; see ${where}`,
        );
      },
      notSent(to, reason) {
        log.info({ mail: { to } }, `No email to ${to}: ${reason} (development only)`);
      },
      close() {},
    };
  }
  const smtpUrl = config.smtpUrl;
  let transport: import('nodemailer').Transporter | undefined;
  return {
    async send(message) {
      transport ??= (requirePackage('nodemailer') as typeof import('nodemailer')).createTransport(smtpUrl, {
        from: config.mailFrom,
      });
      const { to, subject, text, html } = withAppName(message, config.appName);
      await transport.sendMail({ from: config.mailFrom, to, subject, text, html });
    },
    notSent() {},
    close: () => transport?.close(),
  };
}
