// The owner always gets a way back in by email (src/db/repositories/address-limits.ts): an
// address's daily emails used up by strangers from several client addresses, then the owner asks
// (the reserve: one reset or sign-in email per 15 minutes beyond the budget), and the owner's known
// devices ask (their own budget, at once), while forged, other accounts' and expired device
// signals count for nothing. Every email through the real SMTP capture.
import t from 'tap';
import { deriveKeys } from '../src/auth/crypto.ts';
import { newDeviceId, signDevice } from '../src/auth/known-device.ts';
import { newEmail } from './helpers/auth.ts';
import { arrives, JWT_SECRET, OWNER_IP, STRANGERS, settled, setUpKnownDevices } from './helpers/known-device.ts';

t.test(
  'strangers use up the daily emails: the owner still gets one within 15 minutes, a known device at once',
  async (t) => {
    const { s, account, send } = await setUpKnownDevices(t, 'device-emails');
    const owner = await account('owner');
    t.match(owner.cookie, /^d1\./, 'the web sign-up set the device cookie');
    t.match(owner.token, /^d1\./, 'the mobile sign-in handed out a deviceToken');
    const other = await account('other');
    const { email } = owner;

    // The drain (the issue's): requesters send send-otp three times each, 61 s apart, until the
    // address has had its 10 emails of the day.
    for (let i = 0; i < 10; i++) {
      t.equal((await send('send-otp', email, STRANGERS[Math.floor(i / 3)] as string)).statusCode, 202);
      s.clock.advance(61);
    }
    await s.smtp.waitFor(email, 10);
    t.equal(await settled(s, email), 10, "the strangers used up the address's 10 emails of the day");

    // The owner asks for a reset from another client address, without a known device: the reserve.
    t.equal((await send('send-reset-password', email, OWNER_IP)).statusCode, 202);
    t.ok(await arrives(s, email, 11), 'the owner asking for a reset gets the email at once (the reserve)');
    t.match(s.smtp.to(email)[10]?.subject ?? '', /reset/i, 'a reset email');

    // Then a sign-in code: the reserve gives one email per 15 minutes, so it comes when the owner
    // asks again once they are over; strangers asking meanwhile get nothing, from any address.
    s.clock.advance(61);
    t.equal((await send('send-otp', email, OWNER_IP)).statusCode, 202);
    for (let minute = 0; minute < 12; minute += 2) {
      s.clock.advance(120);
      for (const ip of [...STRANGERS, '192.0.2.77']) {
        t.equal((await send(minute % 4 === 0 ? 'send-otp' : 'send-reset-password', email, ip)).statusCode, 202);
      }
    }
    t.equal(await settled(s, email), 11, 'nothing more for 15 minutes, whoever asks');
    s.clock.advance(120);
    t.equal((await send('send-otp', email, OWNER_IP)).statusCode, 202);
    t.ok(await arrives(s, email, 12), 'the owner asking again 15 minutes after the first ask gets a sign-in code');
    const code = s.smtp.to(email)[11]?.code;
    const byCode = await s.app.inject({
      method: 'POST',
      url: '/api/auth/sessions',
      payload: { method: 'otp', email, otp: code },
      remoteAddress: OWNER_IP,
    });
    t.equal(byCode.statusCode, 200, 'the code in it signs the owner in');

    // The next reserve email, 15 minutes on, may go to a stranger's ask: it still reaches only the
    // owner's mailbox, and no one gets another for 15 minutes.
    s.clock.advance(15 * 60);
    t.equal((await send('send-reset-password', email, STRANGERS[1] as string)).statusCode, 202);
    t.ok(await arrives(s, email, 13), "a stranger's ask takes the reserve (the email goes to the owner)");
    s.clock.advance(5 * 60);
    t.equal((await send('send-reset-password', email, OWNER_IP)).statusCode, 202);
    t.equal(
      await settled(s, email),
      13,
      'the owner asking 5 minutes later without a known device: the reserve is taken',
    );

    // Known devices: at once, while the reserve is taken and the strangers' budget is used up.
    const withCookie = (value: string) => ({ cookie: `device_id=${value}` });
    t.equal((await send('send-reset-password', email, OWNER_IP, withCookie(owner.cookie))).statusCode, 202);
    t.ok(await arrives(s, email, 14), 'the web device (its cookie) gets a reset email at once');
    t.match(s.smtp.to(email)[13]?.subject ?? '', /reset/i, 'a reset email');
    const deviceHeader = { 'x-device-token': owner.token };
    t.equal((await send('send-otp', email, STRANGERS[2] as string, deviceHeader)).statusCode, 202);
    t.ok(
      await arrives(s, email, 15),
      'the mobile device (X-Device-Token) gets a sign-in code at once, from any network',
    );

    // No one else counts as a known device, and the answers are the same for everyone.
    s.clock.advance(61);
    const [version, id, expiry, mac] = owner.cookie.split('.') as [string, string, string, string];
    const forgedMac = `${version}.${id}.${expiry}.${mac.slice(0, -1)}${mac.endsWith('0') ? '1' : '0'}`;
    const longer = `${version}.${id}.${Number(expiry) + 86_400}.${mac}`;
    const keys = deriveKeys(JWT_SECRET);
    const expired = signDevice(keys.device, newDeviceId(), owner.userId, new Date(Date.now() - 366 * 86_400_000));
    const refused: [string, Record<string, string>][] = [
      ['a forged cookie (changed signature)', withCookie(forgedMac)],
      ['a cookie with a later expiry than it was signed with', withCookie(longer)],
      ["another account's cookie", withCookie(other.cookie)],
      ["another account's device token", { 'x-device-token': other.token }],
      ['an expired cookie', withCookie(expired)],
      ['an expired device token', { 'x-device-token': expired }],
    ];
    for (const [what, headers] of refused) {
      for (const kind of ['send-otp', 'send-reset-password'] as const) {
        const res = await send(kind, email, '192.0.2.99', headers);
        t.equal(res.statusCode, 202, `${what}, ${kind}: 202`);
        t.same(
          res.json(),
          (await send(kind, newEmail('nobody'), '192.0.2.98', headers)).json(),
          `${what}: the same body`,
        );
      }
    }
    t.equal(await settled(s, email), 15, 'none of them got an email');

    // The known device's own budget: 5 emails a day per device (one per 60 s).
    let sent = 15;
    for (let i = 2; i <= 6; i++) {
      s.clock.advance(61);
      await send('send-otp', email, OWNER_IP, withCookie(owner.cookie));
      const expected = i <= 5 ? sent + 1 : sent;
      t.equal(await settled(s, email), expected, `web device email ${i}: ${i <= 5 ? 'sent' : 'over its 5 a day'}`);
      sent = expected;
    }
  },
);

t.test("new devices share the address's 10 known-device emails a day", async (t) => {
  const { s, account, send } = await setUpKnownDevices(t, 'device-cap');
  const owner = await account('many-devices');
  const { device_epoch: epoch } = await s.database.handle.db
    .selectFrom('users')
    .select('device_epoch')
    .where('id', '=', owner.userId)
    .executeTakeFirstOrThrow();
  const keys = deriveKeys(JWT_SECRET);
  // Each sign-in of the account mints a device: twelve of them, each asking once, 61 s apart.
  for (let i = 1; i <= 12; i++) {
    s.clock.advance(61);
    const token = signDevice(keys.device, newDeviceId(), `${owner.userId}.${epoch}`, s.clock.now());
    t.equal((await send('send-otp', owner.email, OWNER_IP, { 'x-device-token': token })).statusCode, 202);
  }
  t.equal(await settled(s, owner.email), 10, 'ten emails: the eleventh and twelfth devices found the cap reached');
});
