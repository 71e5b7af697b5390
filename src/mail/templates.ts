import type { MailMessage } from './mailer.ts';

const escapeHtml = (s: string) =>
  s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] as string);

/** The verification email: the 6-digit code and the magic link, both in the plain-text part. */
export function verificationEmail(to: string, code: string, link: string, minutes: number): MailMessage {
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
      `The code and the link expire in ${minutes} minutes and work once. If you did not sign up, ignore this email.`,
    ].join('\n'),
    html: `<p>Confirm your email address.</p>
<p>Your code: <strong style="font-size:1.4em;letter-spacing:0.2em">${escapeHtml(code)}</strong></p>
<p>Or <a href="${escapeHtml(link)}">confirm with one click</a>.</p>
<p>The code and the link expire in ${minutes} minutes and work once. If you did not sign up, ignore this email.</p>`,
  };
}

/** Sent instead of a code when someone signs up with an address that already has an account. */
export function existingAccountNotice(to: string): MailMessage {
  const text = [
    'Someone tried to create an account with this email address, which already has one.',
    '',
    'If it was you, sign in instead (or reset your password). If not, you can ignore this email: nothing has changed.',
  ].join('\n');
  return { to, subject: 'You already have an account', text, html: `<p>${text.replaceAll('\n\n', '</p><p>')}</p>` };
}
