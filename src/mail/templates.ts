import type { MailMessage } from './mailer.ts';

const escapeHtml = (s: string) =>
  s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] as string);

/** What a verification email says to someone who did not ask for it. */
const NOT_YOU =
  'If you did not sign up, do not use this code or link and do not pass them on: ignore this email, and nobody can use this address here.';
/** Added when more than one sign-up was made for the address before it was confirmed. */
const CONTESTED =
  'More than one sign-up was made with this address. Confirming it signs you in but sets no password: once signed in, choose a new one.';

/** The verification email: the 6-digit code and the magic link, both in the plain-text part. */
export function verificationEmail(
  to: string,
  code: string,
  link: string,
  minutes: number,
  contested = false,
): MailMessage {
  const expiry = `The code and the link expire in ${minutes} minutes and work once.`;
  return {
    to,
    subject: 'Confirm your email address',
    text: [
      'Confirm your email address.',
      '',
      `Your code: ${code}`,
      '',
      'Or open this link:',
      link,
      '',
      ...(contested ? [CONTESTED, ''] : []),
      expiry,
      '',
      NOT_YOU,
    ].join('\n'),
    html: `<p>Confirm your email address.</p>
<p>Your code: <strong style="font-size:1.4em;letter-spacing:0.2em">${escapeHtml(code)}</strong></p>
<p>Or <a href="${escapeHtml(link)}">confirm with one click</a>.</p>
${contested ? `<p>${escapeHtml(CONTESTED)}</p>\n` : ''}<p>${expiry}</p>
<p>${escapeHtml(NOT_YOU)}</p>`,
  };
}

/** Sent instead of a code when someone signs up with an address that already has an account. */
export function existingAccountNotice(to: string): MailMessage {
  const text = [
    'Someone tried to create an account with this email address, which already has one.',
    '',
    'If it was you, sign in instead; if you have not chosen a password yet, ask for a new verification email: its code or link signs you in. If it was not you, ignore this email: nothing has changed, and no password was set.',
  ].join('\n');
  return { to, subject: 'You already have an account', text, html: `<p>${text.replaceAll('\n\n', '</p><p>')}</p>` };
}
