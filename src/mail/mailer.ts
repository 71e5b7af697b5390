import { createRequire } from 'node:module';
import type { FastifyBaseLogger } from 'fastify';
import type { Config } from '../config.ts';

// Loaded only when SMTP is configured: about 60 ms at start.
const requirePackage = createRequire(import.meta.url);

export interface MailMessage {
  to: string;
  subject: string;
  text: string;
  html: string;
}

/** Sends mail; the only outgoing side effect of the accounts flow. */
export interface Mailer {
  send(message: MailMessage): Promise<void>;
  /**
   * An email that was asked for and not sent (`reason` says why). Only the development mailer says
   * so, in the log where its reader waits for the email; the answer to the request never does.
   */
  notSent(to: string, reason: string): void;
  close(): void;
}

/**
 * SMTP through nodemailer when SMTP_URL is set. Without it (never in production: config refuses)
 * every message is written to the log, code and link included, with a warning that nothing is sent.
 */
export function createMailer(config: Readonly<Config>, log: FastifyBaseLogger): Mailer {
  if (config.smtpUrl === undefined) {
    return {
      async send(message) {
        log.warn(
          { mail: { to: message.to, subject: message.subject, text: message.text } },
          'SMTP_URL is not set: this email was NOT sent; its content is logged instead (development only)',
        );
      },
      notSent(to, reason) {
        log.info({ mail: { to } }, `No email to ${to}: ${reason} (development only)`);
      },
      close() {},
    };
  }
  const nodemailer = requirePackage('nodemailer') as typeof import('nodemailer');
  const transport = nodemailer.createTransport(config.smtpUrl, { from: config.mailFrom });
  return {
    async send(message) {
      await transport.sendMail({ from: config.mailFrom, ...message });
    },
    notSent() {},
    close: () => transport.close(),
  };
}
