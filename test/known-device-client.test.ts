// The project's client (src/client/) and known devices: a mobile client keeps the deviceToken of
// the session it opened, across logout, and sends it as X-Device-Token, so that its sign-ins are
// not held back by strangers' failures for the address.
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { createClient } from '../src/client/index.ts';
import { PASSWORD } from './helpers/auth.ts';
import { STRANGERS, setUpKnownDevices } from './helpers/known-device.ts';

t.test("the project's client keeps a mobile device's deviceToken and sends it (X-Device-Token)", async (t) => {
  const { s, account, signIn } = await setUpKnownDevices(t, 'device-client');
  const { email } = await account('client');
  await s.app.listen({ port: 0, host: '127.0.0.1' });
  const baseUrl = `http://127.0.0.1:${(s.app.server.address() as AddressInfo).port}`;
  const api = createClient({ baseUrl, clientType: 'mobile' });
  const query = { client_type: 'mobile' } as const;

  const first = await api.POST('/api/auth/sessions', { params: { query }, body: { email, password: PASSWORD } });
  t.equal(first.response.status, 200, 'signed in through the client');
  const kept = api.tokens().deviceToken;
  t.ok(kept, 'the client keeps the deviceToken');
  const logout = await api.POST('/api/auth/logout', { params: { query }, body: {} });
  t.equal(logout.response.status, 204, 'logged out');
  t.equal(api.tokens().deviceToken, kept, 'the deviceToken outlives the session');

  for (let i = 1; i <= 14; i++) {
    await signIn(email, 'wrong password!', { ip: STRANGERS[i % 4] as string });
    if (i >= 6 && i < 14) s.clock.advance(2 ** (i - 6));
  }
  t.equal((await signIn(email, PASSWORD, { client: 'mobile' })).statusCode, 429, 'strangers made the address back off');
  const again = await api.POST('/api/auth/sessions', { params: { query }, body: { email, password: PASSWORD } });
  t.equal(again.response.status, 200, 'the client, sending its deviceToken, signs in at once');
  const fresh = createClient({ baseUrl, clientType: 'mobile' });
  const without = await fresh.POST('/api/auth/sessions', { params: { query }, body: { email, password: PASSWORD } });
  t.equal(without.response.status, 429, 'a client without it waits');
});
