import type { AddressInfo } from 'node:net';
import { simpleParser } from 'mailparser';
import { SMTPServer } from 'smtp-server';

export interface ReceivedMail {
  to: string[];
  from: string;
  subject: string;
  text: string;
  html: string;
  /** The 6-digit code in the plain-text part, if any. */
  code: string | undefined;
  /** The 64-hex token of the verification link in the plain-text part, if any. */
  token: string | undefined;
  /** The full verification link in the plain-text part, if any. */
  link: string | undefined;
}

/** A real SMTP server on loopback that keeps every message it receives. */
export interface SmtpCapture {
  url: string;
  messages: ReceivedMail[];
  /** Messages sent to one address (case-insensitive). */
  to(address: string): ReceivedMail[];
  /** Waits until `count` messages have arrived for an address (or anyone when address is undefined). */
  waitFor(address: string | undefined, count?: number, timeoutMs?: number): Promise<ReceivedMail[]>;
  close(): Promise<void>;
}

export async function startSmtpCapture(): Promise<SmtpCapture> {
  const messages: ReceivedMail[] = [];
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS'],
    logger: false,
    onData(stream, session, callback) {
      simpleParser(stream)
        .then((mail) => {
          const text = mail.text ?? '';
          const link = /https?:\/\/\S+[?&]token=[0-9a-f]{64}/.exec(text)?.[0];
          messages.push({
            to: (session.envelope.rcptTo ?? []).map((r) => r.address.toLowerCase()),
            from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
            subject: mail.subject ?? '',
            text,
            html: typeof mail.html === 'string' ? mail.html : '',
            code: /\b(\d{6})\b/.exec(text)?.[1],
            token: link ? /token=([0-9a-f]{64})/.exec(link)?.[1] : undefined,
            link,
          });
          callback();
        })
        .catch((err: Error) => callback(err));
    },
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.server.address() as AddressInfo;
  const to = (address: string) => messages.filter((m) => m.to.includes(address.toLowerCase()));
  return {
    url: `smtp://127.0.0.1:${port}`,
    messages,
    to,
    async waitFor(address, count = 1, timeoutMs = 5000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const got = address === undefined ? messages : to(address);
        if (got.length >= count) return got;
        if (Date.now() > deadline)
          throw new Error(`expected ${count} message(s) for ${address ?? 'anyone'}, got ${got.length}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
