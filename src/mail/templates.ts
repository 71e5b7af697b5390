import { escapeHtml } from '../html-page.ts';
import type { MailMessage } from './mailer.ts';

/** The product's name (APP_NAME) at the top of the email, in both parts. */
export function withAppName(message: MailMessage, appName: string): MailMessage {
  return {
    ...message,
    text: `${appName}\n\n${message.text}`,
    html: `<p style="color:#59636e">${escapeHtml(appName)}</p>\n${message.html}`,
  };
}

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
    code,
    link,
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

/** What a password-reset email says to someone who did not ask for it. */
const NOT_YOUR_RESET =
  'If you did not ask to reset your password, ignore this email and do not pass the code or link on: your password stays as it is, and nobody can change it without them. If such emails keep coming, someone else is asking with your address.';

/** The password-reset email: a 6-digit code and a link with its own token, both in the plain-text part. */
export function passwordResetEmail(to: string, code: string, link: string, minutes: number): MailMessage {
  const expiry = `The code and the link expire in ${minutes} minutes and work once. Resetting the password signs you out everywhere.`;
  return {
    to,
    code,
    link,
    subject: 'Reset your password',
    text: [
      'Someone asked to reset the password of the account with this email address.',
      '',
      `Your code: ${code}`,
      '',
      'Or open this link to choose a new password:',
      link,
      '',
      expiry,
      '',
      NOT_YOUR_RESET,
    ].join('\n'),
    html: `<p>Someone asked to reset the password of the account with this email address.</p>
<p>Your code: <strong style="font-size:1.4em;letter-spacing:0.2em">${escapeHtml(code)}</strong></p>
<p>Or <a href="${escapeHtml(link)}">choose a new password</a>.</p>
<p>${escapeHtml(expiry)}</p>
<p>${escapeHtml(NOT_YOUR_RESET)}</p>`,
  };
}

/** What a sign-in code email says to someone who did not ask for it. */
const NOT_YOUR_SIGN_IN =
  'If you did not ask to sign in, ignore this email and do not pass the code on: nobody can sign in with your address without it.';

/** The sign-in code email (passwordless sign-in): a 6-digit code only. */
export function signInCodeEmail(to: string, code: string, minutes: number): MailMessage {
  const expiry = `The code expires in ${minutes} minutes and works once. If this address has no account yet, signing in with it creates one.`;
  return {
    to,
    code,
    subject: 'Your sign-in code',
    text: ['Sign in with this code.', '', `Your code: ${code}`, '', expiry, '', NOT_YOUR_SIGN_IN].join('\n'),
    html: `<p>Sign in with this code.</p>
<p>Your code: <strong style="font-size:1.4em;letter-spacing:0.2em">${escapeHtml(code)}</strong></p>
<p>${escapeHtml(expiry)}</p>
<p>${escapeHtml(NOT_YOUR_SIGN_IN)}</p>`,
  };
}

/** How the mailbox was proven again when an unproven password was removed (unproven-password.ts). */
export type MailboxProof = 'sign-in code' | 'provider' | 'password reset';

/**
 * Tells the mailbox's owner that a password they may not have chosen is gone: someone signed up
 * with the address, the address was confirmed from elsewhere, and the owner has now proven the
 * mailbox again (`proof`). `unlinked` names the sign-in providers removed with it.
 */
export function unprovenPasswordRemovedNotice(to: string, proof: MailboxProof, unlinked: string[]): MailMessage {
  const how = {
    'sign-in code': 'You signed in with a code sent to this address.',
    provider: 'You signed in with a provider that confirmed this address.',
    'password reset': 'You reset the password of the account with this address.',
  }[proof];
  const removed =
    proof === 'password reset'
      ? 'The password set at sign-up was replaced by the one you chose'
      : 'The password set at sign-up was removed';
  const lines = [
    how,
    '',
    `This account was signed up for with a password, and its address was confirmed from another device than the one that signed up, so that password may have been chosen by someone else. ${removed}, every session of the account was ended${unlinked.length > 0 ? `, and these sign-in providers were unlinked: ${unlinked.join(', ')}` : ''}.`,
    '',
    proof === 'password reset'
      ? 'Nothing else is needed.'
      : 'To sign in with a password from now on, choose one with "Forgot password".',
  ];
  const text = lines.join('\n');
  return {
    to,
    subject: 'A password on your account was removed',
    text,
    html: `<p>${escapeHtml(text).replaceAll('\n\n', '</p><p>')}</p>`,
  };
}

/** What changed about an account's second factors (secondFactorNotice). */
export type SecondFactorChange =
  | 'added'
  | 'passkey added'
  | 'removed'
  | 'removed by an administrator'
  | 'recovery code used';

/**
 * Tells the account's owner that its second factors changed: someone with a session of the account
 * (a stolen password, say) could otherwise add a factor of their own and lock the owner out unseen.
 */
export function secondFactorNotice(to: string, change: SecondFactorChange): MailMessage {
  const what = {
    added: 'A second factor (an authenticator app) was added to your account.',
    'passkey added':
      'A passkey was added to your account: it signs in without a password, and counts as a second factor.',
    removed: 'A second factor was removed from your account.',
    'removed by an administrator':
      'An administrator removed every second factor and recovery code of your account, and ended its sessions.',
    'recovery code used': 'One of your recovery codes was used to sign in to your account.',
  }[change];
  const text = [
    what,
    '',
    'If it was you, nothing else is needed. If it was not, reset your password at once and ask an administrator to remove the second factors you did not add.',
  ].join('\n');
  return {
    to,
    subject:
      change === 'recovery code used' ? 'A recovery code was used' : 'The second factors of your account changed',
    text,
    html: `<p>${escapeHtml(text).replaceAll('\n\n', '</p><p>')}</p>`,
  };
}
