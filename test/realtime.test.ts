import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import t from 'tap';
import { asRealtimeCaller } from '../src/realtime/as-user.ts';
import { buildTestApp } from './helpers/app.ts';
import { usingPostgres } from './helpers/database.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { assertMatchesSchema } from './helpers/spec-schema.ts';
import { accessTokenFor } from './helpers/tokens.ts';

const subscribePolicy = {
  policyName: 'authenticated_can_subscribe_enabled_channels',
  tableName: 'channels',
  command: 'SELECT',
  roles: ['authenticated'],
  using: '(enabled AND (realtime.channel_name() ~~ pattern))',
  withCheck: null,
};

t.test('GET /api/realtime/permissions', async (t) => {
  const { app, database } = await buildTestApp(t);
  const db = database.handle.db;
  const headers = { authorization: `Bearer ${accessTokenFor(app)}` };
  const permissions = async () => {
    const res = await app.inject({ url: '/api/realtime/permissions', headers });
    t.equal(res.statusCode, 200);
    return res.json();
  };
  /** Polls until `check` holds (notification on PostgreSQL, time-to-live on PGlite); returns the wait. */
  const eventually = async (
    check: (body: ReturnType<typeof permissions> extends Promise<infer B> ? B : never) => boolean,
  ) => {
    const started = Date.now();
    for (;;) {
      if (check(await permissions())) return Date.now() - started;
      if (Date.now() - started > 3_000) return Number.POSITIVE_INFINITY;
      await new Promise((r) => setTimeout(r, 25));
    }
  };
  const names = (list: { policies: { policyName: string }[] }) => list.policies.map((p) => p.policyName);

  t.test('the default policies', async (t) => {
    const body = await permissions();
    assertMatchesSchema(t, body, 'RealtimePermissions');
    t.same(body.subscribe.policies, [subscribePolicy]);
    t.same(
      names(body.publish),
      ['authenticated_can_publish_as_self', 'authenticated_can_read_subscribable_channels'],
      'messages: who may publish (INSERT) and who may read the history (SELECT)',
    );
    const read = body.publish.policies[1];
    t.equal(read.command, 'SELECT');
    t.same(read.roles, ['authenticated']);
    t.match(read.using, /channel_name = realtime\.channel_name\(\)/);
    t.equal(read.withCheck, null);
    const publish = body.publish.policies[0];
    t.equal(publish.policyName, 'authenticated_can_publish_as_self');
    t.equal(publish.tableName, 'messages');
    t.equal(publish.command, 'INSERT');
    t.same(publish.roles, ['authenticated'], 'roles is a JSON array, not "{authenticated}"');
    t.equal(publish.using, null);
    t.match(publish.withCheck, /sender_id = auth\.uid\(\)/);
    t.match(publish.withCheck, /channel_name = realtime\.channel_name\(\)/);
  });

  t.test('401 without a token or with a bad one', async (t) => {
    assertErrorBody(t, await app.inject({ url: '/api/realtime/permissions' }), 401, 'UNAUTHORIZED');
    assertErrorBody(
      t,
      await app.inject({ url: '/api/realtime/permissions', headers: { authorization: 'Bearer nope' } }),
      401,
    );
  });

  t.test('a policy created, altered and dropped by SQL shows up each time', async (t) => {
    await permissions(); // cached now
    await sql`
      create policy anyone_reads_public_channels on realtime.channels
        for select to anon, authenticated using (pattern like 'public:%')
    `.execute(db);
    const created = await eventually((b) => names(b.subscribe).includes('anyone_reads_public_channels'));
    t.ok(created < 3_000, `created policy seen after ${created} ms`);
    const body = await permissions();
    t.same(
      names(body.subscribe),
      ['anyone_reads_public_channels', 'authenticated_can_subscribe_enabled_channels'],
      'ordered by policyName',
    );
    const added = body.subscribe.policies[0];
    t.same([...added.roles].sort(), ['anon', 'authenticated'], 'several roles, each a string');
    t.equal(added.using, "(pattern ~~ 'public:%'::text)");
    assertMatchesSchema(t, body, 'RealtimePermissions');

    await sql`alter policy anyone_reads_public_channels on realtime.channels using (pattern like 'open:%')`.execute(db);
    const altered = await eventually((b) =>
      b.subscribe.policies.some((p: { using: string }) => p.using === "(pattern ~~ 'open:%'::text)"),
    );
    t.ok(altered < 3_000, `altered policy seen after ${altered} ms`);

    await sql`create policy publishers_may_insert on realtime.messages for all to authenticated using (true) with check (false)`.execute(
      db,
    );
    const publish = await eventually((b) => names(b.publish).includes('publishers_may_insert'));
    t.ok(publish < 3_000, 'a publish policy too');
    const all = (await permissions()).publish.policies.find(
      (p: { policyName: string }) => p.policyName === 'publishers_may_insert',
    );
    t.same(all, {
      policyName: 'publishers_may_insert',
      tableName: 'messages',
      command: 'ALL',
      roles: ['authenticated'],
      using: 'true',
      withCheck: 'false',
    });

    await sql`drop policy anyone_reads_public_channels on realtime.channels`.execute(db);
    await sql`drop policy publishers_may_insert on realtime.messages`.execute(db);
    const dropped = await eventually(
      (b) =>
        !names(b.subscribe).includes('anyone_reads_public_channels') &&
        !names(b.publish).includes('publishers_may_insert'),
    );
    t.ok(dropped < 3_000, `dropped policies gone after ${dropped} ms`);
    t.same((await permissions()).subscribe.policies, [subscribePolicy]);
  });

  if (usingPostgres) {
    t.test('on PostgreSQL the change arrives by notification, not by expiry', async (t) => {
      await permissions();
      // Longer than the time-to-live would allow if the cache only expired: the listener is what
      // makes the change visible well within it.
      await sql`create policy notified on realtime.channels for select to authenticated using (false)`.execute(db);
      const seen = await eventually((b) => names(b.subscribe).includes('notified'));
      t.ok(seen < 500, `seen after ${seen} ms`);
      await sql`drop policy notified on realtime.channels`.execute(db);
      t.ok((await eventually((b) => !names(b.subscribe).includes('notified'))) < 500);
    });
  }
});

t.test('the default policies allow and deny', async (t) => {
  const { database } = await buildTestApp(t);
  const db = database.handle.db;
  const alice = randomUUID();
  const bob = randomUUID();
  const [room, locked] = await db
    .insertInto('realtime.channels')
    .values([
      { pattern: 'room:%', description: 'chat rooms' },
      { pattern: 'locked:%', description: 'closed', enabled: false },
    ])
    .returning('id')
    .execute();

  const visibleChannels = (userId: string | undefined, channel: string) =>
    asRealtimeCaller(db, { userId, channel }, (trx) => trx.selectFrom('realtime.channels').select('pattern').execute());
  const publish = (
    userId: string | undefined,
    channel: string,
    senderId: string | null,
    channelName = channel,
    channelId: string | null = null,
  ) =>
    asRealtimeCaller(db, { userId, channel }, (trx) =>
      trx
        .insertInto('realtime.messages')
        .values({
          channel_id: channelId,
          channel_name: channelName,
          event: 'chat',
          payload: JSON.stringify({ text: 'hi' }),
          sender_id: senderId,
        })
        .execute(),
    ).then(
      () => 'allowed',
      (err: { code?: string }) => (err.code === '42501' ? 'denied' : `error ${err.code}`),
    );

  t.test('subscribing: an enabled matching channel is allowed, a disabled one denied', async (t) => {
    t.same(await visibleChannels(alice, 'room:42'), [{ pattern: 'room:%' }], 'A may subscribe to room:42');
    t.same(await visibleChannels(alice, 'locked:1'), [], 'A may not subscribe to a disabled channel');
    t.same(await visibleChannels(alice, 'other'), [], 'nor to a channel no pattern matches');
    t.same(await visibleChannels(undefined, 'room:42'), [], 'an anonymous caller sees nothing');
  });

  t.test('publishing: only as oneself, only to an enabled channel, only under its name', async (t) => {
    t.equal(await publish(alice, 'room:42', alice), 'allowed', 'A publishes as A');
    t.equal(await publish(alice, 'room:42', bob), 'denied', 'A may not publish as B');
    t.equal(await publish(alice, 'room:42', null), 'denied', 'nor without a sender');
    t.equal(await publish(alice, 'locked:1', alice), 'denied', 'nor to a disabled channel');
    t.equal(await publish(alice, 'room:42', alice, 'room:43'), 'denied', 'nor under another channel’s name');
    t.equal(await publish(undefined, 'room:42', alice), 'denied', 'an anonymous caller may not publish');
    t.equal(await publish(alice, 'room:42', alice, 'room:42', room?.id), 'allowed', 'into the channel row it matches');
    t.equal(
      await publish(alice, 'room:42', alice, 'room:42', locked?.id),
      'denied',
      'but not into another (disabled) channel’s row',
    );
    const forged = await asRealtimeCaller(db, { userId: alice, channel: 'room:42' }, (trx) =>
      sql`insert into realtime.messages (channel_name, event, sender_id, sender_type) values ('room:42', 'x', ${alice}, 'system')`.execute(
        trx,
      ),
    ).then(
      () => 'allowed',
      (err: { code?: string }) => (err.code === '42501' ? 'denied' : `error ${err.code}`),
    );
    t.equal(forged, 'denied', 'a caller cannot claim to be the system (sender_type is the database’s)');
    const stored = await db.selectFrom('realtime.messages').select(['channel_name', 'sender_id']).execute();
    t.same(
      stored,
      [
        { channel_name: 'room:42', sender_id: alice },
        { channel_name: 'room:42', sender_id: alice },
      ],
      'exactly the allowed messages were stored',
    );
  });

  t.test('the settings and the role end with the transaction', async (t) => {
    await visibleChannels(alice, 'room:1');
    const after = await sql<{ uid: string | null; role: string; channel: string | null; user: string }>`
      select auth.uid() as uid, auth.role() as role, realtime.channel_name() as channel, current_user as "user"
    `.execute(db);
    t.same(after.rows[0], { uid: null, role: 'anon', channel: null, user: after.rows[0]?.user });
    t.not(after.rows[0]?.user, 'authenticated');
    const inside = await asRealtimeCaller(db, { userId: alice, channel: 'room:1' }, (trx) =>
      sql<{ uid: string; role: string; channel: string; user: string }>`
        select auth.uid() as uid, auth.role() as role, realtime.channel_name() as channel, current_user as "user"
      `.execute(trx),
    );
    t.same(inside.rows[0], { uid: alice, role: 'authenticated', channel: 'room:1', user: 'authenticated' });
  });
});
