import { allowedRedirect } from '../auth/redirects.ts';
import type { AppContext } from '../context.ts';
import { eventClient, presentedDeviceSignals } from './auth.ts';
import type { HandlersFor } from './types.ts';

type EmailCodeOperations = 'sendOtpEmail' | 'sendResetPasswordEmail' | 'exchangeResetPasswordToken' | 'resetPassword';

/** Handlers of passwordless sign-in codes and password resets (tag `auth`; sign-in itself is createSession). */
export function emailCodeHandlers(ctx: AppContext): HandlersFor<EmailCodeOperations> {
  const { auth, config } = ctx;
  return {
    async sendOtpEmail(request, reply) {
      await auth.sendSignInCode(request.body.email, { ip: request.ip, devices: presentedDeviceSignals(request) });
      reply.code(202);
      return {
        success: true as const,
        message: 'If sign-in by email code is available for this address, a code is on its way.',
      };
    },

    async sendResetPasswordEmail(request, reply) {
      // A pure check of the input, before anything is looked up: its answer says nothing of the address.
      const redirectTo = allowedRedirect(config, request.body.redirectTo);
      const client = { ip: request.ip, devices: presentedDeviceSignals(request) };
      await auth.sendPasswordReset(request.body.email, client, redirectTo);
      reply.code(202);
      return {
        success: true as const,
        message: 'If the address belongs to an account, an email with a reset code and link is on its way.',
      };
    },

    async exchangeResetPasswordToken(request) {
      return auth.exchangeResetCode(request.body.email, request.body.code);
    },

    async resetPassword(request) {
      await auth.resetPassword(request.body.otp, request.body.newPassword, eventClient(request));
      return { message: 'Your password has been reset. Sign in with the new password.' };
    },
  } satisfies HandlersFor<EmailCodeOperations>;
}
