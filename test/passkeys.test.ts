// Passkeys without a browser: what the service answers before and around a ceremony. The
// ceremonies themselves, and the refusals of genuine assertions, are test/browser-passkeys.test.ts.
import t from 'tap';
import { buildAuthTestApp, decodeClaims, PASSWORD } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import {
  authenticationResponse,
  newSoftwareCredential,
  registrationResponse,
} from './helpers/software-authenticator.ts';

const s = await buildAuthTestApp(t, {
  label: 'passkeys',
  env: { PUBLIC_URL: 'http://localhost:7130', RATE_LIMIT_SIGN_IN: '1000', RATE_LIMIT_VERIFY: '1000' },
});
const { app } = s;
const db = s.database.handle.db;

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const options = (body: object, token?: string) =>
  app.inject({
    method: 'POST',
    url: '/api/auth/passkeys/authentication/options',
    headers: token === undefined ? {} : bearer(token),
    payload: body,
  });

async function signIn(email: string): Promise<string> {
  const res = await app.inject({
    method: 'POST',
    url: '/api/auth/sessions?client_type=mobile',
    payload: { email, password: PASSWORD },
  });
  t.equal(res.statusCode, 200, res.body);
  return res.json().accessToken as string;
}

/** A passkey row for an account, as a registration would leave it (its key is never used here). */
async function storedPasskey(userId: string, credentialId: string) {
  return db
    .insertInto('passkeys')
    .values({
      user_id: userId,
      credential_id: credentialId,
      public_key: 'pQECAyYgASFYIA',
      counter: 0,
      transports: JSON.stringify(['internal']),
      device_type: 'multiDevice',
      backed_up: true,
      friendly_name: null,
      created_at: new Date(),
    })
    .returning('id')
    .executeTakeFirstOrThrow();
}

t.test('sign-in options: the same for any address; a session gets its own passkeys', async (t) => {
  const withPasskey = await s.verifiedAccount('pk-with');
  const withoutPasskey = await s.verifiedAccount('pk-without');
  const token = await signIn(withPasskey);
  const userId = decodeClaims(token).sub as string;
  await storedPasskey(userId, 'cmVhbC1jcmVkZW50aWFsLWlk');

  const answers = [];
  for (const body of [{ email: withPasskey }, { email: withoutPasskey }, { email: 'nobody-here@example.com' }, {}]) {
    const res = await options(body);
    t.equal(res.statusCode, 200, `${JSON.stringify(body)}: ${res.body}`);
    answers.push(res.json());
  }
  const comparable = (answer: { challengeId: string; options: Record<string, unknown> }): Record<string, unknown> => ({
    ...answer.options,
    challenge: typeof answer.options.challenge,
    challengeId: answer.challengeId.length,
  });
  const [real, ...others] = answers.map(comparable);
  for (const other of others) t.same(other, real, 'the same answer whatever the address, or none');
  t.same(real?.allowCredentials, [], 'discoverable: no passkey is listed for an address');
  t.equal(real?.userVerification, 'required');
  const own = (await options({}, token)).json();
  t.same(
    own.options.allowCredentials.map((c: { id: string }) => c.id),
    ['cmVhbC1jcmVkZW50aWFsLWlk'],
    'with a session’s token: that account’s passkeys',
  );
  const stored = await db
    .selectFrom('one_time_codes')
    .select(['code_hmac', 'token_hash'])
    .where('purpose', '=', 'passkey_authentication')
    .execute();
  t.ok(stored.length >= 5, 'each challenge is kept');
  for (const row of stored) {
    t.notOk(JSON.stringify(answers).includes(row.code_hmac ?? '-'), 'as an HMAC, never as sent');
  }
});

t.test('registration and sign-in answers without a live challenge', async (t) => {
  const email = await s.verifiedAccount('pk-nochallenge');
  const token = await signIn(email);
  const response = {
    id: 'AAAA',
    rawId: 'AAAA',
    type: 'public-key',
    response: { clientDataJSON: 'e30', attestationObject: 'oA' },
  };
  const noOptions = await app.inject({
    method: 'POST',
    url: '/api/auth/passkeys/registration/verify',
    headers: bearer(token),
    payload: { response },
  });
  assertErrorBody(t, noOptions, 400, 'PASSKEY_REGISTRATION_INVALID');
  const created = await app.inject({
    method: 'POST',
    url: '/api/auth/passkeys/registration/options',
    headers: bearer(token),
  });
  t.equal(created.statusCode, 200, created.body);
  t.same(created.json().authenticatorSelection, {
    residentKey: 'required',
    requireResidentKey: true,
    userVerification: 'required',
  });
  const garbage = await app.inject({
    method: 'POST',
    url: '/api/auth/passkeys/registration/verify',
    headers: bearer(token),
    payload: { response },
  });
  assertErrorBody(t, garbage, 400, 'PASSKEY_REGISTRATION_INVALID');
  const used = await app.inject({
    method: 'POST',
    url: '/api/auth/passkeys/registration/verify',
    headers: bearer(token),
    payload: { response },
  });
  assertErrorBody(t, used, 400, 'PASSKEY_REGISTRATION_INVALID'); // the challenge went with the first answer

  const unknown = await app.inject({
    method: 'POST',
    url: '/api/auth/passkeys/authentication/verify?client_type=mobile',
    payload: {
      challengeId: 'A'.repeat(43),
      response: {
        id: 'AAAA',
        rawId: 'AAAA',
        type: 'public-key',
        response: { clientDataJSON: 'e30', authenticatorData: 'AA', signature: 'AA' },
      },
    },
  });
  assertErrorBody(t, unknown, 401, 'PASSKEY_REFUSED');
  assertErrorBody(t, await options({}, 'not-a-token'), 401, 'AUTH_UNAUTHORIZED'); // a token sent must verify
});

t.test(
  'another account’s passkey and an unknown id: the same 404; deleting an account deletes its passkeys',
  async (t) => {
    const owner = await s.verifiedAccount('pk-owner');
    const ownerId = decodeClaims(await signIn(owner)).sub as string;
    const { id } = await storedPasskey(ownerId, 'b3duZXItY3JlZGVudGlhbA');
    const other = await signIn(await s.verifiedAccount('pk-stranger'));
    for (const passkeyId of [id, '00000000-0000-4000-8000-000000000000', 'not-a-uuid']) {
      const renamed = await app.inject({
        method: 'PATCH',
        url: `/api/auth/passkeys/${passkeyId}`,
        headers: bearer(other),
        payload: { friendlyName: 'Mine now' },
      });
      assertErrorBody(t, renamed, 404, 'NOT_FOUND');
      t.equal(renamed.json().message, 'No such passkey');
      const removed = await app.inject({
        method: 'DELETE',
        url: `/api/auth/passkeys/${passkeyId}`,
        headers: bearer(other),
      });
      assertErrorBody(t, removed, 404, 'NOT_FOUND');
    }
    t.equal(
      (await app.inject({ method: 'GET', url: '/api/auth/passkeys', headers: bearer(other) })).json().passkeys.length,
      0,
    );
    await db.deleteFrom('users').where('id', '=', ownerId).execute();
    const left = await db.selectFrom('passkeys').select('id').where('user_id', '=', ownerId).execute();
    t.same(left, [], 'deleting the account deleted its passkeys');
  },
);

t.test('what a browser would not send: an oversized credential id, transports WebAuthn does not name', async (t) => {
  const email = await s.verifiedAccount('pk-software');
  let token = await signIn(email);
  const ceremony = async () => {
    const res = await app.inject({
      method: 'POST',
      url: '/api/auth/passkeys/registration/options',
      headers: bearer(token),
    });
    t.equal(res.statusCode, 200, res.body);
    return { challenge: res.json().challenge as string, origin: 'http://localhost:7130', rpId: 'localhost' };
  };
  const register = async (response: object) =>
    app.inject({
      method: 'POST',
      url: '/api/auth/passkeys/registration/verify',
      headers: bearer(token),
      payload: { response },
    });

  const oversized = newSoftwareCredential(1100);
  const refused = await register(registrationResponse(oversized, await ceremony()));
  assertErrorBody(t, refused, 400, 'PASSKEY_REGISTRATION_INVALID');
  t.match(refused.json().message, /at most 1023 bytes/);

  const credential = newSoftwareCredential();
  const registered = await register(
    registrationResponse(credential, await ceremony(), ['USB', 'internal', 'internal', 'teleport', 'hybrid']),
  );
  t.equal(registered.statusCode, 201, registered.body);
  t.same(registered.json().transports, ['internal', 'hybrid'], 'only the names WebAuthn defines, once each');
  token = registered.json().session.accessToken;
  t.equal(decodeClaims(token).aal, 'aal2', 'the session that made the first factor is raised');

  // The same credential signs in (the software authenticator is a real one as far as the service knows).
  const begun = (await options({})).json();
  const signedIn = await app.inject({
    method: 'POST',
    url: '/api/auth/passkeys/authentication/verify?client_type=mobile',
    payload: {
      challengeId: begun.challengeId,
      response: authenticationResponse(credential, {
        challenge: begun.options.challenge,
        origin: 'http://localhost:7130',
        rpId: 'localhost',
      }),
    },
  });
  t.equal(signedIn.statusCode, 200, signedIn.body);
  t.equal(decodeClaims(signedIn.json().accessToken).aal, 'aal2');
});
