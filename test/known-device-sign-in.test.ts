// Known devices and the sign-in back-off (src/auth/known-device.ts, OWASP's device cookies): the
// known device's own back-off, which strangers' failures for the address do not hold back (they
// stay throttled), while forged, other accounts' and expired signals get no exemption.
import t from 'tap';
import { deriveKeys } from '../src/auth/crypto.ts';
import { signDevice } from '../src/auth/known-device.ts';
import { PASSWORD } from './helpers/auth.ts';
import { deviceCookie, JWT_SECRET, OWNER_IP, STRANGERS, setUpKnownDevices } from './helpers/known-device.ts';

t.test("a known device is exempt from the address's back-off that strangers' failures built up", async (t) => {
  const { s, account, signIn } = await setUpKnownDevices(t, 'device-backoff');
  const owner = await account('owner');
  t.match(owner.cookie, /^d1\./, 'the web sign-up set the device cookie');
  t.match(owner.token, /^d1\./, 'the mobile sign-in handed out a deviceToken');
  const other = await account('other');
  const { email } = owner;

  // Strangers: 14 wrong passwords (5 free, then waits of 1 s, 2 s, ... 128 s): the next must
  // wait 256 s (long enough that the real time the test takes cannot end it).
  for (let i = 1; i <= 14; i++) {
    const res = await signIn(email, 'wrong password!', { ip: STRANGERS[i % 4] as string });
    t.equal(res.statusCode, 401, `stranger's wrong password ${i}`);
    if (i >= 6 && i < 14) s.clock.advance(2 ** (i - 6));
  }
  const stranger = await signIn(email, 'wrong password!', { ip: STRANGERS[0] });
  t.equal(stranger.statusCode, 429, 'a stranger is backing off');
  t.ok(Number(stranger.headers['retry-after']) > 250, `for 256 s (${stranger.headers['retry-after']})`);

  const withCookie = (value: string) => ({ cookie: `device_id=${value}` });
  const web = await signIn(email, PASSWORD, { ip: OWNER_IP, headers: withCookie(owner.cookie) });
  t.equal(web.statusCode, 200, "the owner's web device (cookie) signs in at once");
  t.equal(deviceCookie(web).split('.')[1], owner.cookie.split('.')[1], 'a known device keeps its device id');
  // Cookies planted by a sibling host on longer paths and parent domains are sent before the
  // owner's own: a dozen of them, junk and another account's.
  const junk = Array.from({ length: 11 }, (_, i) => `device_id=planted-${i}`).join('; ');
  const planted = await signIn(email, PASSWORD, {
    ip: OWNER_IP,
    headers: { cookie: `${junk}; device_id=${other.cookie}; device_id=${owner.cookie}` },
  });
  t.equal(planted.statusCode, 200, "planted device cookies sent first do not hide the owner's own");
  const mobile = await signIn(email, PASSWORD, {
    client: 'mobile',
    ip: STRANGERS[1],
    headers: { 'x-device-token': owner.token },
  });
  t.equal(
    mobile.statusCode,
    200,
    "the owner's mobile device (X-Device-Token) signs in at once, from a stranger's network",
  );
  const otp = await s.app.inject({
    method: 'POST',
    url: '/api/auth/sessions',
    payload: { method: 'otp', email, otp: '000000' },
    remoteAddress: OWNER_IP,
    headers: withCookie(owner.cookie),
  });
  t.equal(otp.statusCode, 400, 'an email-code sign-in from the known device is checked (not held back)');

  const stillBackingOff = await signIn(email, PASSWORD, { ip: STRANGERS[2] });
  t.equal(stillBackingOff.statusCode, 429, "the owner's sign-ins did not clear the strangers' back-off");

  const [version, id, expiry, mac] = owner.cookie.split('.') as [string, string, string, string];
  const forged = `${version}.${id}.${expiry}.${mac.slice(0, -1)}${mac.endsWith('0') ? '1' : '0'}`;
  const expired = signDevice(
    deriveKeys(JWT_SECRET).device,
    id,
    owner.userId,
    new Date(s.clock.now().getTime() - 366 * 86_400_000),
  );
  const refused: [string, Record<string, string>, 'web' | 'mobile'][] = [
    ['a forged cookie', withCookie(forged), 'web'],
    ["another account's cookie", withCookie(other.cookie), 'web'],
    ["another account's device token", { 'x-device-token': other.token }, 'mobile'],
    ['an expired cookie (same device id, signed a year and a day ago)', withCookie(expired), 'web'],
    ['an expired device token', { 'x-device-token': expired }, 'mobile'],
  ];
  for (const [what, headers, client] of refused) {
    const res = await signIn(email, PASSWORD, { client, ip: OWNER_IP, headers });
    t.equal(res.statusCode, 429, `${what}: no exemption (429, the password not checked)`);
  }

  // The known device's own failures back it off, not the owner's other device (the wrong code
  // above was its first).
  for (let i = 2; i <= 6; i++) {
    t.equal((await signIn(email, 'wrong password!', { headers: withCookie(owner.cookie) })).statusCode, 401);
  }
  t.equal(
    (await signIn(email, PASSWORD, { headers: withCookie(owner.cookie) })).statusCode,
    429,
    "the web device's own 6 failures back it off",
  );
  const mobileAgain = await signIn(email, PASSWORD, { client: 'mobile', headers: { 'x-device-token': owner.token } });
  t.equal(mobileAgain.statusCode, 200, 'the mobile device is not held back by them');
});
