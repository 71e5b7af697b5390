// The realtime socket.io server end to end, as a client sees it (/tmp/rt/protocol.md, asyncapi.yaml):
// handshake, the subscribe and publish policies, delivery, presence, malformed requests, token
// expiry, order, slow consumers and retention. Every socket is checked against asyncapi.yaml.
import { randomUUID } from 'node:crypto';
import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { FastifyInstance } from 'fastify';
import { type Kysely, type RawBuilder, sql } from 'kysely';
import t, { type Test } from 'tap';
import type { Env } from '../src/config.ts';
import type { Database } from '../src/db/schema.ts';
import { deleteExpiredMessages } from '../src/realtime/retention.ts';
import { buildTestApp } from './helpers/app.ts';
import type { CheckedSocket } from './helpers/asyncapi-check.ts';
import { decodeClaims } from './helpers/auth.ts';
import {
  type Ack,
  collect,
  commitOrder,
  disconnection,
  emitUnchecked,
  emitUncheckedWithAck,
  expectNothing,
  nextEvent,
  publish,
  RealtimeClients,
  subscribe,
  subscribed,
  tcpSocketOf,
  unsubscribe,
  urlOf,
  waitForCount,
  waitUntil,
} from './helpers/realtime-client.ts';
import { accessClaims, accessTokenFor, currentSigningKey, forgeJwt, type StolenKey } from './helpers/tokens.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
/** How long "nothing arrives" is watched, once a control subscriber has received what was sent. */
const QUIET_MS = 200;

/** The channel patterns every app of this file starts with. */
const CHANNELS = [
  { pattern: 'room:%', description: 'chat rooms' },
  { pattern: 'locked:%', description: 'disabled', enabled: false },
  { pattern: 'secret:%', description: 'enabled, for the restrictive-policy test' },
  { pattern: 'closing:%', description: 'disabled by a test after subscribing' },
];

/** The tests below publish hundreds of messages from one socket at once: the per-connection publish rate must not refuse them. */
const UNLIMITED_PUBLISHING: Env = { REALTIME_PUBLISH_RATE: '1000000' };

interface RealtimeApp {
  app: FastifyInstance;
  db: Kysely<Database>;
  /** The app's current signing key, to sign tokens with exactly the claims a test needs. */
  secret: StolenKey;
}

/** A test app that listens on a free port, with CHANNELS in realtime.channels. */
async function listeningApp(t: Test, env: Env = {}): Promise<RealtimeApp> {
  const { app, config, database } = await buildTestApp(t, { env: { ...UNLIMITED_PUBLISHING, ...env } });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const db = database.handle.db;
  await db.insertInto('realtime.channels').values(CHANNELS).execute();
  return { app, db, secret: await currentSigningKey(config, db) };
}

interface Member {
  socket: CheckedSocket;
  userId: string;
}

/** A connected socket of a made-up signed-in user. */
async function signedIn(clients: RealtimeClients, app: FastifyInstance): Promise<Member> {
  const token = accessTokenFor(app);
  return { socket: await clients.connect(token), userId: String(decodeClaims(token).sub) };
}

/** Connected sockets subscribed to `channel`, of as many different users. */
async function subscribers(clients: RealtimeClients, app: FastifyInstance, channel: string, n: number) {
  const members: Member[] = [];
  for (let i = 0; i < n; i++) {
    const member = await signedIn(clients, app);
    await subscribed(member.socket, channel);
    members.push(member);
  }
  return members;
}

/** Runs `work` with a policy created for it, dropped afterwards whatever happens. */
async function withPolicy<T>(
  db: Kysely<Database>,
  name: string,
  table: 'channels' | 'messages',
  definition: RawBuilder<unknown>,
  work: () => Promise<T>,
): Promise<T> {
  const on = sql.table(`realtime.${table}`);
  await sql`create policy ${sql.id(name)} on ${on} ${definition}`.execute(db);
  try {
    return await work();
  } finally {
    await sql`drop policy ${sql.id(name)} on ${on}`.execute(db);
  }
}

/** How many messages were stored under `event`. */
async function storedCount(db: Kysely<Database>, event: string): Promise<number> {
  const row = await db
    .selectFrom('realtime.messages')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where('event', '=', event)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

/** An acknowledgement that refuses with `code` and names `channel`. */
function assertRefused(t: Test, ack: Ack, code: string, channel: string | null, what: string) {
  t.equal(ack.ok, false, `${what}: ack ok:false`);
  t.equal(ack.error?.code, code, `${what}: ack code ${code}`);
  t.equal(ack.channel, channel, `${what}: ack channel ${JSON.stringify(channel)}`);
}

function assertConformance(t: Test, clients: RealtimeClients) {
  t.same(clients.violations(), [], 'everything sent and received matched asyncapi.yaml');
}

/** A JSON object whose serialisation is exactly `bytes` bytes long ({"t":"xx…"}). */
const payloadOfBytes = (bytes: number) => ({ t: 'x'.repeat(bytes - '{"t":""}'.length) });

const shared = await listeningApp(t);

t.test('handshake', async (t) => {
  const { app, secret } = shared;
  const clients = new RealtimeClients(t, urlOf(app));
  const now = Math.floor(Date.now() / 1000);

  const refusals: [string, unknown, string][] = [
    ['no token', undefined, 'UNAUTHORIZED'],
    ['an empty token', '', 'UNAUTHORIZED'],
    ['a garbage token', 'not-a-jwt', 'UNAUTHORIZED'],
    ['a token that is not a string', 12345, 'UNAUTHORIZED'],
    ['a token signed with another key', forgeJwt('k'.repeat(32), accessClaims(now)), 'UNAUTHORIZED'],
    ['a refresh token', forgeJwt(secret, accessClaims(now, { token_use: 'refresh' })), 'UNAUTHORIZED'],
    ['an expired token', forgeJwt(secret, accessClaims(now - 3600)), 'TOKEN_EXPIRED'],
  ];
  for (const [what, token, code] of refusals) {
    const err = await clients.refusal(token);
    t.equal(err.data?.code, code, `${what}: connect_error data.code ${code}`);
    t.type(err.data?.message, 'string', `${what}: data.message`);
    t.ok(err.message.length > 0, `${what}: a sentence in err.message`);
  }
  const socket = await clients.connect(accessTokenFor(app));
  t.ok(socket.connected, 'a valid access token connects');
  assertConformance(t, clients);
});

t.test('REALTIME_ALLOW_ANON=true: anonymous sockets act as the role anon', async (t) => {
  const { app, db } = await listeningApp(t, { REALTIME_ALLOW_ANON: 'true' });
  const clients = new RealtimeClients(t, urlOf(app));
  const anon = await clients.connect(undefined);
  t.ok(anon.connected, 'connects without a token');
  t.equal((await clients.refusal('garbage')).data?.code, 'UNAUTHORIZED', 'a bad token is still refused, not anon');

  const refused = await subscribe(anon, 'room:anon');
  assertRefused(t, refused, 'UNAUTHORIZED', 'room:anon', 'the default policies grant anon nothing');

  await withPolicy(
    db,
    'anon_may_subscribe',
    'channels',
    sql`for select to anon using (enabled and realtime.channel_name() like pattern)`,
    async () => {
      const user = await signedIn(clients, app);
      await subscribed(user.socket, 'room:anon');
      const joined = nextEvent(user.socket, 'presence:join');
      const ack = await subscribe(anon, 'room:anon');
      t.equal(ack.ok, true, 'allowed once a policy grants anon select');
      t.same(
        ack.presence?.members.map((m) => m.userId).sort(),
        [null, user.userId].sort(),
        'presence lists the anonymous member with userId null',
      );
      const anonMember = ack.presence?.members.find((m) => m.userId === null);
      t.same(
        await joined,
        { meta: { channel: 'room:anon' }, member: anonMember },
        'presence:join of the anonymous member',
      );

      const error = nextEvent(anon, 'realtime:error');
      const published = await publish(anon, { channel: 'room:anon', event: 'hello', payload: {} });
      assertRefused(t, published, 'UNAUTHORIZED', 'room:anon', 'no publish policy for anon');
      t.equal((await error).code, 'UNAUTHORIZED');
      t.equal(await storedCount(db, 'hello'), 0, 'nothing stored');
    },
  );
  assertRefused(
    t,
    await subscribe(await clients.connect(undefined), 'room:anon'),
    'UNAUTHORIZED',
    'room:anon',
    'policy dropped',
  );
  assertConformance(t, clients);
});

t.test('subscribing: the policies decide', async (t) => {
  const { app, db } = shared;
  const clients = new RealtimeClients(t, urlOf(app));
  const alice = await signedIn(clients, app);
  const sub = (channel: string) => subscribe(alice.socket, channel);

  const ok = await sub('room:lobby');
  t.match(ok, { ok: true, channel: 'room:lobby' }, 'an enabled channel whose pattern matches');
  t.same(
    ok.presence?.members.map((m) => m.userId),
    [alice.userId],
    'the caller is in the presence list',
  );
  assertRefused(t, await sub('locked:1'), 'UNAUTHORIZED', 'locked:1', 'a disabled channel');
  assertRefused(t, await sub('nowhere:1'), 'UNAUTHORIZED', 'nowhere:1', 'a channel no pattern matches');
  t.equal((await sub('secret:plans')).ok, true, 'secret:% is enabled');

  await withPolicy(
    db,
    'no_secrets',
    'channels',
    sql`as restrictive for select to authenticated using (realtime.channel_name() not like 'secret:%')`,
    async () => {
      assertRefused(t, await sub('secret:other'), 'UNAUTHORIZED', 'secret:other', 'a restrictive policy refuses');
      t.equal((await sub('room:2')).ok, true, 'and leaves other channels alone');
    },
  );
  t.equal((await sub('secret:other')).ok, true, 'allowed again once the policy is dropped');

  assertRefused(t, await sub('lobby:1'), 'UNAUTHORIZED', 'lobby:1', 'lobby:% is not a channel pattern');
  await withPolicy(
    db,
    'lobbies_for_all',
    'channels',
    sql`for select to authenticated using (realtime.channel_name() like 'lobby:%')`,
    async () => {
      t.equal((await sub('lobby:1')).ok, true, 'a permissive policy allows what the default does not');
      // Publishing is a separate decision: the default publish policy wants an enabled matching pattern.
      const published = await publish(alice.socket, { channel: 'lobby:1', event: 'hello', payload: {} });
      assertRefused(t, published, 'UNAUTHORIZED', 'lobby:1', 'the publish policies still refuse');
    },
  );
  assertRefused(t, await sub('lobby:2'), 'UNAUTHORIZED', 'lobby:2', 'refused again once dropped');
  assertConformance(t, clients);
});

t.test('publishing', async (t) => {
  const { app, db } = shared;
  const clients = new RealtimeClients(t, urlOf(app));
  const [alice, bob] = (await subscribers(clients, app, 'room:pub', 2)) as [Member, Member];
  const atAlice = collect(alice.socket, 'chat.message');
  const atBob = collect(bob.socket, 'chat.message');
  /** Publishes a control message as alice and waits until bob has it: anything refused before it would be in. */
  const sentinel = async (channel = 'room:pub') => {
    const seen = nextEvent(bob.socket, 'sentinel');
    t.equal((await publish(alice.socket, { channel, event: 'sentinel', payload: {} })).ok, true);
    await seen;
  };

  t.test('as oneself: every subscriber, the sender included, gets payload and meta', async (t) => {
    const before = Date.now();
    const ack = await publish(alice.socket, { channel: 'room:pub', event: 'chat.message', payload: { text: 'hello' } });
    t.equal(ack.ok, true);
    t.equal(ack.channel, 'room:pub');
    t.match(ack.messageId, UUID);
    await waitForCount(atAlice, 1);
    await waitForCount(atBob, 1);
    const received = atBob[0] as { text: string; meta: Record<string, unknown> };
    t.same(atAlice[0], received, 'the sender receives the same message');
    t.same(received, {
      text: 'hello',
      meta: {
        channel: 'room:pub',
        messageId: ack.messageId,
        senderType: 'user',
        senderId: alice.userId,
        timestamp: received.meta.timestamp,
      },
    });
    const at = Date.parse(String(received.meta.timestamp));
    t.ok(at >= before - 1000 && at <= Date.now() + 1000, 'timestamp is now');

    const row = await db
      .selectFrom('realtime.messages')
      .select(['channel_name', 'event', 'payload', 'sender_id', 'sender_type', 'created_at'])
      .where('id', '=', String(ack.messageId))
      .executeTakeFirstOrThrow();
    t.same(
      { ...row, created_at: row.created_at.toISOString() },
      {
        channel_name: 'room:pub',
        event: 'chat.message',
        payload: { text: 'hello' },
        sender_id: alice.userId,
        sender_type: 'user',
        created_at: received.meta.timestamp,
      },
      'stored as delivered',
    );

    const explicit = await publish(alice.socket, {
      channel: 'room:pub',
      event: 'chat.message',
      payload: { text: 'as me' },
      senderId: alice.userId,
    });
    t.equal(explicit.ok, true, 'senderId equal to the caller is accepted');
    await waitForCount(atBob, 2);
    t.equal((atBob[1] as { meta: { senderId: string } }).meta.senderId, alice.userId);
  });

  t.test('a spoofed senderId is refused, delivered to nobody and not stored', async (t) => {
    const spoofed = collect(bob.socket, 'spoofed');
    const error = nextEvent(alice.socket, 'realtime:error');
    const ack = await publish(alice.socket, {
      channel: 'room:pub',
      event: 'spoofed',
      payload: { text: 'from bob, honest' },
      senderId: bob.userId,
    });
    assertRefused(t, ack, 'UNAUTHORIZED', 'room:pub', 'spoofed senderId');
    t.match(await error, { code: 'UNAUTHORIZED', channel: 'room:pub' }, 'realtime:error too');

    const withoutAck = nextEvent(alice.socket, 'realtime:error');
    alice.socket.emit('realtime:publish', { channel: 'room:pub', event: 'spoofed', payload: {}, senderId: bob.userId });
    t.match(await withoutAck, { code: 'UNAUTHORIZED', channel: 'room:pub' }, 'realtime:error without an ack');
    await sentinel();
    t.same(spoofed, [], 'bob received nothing');
    t.equal(await storedCount(db, 'spoofed'), 0, 'nothing stored');
  });

  t.test('refused on a channel disabled after subscribing', async (t) => {
    await subscribed(alice.socket, 'closing:1');
    await subscribed(bob.socket, 'closing:1');
    const atBobClosing = collect(bob.socket, 'closing');
    t.equal((await publish(alice.socket, { channel: 'closing:1', event: 'closing', payload: { n: 1 } })).ok, true);
    await waitForCount(atBobClosing, 1);
    await db.updateTable('realtime.channels').set({ enabled: false }).where('pattern', '=', 'closing:%').execute();
    t.teardown(() =>
      db.updateTable('realtime.channels').set({ enabled: true }).where('pattern', '=', 'closing:%').execute(),
    );
    const error = nextEvent(alice.socket, 'realtime:error');
    const ack = await publish(alice.socket, { channel: 'closing:1', event: 'closing', payload: { n: 2 } });
    assertRefused(t, ack, 'UNAUTHORIZED', 'closing:1', 'disabled channel');
    t.match(await error, { code: 'UNAUTHORIZED', channel: 'closing:1' });
    await sentinel();
    t.equal(atBobClosing.length, 1, 'the second message reached nobody');
    t.equal(await storedCount(db, 'closing'), 1, 'only the first was stored');
  });

  t.test('NOT_SUBSCRIBED without a subscription', async (t) => {
    const error = nextEvent(alice.socket, 'realtime:error');
    const ack = await publish(alice.socket, { channel: 'room:elsewhere', event: 'orphan', payload: {} });
    assertRefused(t, ack, 'NOT_SUBSCRIBED', 'room:elsewhere', 'not subscribed');
    t.match(await error, { code: 'NOT_SUBSCRIBED', channel: 'room:elsewhere' });
    const withoutAck = nextEvent(alice.socket, 'realtime:error');
    alice.socket.emit('realtime:publish', { channel: 'room:elsewhere', event: 'orphan', payload: {} });
    t.match(await withoutAck, { code: 'NOT_SUBSCRIBED', channel: 'room:elsewhere' }, 'without an ack too');
    t.equal(await storedCount(db, 'orphan'), 0, 'nothing stored');
  });

  t.test('conformance', async (t) => assertConformance(t, clients));
});

t.test('nothing reaches sockets that unsubscribed, were refused or never subscribed', async (t) => {
  const { app, db } = shared;
  const clients = new RealtimeClients(t, urlOf(app));
  const channel = 'room:quiet';
  const [publisher, control, leaver] = (await subscribers(clients, app, channel, 3)) as [Member, Member, Member];
  t.same(await unsubscribe(leaver.socket, channel), { ok: true, channel });
  const refused = await signedIn(clients, app);
  await withPolicy(
    db,
    'not_this_user',
    'channels',
    sql`as restrictive for select to authenticated using (auth.uid() <> ${sql.lit(refused.userId)}::uuid)`,
    async () => assertRefused(t, await subscribe(refused.socket, channel), 'UNAUTHORIZED', channel, 'this user'),
  );
  const bystander = await signedIn(clients, app);

  const atControl = collect(control.socket, 'note');
  const quiet = [leaver, refused, bystander].map((m) => collect(m.socket, 'note'));
  for (let n = 0; n < 3; n++) {
    t.equal((await publish(publisher.socket, { channel, event: 'note', payload: { n } })).ok, true);
  }
  await waitForCount(atControl, 3);
  await Promise.all([leaver, refused, bystander].map((m) => expectNothing(m.socket, 'note', QUIET_MS)));
  t.same(quiet, [[], [], []], 'the unsubscribed, the refused and the bystander received nothing');
  assertConformance(t, clients);
});

t.test('presence', async (t) => {
  const { app } = shared;
  const clients = new RealtimeClients(t, urlOf(app));
  const channel = 'room:presence';
  const ids = (ack: Ack) => (ack.presence?.members ?? []).map((m) => m.userId).sort();
  const memberOf = (ack: Ack, userId: string) => ack.presence?.members.find((m) => m.userId === userId);

  const a = await signedIn(clients, app);
  const b = await signedIn(clients, app);
  const c = await signedIn(clients, app);
  const first = await subscribe(a.socket, channel);
  t.same(ids(first), [a.userId], 'alone at first');

  const joinAtA = nextEvent(a.socket, 'presence:join');
  const joinsAtB = collect<{ member: { userId: string } }>(b.socket, 'presence:join');
  const second = await subscribe(b.socket, channel);
  t.same(ids(second), [a.userId, b.userId].sort(), "the second subscriber's ack lists both");
  const bMember = memberOf(second, b.userId);
  t.match(bMember?.presenceId, /./, 'a presenceId');
  t.same(await joinAtA, { meta: { channel }, member: bMember }, 'the first gets presence:join');
  t.not(memberOf(second, a.userId)?.presenceId, bMember?.presenceId, 'one presenceId per connection');

  t.same(ids(await subscribe(a.socket, channel)), [a.userId, b.userId].sort(), 'subscribing again is ok');
  await subscribed(c.socket, channel);
  const cMember = memberOf(await subscribe(c.socket, channel), c.userId);
  await expectNothing(b.socket, 'presence:leave', QUIET_MS);
  t.same(
    joinsAtB.map((e) => e.member.userId),
    [c.userId],
    'b is told of c only: not of itself, nor of repeated subscribes',
  );

  const leaveAtA = nextEvent(a.socket, 'presence:leave');
  const leaveAtC = nextEvent(c.socket, 'presence:leave');
  t.same(await unsubscribe(b.socket, channel), { ok: true, channel });
  t.same(await leaveAtA, { meta: { channel }, member: bMember }, 'unsubscribe: presence:leave to a');
  t.same(await leaveAtC, { meta: { channel }, member: bMember }, 'and to c');
  t.same(await unsubscribe(b.socket, channel), { ok: true, channel }, 'unsubscribing twice is ok');

  const cLeaves = nextEvent(a.socket, 'presence:leave');
  c.socket.close();
  t.same(await cLeaves, { meta: { channel }, member: cMember }, 'disconnect: presence:leave');
  t.same(ids(await subscribe(a.socket, channel)), [a.userId], 'only a is left');
  assertConformance(t, clients);
});

t.test('malformed and unknown requests are answered, and nothing else breaks', async (t) => {
  const { app } = shared;
  const clients = new RealtimeClients(t, urlOf(app));
  const channel = 'room:errors';
  const [sender, other] = (await subscribers(clients, app, channel, 2)) as [Member, Member];
  const s = sender.socket;
  /** Emits `event` without the asyncapi check and returns the realtime:error it brings. */
  const errorFor = async (event: string, payload: unknown) => {
    const error = nextEvent(s, 'realtime:error');
    emitUnchecked(s, event, payload);
    return error;
  };
  /** Emits with an acknowledgement and returns it. */
  const ackFor = (event: string, payload: unknown) => emitUncheckedWithAck(s, event, payload);
  /** Emits with an acknowledgement; returns the ack and the realtime:error (or why none came). */
  const bothFor = async (event: string, payload: unknown) => {
    const error = nextEvent(s, 'realtime:error', 500).catch((err: Error) => err.message);
    const ack = await ackFor(event, payload);
    return { ack, error: await error };
  };

  t.test('unknown events: UNKNOWN_EVENT', async (t) => {
    for (const event of ['chat', 'realtime:subscribed', 'presence:join', 'x'.repeat(300)]) {
      t.match(await errorFor(event, { channel }), { code: 'UNKNOWN_EVENT', message: String, channel: null }, event);
    }
    t.match(await errorFor('subscribe', 'no object'), { code: 'UNKNOWN_EVENT' }, 'whatever the payload');
  });

  t.test('an unknown event sent with an acknowledgement is answered with realtime:error too', async (t) => {
    // protocol.md §4: "Any other event name → realtime:error { code: 'UNKNOWN_EVENT', … }";
    // asyncapi.yaml: "Any other event name sent by the client is answered with realtime:error".
    const { error } = await bothFor('chat', {});
    t.match(error, { code: 'UNKNOWN_EVENT', channel: null });
  });

  const badRequests: [string, unknown][] = [
    ['a string', 'room:errors'],
    ['null', null],
    ['an array', [channel]],
    ['no channel', {}],
    ['a number channel', { channel: 5 }],
    ['an empty channel', { channel: '' }],
    ['a channel with %', { channel: 'room:50%' }],
    ['a channel with a space', { channel: 'room 1' }],
    ['a 256-character channel', { channel: `room:${'x'.repeat(251)}` }],
    ['an unknown property', { channel, extra: true }],
  ];
  const valid = { channel, event: 'ok', payload: { a: 1 } };
  const badPublishes: [string, unknown][] = [
    ...badRequests.filter(([what]) => what !== 'no channel' && what !== 'an unknown property'),
    ['a number', 42],
    ['no event', { channel, payload: {} }],
    ['no payload', { channel, event: 'ok' }],
    ['no channel', { event: 'ok', payload: {} }],
    ['a bad channel', { ...valid, channel: 'room:50%' }],
    ['an unknown property', { ...valid, extra: 1 }],
    ['an empty event', { ...valid, event: '' }],
    ['a 65-character event', { ...valid, event: 'e'.repeat(65) }],
    ['an event starting with a dot', { ...valid, event: '.start' }],
    ['an event with a space', { ...valid, event: 'a b' }],
    ['a number event', { ...valid, event: 7 }],
    ['the reserved event realtime:x', { ...valid, event: 'realtime:x' }],
    ['the reserved event realtime:error', { ...valid, event: 'realtime:error' }],
    ['the reserved event presence:join', { ...valid, event: 'presence:join' }],
    ...['connect', 'connect_error', 'disconnect', 'disconnecting', 'newListener', 'removeListener'].map(
      (event): [string, unknown] => [`the socket.io event ${event}`, { ...valid, event }],
    ),
    ['a payload with meta', { ...valid, payload: { meta: { channel } } }],
    ['a payload with meta null', { ...valid, payload: { text: 'x', meta: null } }],
    ['a string payload', { ...valid, payload: 'hello' }],
    ['an array payload', { ...valid, payload: [1, 2] }],
    ['a null payload', { ...valid, payload: null }],
    ['a number payload', { ...valid, payload: 3 }],
    ['a senderId that is no uuid', { ...valid, senderId: 'me' }],
    ['a null senderId', { ...valid, senderId: null }],
  ];
  const isInvalid = (ack: Ack) => !ack.ok && ack.error?.code === 'INVALID_PAYLOAD';

  t.test('malformed subscribe and unsubscribe: INVALID_PAYLOAD', async (t) => {
    for (const event of ['realtime:subscribe', 'realtime:unsubscribe']) {
      for (const [what, payload] of badRequests) {
        t.ok(isInvalid(await ackFor(event, payload)), `${event} with ${what}: ack ok:false INVALID_PAYLOAD`);
        t.match(
          await errorFor(event, payload),
          { code: 'INVALID_PAYLOAD' },
          `${event} with ${what}, no ack: realtime:error`,
        );
      }
    }
  });

  t.test('a malformed subscribe or unsubscribe with an ack gets realtime:error too', async (t) => {
    // protocol.md §4: "Malformed payload of a known event → realtime:error … (and the ack, if one was
    // given, gets ok:false)"; asyncapi.yaml: "whether or not an acknowledgement was asked for".
    for (const event of ['realtime:subscribe', 'realtime:unsubscribe']) {
      const { ack, error } = await bothFor(event, { channel: 5 });
      t.ok(isInvalid(ack), `${event}: the ack`);
      t.match(error, { code: 'INVALID_PAYLOAD', channel: null }, `${event}: realtime:error`);
    }
  });

  t.test('malformed publish: INVALID_PAYLOAD in the ack and as realtime:error; nothing delivered', async (t) => {
    const delivered = collect(other.socket, 'ok');
    for (const [what, payload] of badPublishes) {
      const { ack, error } = await bothFor('realtime:publish', payload);
      t.ok(isInvalid(ack), `${what}: ack ok:false INVALID_PAYLOAD`);
      t.match(error, { code: 'INVALID_PAYLOAD' }, `${what}: realtime:error`);
    }
    t.match(await errorFor('realtime:publish', { ...valid, event: 'connect' }), { code: 'INVALID_PAYLOAD' }, 'no ack');
    await expectNothing(other.socket, 'ok', QUIET_MS);
    t.same(delivered, [], 'none of them was delivered');
  });

  t.test('errors name the channel as the client gave it when it is a string, else null', async (t) => {
    // protocol.md: "`channel` is echoed as given when it is a string, else null"; asyncapi.yaml
    // RealtimeError.channel: "as the client gave it (a string, possibly not a valid ChannelName when
    // that is the error)", and the UnsubscribeAck example `channel: 'room:50%'`.
    const given = (payload: unknown) => {
      const value = (payload as { channel?: unknown } | null)?.channel;
      return typeof value === 'string' ? value : null;
    };
    const cases: [string, string, unknown][] = [
      ...badRequests.map(([what, payload]): [string, string, unknown] => ['realtime:subscribe', what, payload]),
      ...badRequests.map(([what, payload]): [string, string, unknown] => ['realtime:unsubscribe', what, payload]),
      ...badPublishes.map(([what, payload]): [string, string, unknown] => ['realtime:publish', what, payload]),
    ];
    const wrong: string[] = [];
    for (const [event, what, payload] of cases) {
      const ack = await ackFor(event, payload);
      const error = await errorFor(event, payload);
      for (const [where, channelGiven] of [
        ['ack', ack.channel],
        ['realtime:error', error.channel],
      ] as const) {
        if (channelGiven !== given(payload)) {
          wrong.push(`${event} with ${what}: ${where} channel ${JSON.stringify(channelGiven)}`);
        }
      }
    }
    t.same(wrong, [], 'every ack and realtime:error echoes the given channel');
  });

  t.test('PAYLOAD_TOO_LARGE over REALTIME_MAX_PAYLOAD_BYTES (4096 by default), counted in bytes', async (t) => {
    const atOther = collect(other.socket, 'sized');
    const sized = (payload: Record<string, unknown>) => publish(s, { channel, event: 'sized', payload });
    t.equal((await sized(payloadOfBytes(4096))).ok, true, '4096 bytes are accepted');
    const error = nextEvent(s, 'realtime:error');
    assertRefused(t, await sized(payloadOfBytes(4097)), 'PAYLOAD_TOO_LARGE', channel, '4097 bytes');
    t.match(await error, { code: 'PAYLOAD_TOO_LARGE', channel });
    // 2100 characters, 4208 bytes as UTF-8.
    assertRefused(t, await sized({ t: 'é'.repeat(2100) }), 'PAYLOAD_TOO_LARGE', channel, 'multi-byte characters');
    await waitForCount(atOther, 1);
    await expectNothing(other.socket, 'sized', QUIET_MS);
    t.equal(atOther.length, 1, 'only the accepted one was delivered');
  });

  t.test('afterwards the same socket and the others still work', async (t) => {
    const atOther = nextEvent(other.socket, 'still.here');
    const atSender = nextEvent(s, 'still.here');
    t.equal((await publish(s, { channel, event: 'still.here', payload: { n: 1 } })).ok, true);
    t.match(await atOther, { n: 1 });
    t.match(await atSender, { n: 1 });
    const fresh = await signedIn(clients, app);
    t.equal((await subscribe(fresh.socket, channel)).ok, true, 'a new connection subscribes');
    t.equal((await fetch(`${urlOf(app)}/api/health`)).status, 200, 'the server is up');
  });

  t.test('a frame over 1 MiB closes that connection only', async (t) => {
    const big = await signedIn(clients, app);
    await subscribed(big.socket, channel);
    const closed = disconnection(big.socket, 5_000);
    big.socket.emit('realtime:publish', { channel, event: 'huge', payload: { t: 'x'.repeat(1_100_000) } });
    t.match(await closed, /^transport (close|error)$/, 'the sender is disconnected');
    t.ok(s.connected && other.socket.connected, 'the other connections stay');
    const atOther = nextEvent(other.socket, 'after.huge');
    t.equal((await publish(s, { channel, event: 'after.huge', payload: {} })).ok, true);
    await atOther;
  });

  t.test('conformance', async (t) => assertConformance(t, clients));
});

t.test('REALTIME_MAX_PAYLOAD_BYTES set small', async (t) => {
  const { app } = await listeningApp(t, { REALTIME_MAX_PAYLOAD_BYTES: '64' });
  const clients = new RealtimeClients(t, urlOf(app));
  const [a, b] = (await subscribers(clients, app, 'room:small', 2)) as [Member, Member];
  const atB = collect(b.socket, 'sized');
  const sized = (bytes: number) =>
    publish(a.socket, { channel: 'room:small', event: 'sized', payload: payloadOfBytes(bytes) });
  t.equal((await sized(64)).ok, true, '64 bytes are accepted');
  const error = nextEvent(a.socket, 'realtime:error');
  assertRefused(t, await sized(65), 'PAYLOAD_TOO_LARGE', 'room:small', '65 bytes');
  t.match(await error, { code: 'PAYLOAD_TOO_LARGE' });
  t.equal((await sized(10)).ok, true, 'a small one after it');
  await waitForCount(atB, 2);
  t.same(
    atB.map((m) => String(m.t).length),
    [56, 2],
    'the accepted ones reached the other subscriber, the refused one did not',
  );
  assertConformance(t, clients);
});

t.test('an expiring token: TOKEN_EXPIRED, then the server disconnects', async (t) => {
  const { app, secret } = shared;
  const clients = new RealtimeClients(t, urlOf(app));
  const now = Math.floor(Date.now() / 1000);
  const expiring = await clients.connect(forgeJwt(secret, accessClaims(now, { exp: now + 2 })));
  const connectedAt = Date.now();
  await subscribed(expiring, 'room:expiry');
  const [watcher] = (await subscribers(clients, app, 'room:expiry', 1)) as [Member];
  const error = nextEvent(expiring, 'realtime:error', 3_500);
  const reason = disconnection(expiring, 3_500);
  const leave = nextEvent(watcher.socket, 'presence:leave', 3_500);
  t.match(await error, { code: 'TOKEN_EXPIRED', message: String, channel: null }, 'realtime:error TOKEN_EXPIRED');
  t.equal(await reason, 'io server disconnect', 'then disconnected by the server');
  t.ok(Date.now() - connectedAt < 3_500, `within ${Date.now() - connectedAt} ms`);
  t.match(await leave, { meta: { channel: 'room:expiry' } }, 'the others see it leave');
  assertConformance(t, clients);
});

t.test(
  'order: 200 messages sent in bursts of 50 without waiting arrive everywhere in send and commit order',
  async (t) => {
    const { app, db } = shared;
    const clients = new RealtimeClients(t, urlOf(app));
    const channel = 'room:order';
    const [publisher, s1, s2] = (await subscribers(clients, app, channel, 3)) as [Member, Member, Member];
    const received = [publisher, s1, s2].map((m) =>
      collect<{ n: number; meta: { messageId: string } }>(m.socket, 'seq'),
    );
    // A connection may have 64 requests waiting; each burst stays below that.
    let accepted = 0;
    for (let burst = 0; burst < 4; burst += 1) {
      const acks = Array.from({ length: 50 }, (_, i) =>
        publish(publisher.socket, { channel, event: 'seq', payload: { n: burst * 50 + i } }, 10_000),
      );
      accepted += (await Promise.all(acks)).filter((a) => a.ok).length;
    }
    t.equal(accepted, 200, 'all 200 accepted');
    for (const list of received) await waitForCount(list, 200, 10_000);
    const order = await commitOrder(db, channel);
    t.equal(order.length, 200);
    const [atPublisher, at1, at2] = received.map((list) => list.map((m) => m.meta.messageId));
    t.same(at1, order, 'subscriber 1: the stored (seq) order');
    t.same(at2, order, 'subscriber 2: the same');
    t.same(atPublisher, order, 'the publisher too');
    t.same(
      received[0]?.map((m) => m.n),
      Array.from({ length: 200 }, (_, n) => n),
      'one connection’s messages keep the order they were sent in',
    );
    assertConformance(t, clients);
  },
);

t.test('a slow consumer is disconnected; the others get everything; memory stays bounded', async (t) => {
  const { app } = await listeningApp(t, { REALTIME_MAX_BUFFERED_BYTES: '65536' });
  const clients = new RealtimeClients(t, urlOf(app));
  const channel = 'room:firehose';
  const [publisher, healthy, slow] = (await subscribers(clients, app, channel, 3)) as [Member, Member, Member];
  const slowErrors = collect(slow.socket, 'realtime:error');
  const slowLeft = nextEvent(healthy.socket, 'presence:leave', 30_000);
  let receivedByHealthy = 0;
  healthy.socket.on('blob', () => receivedByHealthy++);

  v8.setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  gc();
  const heapBefore = process.memoryUsage().heapUsed;

  // The slow client stops reading: the kernel's buffers fill, then the server's.
  const slowTcp = tcpSocketOf(slow.socket);
  slowTcp.pause();
  const blob = 'x'.repeat(3_500);
  let sent = 0;
  let slowGoneAt: number | undefined;
  slowLeft.then(
    () => {
      slowGoneAt = Date.now();
    },
    () => {}, // awaited below
  );
  /** A few publishes in flight at a time, as a steady publisher would have. */
  const publishUntil = async (done: () => boolean) => {
    const worker = async () => {
      while (!done()) {
        const n = sent++;
        const ack = await publish(publisher.socket, { channel, event: 'blob', payload: { n, blob } }, 10_000);
        if (!ack.ok) throw new Error(`publish ${n} refused: ${JSON.stringify(ack)}`);
      }
    };
    await Promise.all(Array.from({ length: 8 }, worker));
  };
  // About 1,100 messages (3.9 MB) fill the loopback buffers here; 4,000 is far beyond them.
  await publishUntil(() => slowGoneAt !== undefined || sent >= 4_000);
  t.ok(slowGoneAt, `the slow consumer was disconnected after ${sent} messages (${(sent * 3.5) / 1000} MB)`);
  const atDisconnect = sent;
  await publishUntil(() => sent >= atDisconnect + 100);
  await waitUntil(() => receivedByHealthy >= sent, 10_000).catch(() => {});
  t.equal(receivedByHealthy, sent, `the healthy subscriber received all ${sent}`);
  t.ok(publisher.socket.connected && healthy.socket.connected, 'the healthy ones stay connected');

  gc();
  const growth = process.memoryUsage().heapUsed - heapBefore;
  t.ok(growth < 32 * 1024 * 1024, `heap grew by ${(growth / 1048576).toFixed(1)} MiB (< 32 MiB)`);

  // Reading again, the slow client finds the end of what it was sent. The server cuts the connection
  // 5 s after giving up on it (src/realtime/slow-consumers.ts); before that, it flushes
  // SLOW_CONSUMER and the disconnect.
  const readsAgainInTime = Date.now() - (slowGoneAt ?? 0) < 4_000;
  const reason = disconnection(slow.socket, 10_000);
  slowTcp.resume();
  if (readsAgainInTime) {
    t.equal(await reason, 'io server disconnect', 'the slow client is told it was disconnected');
    t.same(
      slowErrors.map((e) => e.code),
      ['SLOW_CONSUMER'],
      'with SLOW_CONSUMER',
    );
  } else {
    t.match(await reason, /^(io server disconnect|transport close)$/, 'the slow client was disconnected');
    t.comment('the slow client read again too late to be sure of SLOW_CONSUMER (best effort)');
  }
  t.match(await slowLeft, { meta: { channel }, member: { userId: slow.userId } }, 'presence:leave for the slow one');
  const fresh = await signedIn(clients, app);
  const members = (await subscribe(fresh.socket, channel)).presence?.members.map((m) => m.userId) ?? [];
  t.same(
    members.sort(),
    [publisher.userId, healthy.userId, fresh.userId].sort(),
    'a fresh subscriber is told of the others but not of the slow one',
  );
  assertConformance(t, clients);
});

t.test('retention: deleteExpiredMessages deletes only older messages', async (t) => {
  const { db } = shared;
  const now = new Date();
  const DAY = 86_400_000;
  const ages: [string, number][] = [
    ['30 days', 30 * DAY],
    ['8 days', 8 * DAY],
    ['7 days and 1 ms', 7 * DAY + 1],
    ['exactly 7 days', 7 * DAY],
    ['6 days', 6 * DAY],
    ['now', 0],
  ];
  await db
    .insertInto('realtime.messages')
    .values(
      ages.map(([label, age]) => ({
        id: randomUUID(),
        channel_name: 'retention:1',
        event: 'old',
        payload: JSON.stringify({ label }),
        sender_id: null,
        created_at: new Date(now.getTime() - age),
      })),
    )
    .execute();
  const othersBefore = await db
    .selectFrom('realtime.messages')
    .select('id')
    .where('channel_name', '!=', 'retention:1')
    .execute();

  t.equal(await deleteExpiredMessages(db, 7, now), 3, 'three were older than 7 days');
  const kept = await db
    .selectFrom('realtime.messages')
    .select(sql<string>`payload->>'label'`.as('label'))
    .where('channel_name', '=', 'retention:1')
    .orderBy('created_at')
    .execute();
  t.same(
    kept.map((r) => r.label),
    ['exactly 7 days', '6 days', 'now'],
    'the cutoff itself and newer are kept',
  );
  const othersAfter = await db
    .selectFrom('realtime.messages')
    .select('id')
    .where('channel_name', '!=', 'retention:1')
    .execute();
  t.equal(othersAfter.length, othersBefore.length, 'recent messages of other channels are untouched');
  t.equal(await deleteExpiredMessages(db, 7, now), 0, 'nothing left to delete');
});
