/**
 * Two routes on PORT, alike but for the assurance-level check every operation with a Bearer token
 * runs (requireAssurance, src/operation-rules.ts): `/without` answers after the claims are set,
 * `/with` runs the check first. The claims are set by an onRequest hook, as the bearer check sets them.
 */
import { randomUUID } from 'node:crypto';
import Fastify from 'fastify';
import { operations } from '../generated/contract.ts';
import type { AccessTokenClaims } from '../src/auth/access-token.ts';
import { requireAssurance } from '../src/operation-rules.ts';

const claims: AccessTokenClaims = {
  sub: randomUUID(),
  email: 'bench@example.com',
  role: 'user',
  sid: randomUUID(),
  token_use: 'access',
  aal: 'aal2',
  amr: [{ method: 'password', timestamp: 0 }],
};
const app = Fastify({ logger: false });
app.decorateRequest('user', null as unknown as AccessTokenClaims);
app.addHook('onRequest', (request, _reply, done) => {
  request.user = claims;
  done();
});
const answer = async () => ({ status: 'ok' });
app.get('/without', answer);
app.get(
  '/with',
  {
    preHandler: [
      requireAssurance(operations.getRealtimePermissions, { mfa: { issuer: 'x', requiredForAdmins: false } }),
    ],
  },
  answer,
);
await app.listen({ port: Number(process.env.PORT), host: '127.0.0.1' });
process.on('SIGTERM', () => void app.close().then(() => process.exit(0)));
