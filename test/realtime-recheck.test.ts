// A subscription stays what the policies say it is. With the README's members-only pattern, Alice
// and Bob subscribe to secret:a; then Bob's membership row is deleted (data behind a policy), a
// policy is changed, the channel is disabled through the API, or Bob logs out. Within the bound of
// each (the re-check period; 2 s for the others) Bob's subscription ends with realtime:error
// UNAUTHORIZED (or his socket with SESSION_REVOKED), and from then on nothing of the channel reaches
// him while Alice keeps receiving. Also: the limits of every way in, and nesting depth.
import type { LightMyRequestResponse } from 'fastify';
import { type Kysely, sql } from 'kysely';
import { io } from 'socket.io-client';
import t, { type Test } from 'tap';
import type { Env } from '../src/config.ts';
import type { Database } from '../src/db/schema.ts';
import { MAX_JSON_DEPTH } from '../src/json-values.ts';
import { bearer, buildAccountsApp, type MobileSession } from './helpers/accounts.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import {
  type Ack,
  type ConnectError,
  emitUncheckedWithAck,
  nextEvent,
  publish,
  RealtimeClients,
  subscribe,
  subscribed,
  unsubscribe,
  urlOf,
  waitUntil,
} from './helpers/realtime-client.ts';

const CHANNEL = 'secret:a';
/** The bound for a policy change, a channel change and a logout. */
const CHANGE_BOUND_MS = 2_000;
/** What a test waits beyond a bound before it fails (scheduling on a busy machine). */
const SLACK_MS = 1_000;
const PUBLISH_EVERY_MS = 50;

type Socket = ReturnType<RealtimeClients['open']>;

/** What one socket received, in order, with the time it came. */
interface Received {
  event: string;
  payload: { code?: string; channel?: string | null; text?: string } | undefined;
  at: number;
}

/** The promise's value, or its rejection's error as the value: the assertion that reads it reports the failure. */
const settled = <T>(promise: Promise<T>): Promise<T | Error> => promise.catch((err: Error) => err);

function record(socket: Socket): Received[] {
  const log: Received[] = [];
  socket.onAny((event: string, payload: Received['payload']) => log.push({ event, payload, at: Date.now() }));
  return log;
}

/** The README's members-only policy on secret: channels, with Alice and Bob members of room a. */
async function membersOnly(db: Kysely<Database>, members: string[]): Promise<void> {
  await sql`create schema if not exists app`.execute(db);
  await sql`create table app.members (user_id uuid not null, room text not null)`.execute(db);
  await sql`grant usage on schema app to authenticated`.execute(db);
  await sql`grant select on app.members to authenticated`.execute(db);
  await sql`
    create policy members_only on realtime.channels as restrictive
      for select to authenticated
      using (realtime.channel_name() not like 'secret:%'
             or exists (select 1 from app.members m where m.user_id = auth.uid()
                        and 'secret:' || m.room = realtime.channel_name()))
  `.execute(db);
  for (const userId of members) await sql`insert into app.members values (${userId}, 'a')`.execute(db);
}

interface Scene {
  app: Awaited<ReturnType<typeof buildAccountsApp>>['app'];
  db: Kysely<Database>;
  clients: RealtimeClients;
  admin: MobileSession;
  alice: MobileSession & { socket: Socket; log: Received[] };
  bob: MobileSession & { socket: Socket; log: Received[] };
  logout(refreshToken: string): Promise<LightMyRequestResponse>;
}

async function scene(t: Test, env: Env): Promise<Scene> {
  const built = await buildAccountsApp(t, { env: { REALTIME_PUBLISH_RATE: '1000000', ...env }, label: 'recheck' });
  const db = built.database.handle.db;
  await db.insertInto('realtime.channels').values({ pattern: 'secret:%' }).execute();
  await built.app.listen({ port: 0, host: '127.0.0.1' });
  const clients = new RealtimeClients(t, urlOf(built.app));
  const alice = await built.signUp();
  const bob = await built.signUp();
  await membersOnly(db, [alice.userId, bob.userId]);
  const join = async (session: MobileSession) => {
    const socket = await clients.connect(session.accessToken);
    await subscribed(socket, CHANNEL);
    return { ...session, socket, log: record(socket) };
  };
  return {
    app: built.app,
    db,
    clients,
    admin: built.admin,
    alice: await join(alice),
    bob: await join(bob),
    logout: (refreshToken) =>
      built.app.inject({ method: 'POST', url: '/api/auth/logout?client_type=mobile', payload: { refreshToken } }),
  };
}

/** Alice publishes "secret plan N" every PUBLISH_EVERY_MS until stopped; each acknowledged publish with its time. */
function keepPublishing(s: Scene) {
  const sent: { text: string; ackedAt: number }[] = [];
  let n = 0;
  let running = true;
  const done = (async () => {
    while (running) {
      const text = `secret plan ${++n}`;
      const ack = await publish(s.alice.socket, { channel: CHANNEL, event: 'note', payload: { text } });
      if (ack.ok) sent.push({ text, ackedAt: Date.now() });
      await new Promise((resolve) => setTimeout(resolve, PUBLISH_EVERY_MS));
    }
  })();
  return {
    sent,
    stop: async () => {
      running = false;
      await done;
    },
  };
}

/**
 * Bob's subscription ended by `cause` within `boundMs` of `changedAt`: realtime:error UNAUTHORIZED
 * for the channel, nothing of the channel after it, Alice still receiving, Alice told of his leave,
 * and his new subscribe refused.
 */
async function assertEndedForBob(t: Test, s: Scene, changedAt: number, boundMs: number, what: string) {
  const publishing = keepPublishing(s);
  const aliceLeaves = nextEvent<{ member: { userId: string } }>(s.alice.socket, 'presence:leave', boundMs + SLACK_MS)
    // A rejection is reported by the assertion below, not as an unhandled one.
    .catch((err: Error) => ({ member: { userId: err.message } }));
  await waitUntil(
    () => s.bob.log.some((r) => r.event === 'realtime:error'),
    boundMs + SLACK_MS,
    `${what}: realtime:error for Bob`,
  ).catch((err: Error) => t.fail(err.message));
  const errorAt = s.bob.log.findIndex((r) => r.event === 'realtime:error');
  const error = s.bob.log[errorAt];
  t.match(
    error?.payload,
    { code: 'UNAUTHORIZED', channel: CHANNEL },
    `${what}: realtime:error UNAUTHORIZED with the channel`,
  );
  const took = (error?.at ?? Number.POSITIVE_INFINITY) - changedAt;
  t.ok(took <= boundMs + SLACK_MS, `${what}: ended ${took} ms after the change (bound ${boundMs} ms)`);
  t.equal((await aliceLeaves).member.userId, s.bob.userId, `${what}: Alice sees Bob leave`);
  // Messages keep coming for a while: none reaches Bob any more, all reach Alice.
  const aliceBefore = s.alice.log.filter((r) => r.event === 'note').length;
  await new Promise((resolve) => setTimeout(resolve, 600));
  await publishing.stop();
  const afterError = s.bob.log.slice(errorAt + 1).filter((r) => r.event === 'note');
  t.same(
    afterError.map((r) => r.payload?.text),
    [],
    `${what}: nothing of the channel reaches Bob after the error`,
  );
  const sentAfterError = publishing.sent.filter((m) => m.ackedAt > (error?.at ?? 0)).length;
  t.ok(sentAfterError >= 5, `${what}: Alice published ${sentAfterError} messages after Bob's subscription ended`);
  await waitUntil(
    () => s.alice.log.filter((r) => r.event === 'note').length >= aliceBefore + 5,
    2_000,
    `${what}: Alice keeps receiving`,
  ).catch((err: Error) => t.fail(err.message));
  const again = await subscribe(s.bob.socket, CHANNEL);
  t.same([again.ok, again.error?.code], [false, 'UNAUTHORIZED'], `${what}: Bob's new subscribe is refused`);
  const publishAfter = await publish(s.bob.socket, { channel: CHANNEL, event: 'note', payload: { text: 'x' } });
  t.equal(publishAfter.error?.code, 'NOT_SUBSCRIBED', `${what}: Bob is no longer subscribed`);
  t.same(s.clients.violations(), [], `${what}: everything sent and received matches asyncapi.yaml`);
}

t.test('membership removed (data behind a policy): Bob stops within the re-check period', async (t) => {
  const s = await scene(t, { REALTIME_RECHECK_SECONDS: '1' });
  await sql`delete from app.members where user_id = ${s.bob.userId}`.execute(s.db);
  await assertEndedForBob(t, s, Date.now(), 1_000, 'data');
  t.equal(s.alice.log.filter((r) => r.event === 'realtime:error').length, 0, 'Alice, still a member, keeps hers');
});

t.test('a policy change: Bob stops within 2 s (asserted with 1 s of slack), without a periodic re-check', async (t) => {
  const s = await scene(t, { REALTIME_RECHECK_SECONDS: '0' });
  await sql`
    create policy no_bob on realtime.channels as restrictive for select to authenticated
      using (auth.uid() is distinct from ${sql.lit(s.bob.userId)}::uuid)
  `.execute(s.db);
  await assertEndedForBob(t, s, Date.now(), CHANGE_BOUND_MS, 'policy');
});

t.test(
  'without a re-check period, removed data alone does not end the subscription (the period is what bounds it)',
  async (t) => {
    const s = await scene(t, { REALTIME_RECHECK_SECONDS: '0' });
    await sql`delete from app.members where user_id = ${s.bob.userId}`.execute(s.db);
    await publish(s.alice.socket, { channel: CHANNEL, event: 'note', payload: { text: 'still delivered' } });
    await waitUntil(() => s.bob.log.some((r) => r.payload?.text === 'still delivered'), 2_000, 'delivery to Bob');
    t.pass('documented bound: data changes take effect at the next re-check, and there is none');
    const ended = settled(nextEvent<{ code: string; channel: string }>(s.bob.socket, 'realtime:error', 2_000));
    // A re-check asked for by a channel change through the API reaches the removed data too.
    const res = await s.app.inject({
      method: 'POST',
      url: '/api/realtime/channels',
      headers: bearer(s.admin.accessToken),
      payload: { pattern: 'other:%' },
    });
    t.equal(res.statusCode, 201, 'a channel created');
    t.match(await ended, { code: 'UNAUTHORIZED', channel: CHANNEL }, 'any change re-checks every subscription');
  },
);

t.test(
  'the channel disabled through the API: both subscriptions end within 2 s (asserted with 1 s of slack)',
  async (t) => {
    const s = await scene(t, { REALTIME_RECHECK_SECONDS: '0' });
    const [row] = await s.db.selectFrom('realtime.channels').select('id').where('pattern', '=', 'secret:%').execute();
    const errors = [s.alice.socket, s.bob.socket].map((socket) =>
      settled(nextEvent<{ code: string; channel: string }>(socket, 'realtime:error', CHANGE_BOUND_MS + SLACK_MS)),
    );
    const changedAt = Date.now();
    const res = await s.app.inject({
      method: 'PATCH',
      url: `/api/realtime/channels/${row?.id}`,
      headers: bearer(s.admin.accessToken),
      payload: { enabled: false },
    });
    t.equal(res.statusCode, 200, 'disabled');
    for (const [who, error] of [
      ['Alice', errors[0]],
      ['Bob', errors[1]],
    ] as const) {
      t.match(await error, { code: 'UNAUTHORIZED', channel: CHANNEL }, `${who}: UNAUTHORIZED`);
    }
    t.ok(Date.now() - changedAt <= CHANGE_BOUND_MS + SLACK_MS, `within ${Date.now() - changedAt} ms`);
  },
);

t.test('logout: Bob’s socket is disconnected within 2 s; what is published after never reaches him', async (t) => {
  const s = await scene(t, { REALTIME_RECHECK_SECONDS: '0' });
  const closed = settled(nextEvent<string>(s.bob.socket, 'disconnect', CHANGE_BOUND_MS + SLACK_MS));
  const changedAt = Date.now();
  t.equal((await s.logout(s.bob.refreshToken)).statusCode, 204, 'logged out');
  const publishing = keepPublishing(s);
  t.equal(await closed, 'io server disconnect', 'disconnected by the server');
  t.ok(Date.now() - changedAt <= CHANGE_BOUND_MS + SLACK_MS, `within ${Date.now() - changedAt} ms`);
  await new Promise((resolve) => setTimeout(resolve, 400));
  await publishing.stop();
  t.match(
    s.bob.log.find((r) => r.event === 'realtime:error')?.payload,
    { code: 'SESSION_REVOKED' },
    'told SESSION_REVOKED',
  );
  t.same(
    s.bob.log.filter((r) => r.event === 'note').map((r) => r.payload?.text),
    [],
    'nothing published after the logout reached Bob',
  );
  t.ok(publishing.sent.length >= 3, `Alice published ${publishing.sent.length} meanwhile`);
});

t.test('subscribing again and again while re-checks run keeps a member’s subscription (no spurious end)', async (t) => {
  const s = await scene(t, { REALTIME_RECHECK_SECONDS: '1' });
  // Unsubscribing and subscribing again while passes run keeps the subscription: each joining is judged on its own.
  for (let i = 0; i < 10; i++) {
    await unsubscribe(s.bob.socket, CHANNEL);
    await subscribed(s.bob.socket, CHANNEL);
    await new Promise((resolve) => setTimeout(resolve, 150));
  }
  t.same(
    s.bob.log.filter((r) => r.event === 'realtime:error'),
    [],
    'no member lost a subscription',
  );
});

t.test(
  'REALTIME_MAX_SUBSCRIPTIONS: up to the limit on one socket, one more refused, room again after leaving one',
  async (t) => {
    const s = await scene(t, { REALTIME_MAX_SUBSCRIPTIONS: '3' });
    // Alice has secret:a already.
    t.equal((await subscribe(s.alice.socket, 'secret:b')).ok, false, 'a refused channel does not count');
    await s.db.insertInto('realtime.channels').values({ pattern: 'room:%' }).execute();
    await subscribed(s.alice.socket, 'room:1');
    await subscribed(s.alice.socket, 'room:2');
    const fourth = await subscribe(s.alice.socket, 'room:3');
    t.same([fourth.ok, fourth.error?.code], [false, 'TOO_MANY_SUBSCRIPTIONS'], 'the 4th channel is refused');
    t.equal((await subscribe(s.alice.socket, 'room:2')).ok, true, 'subscribing again to one held is fine');
    await unsubscribe(s.alice.socket, 'room:1');
    t.equal((await subscribe(s.alice.socket, 'room:3')).ok, true, 'after leaving one, another is accepted');
    t.equal((await subscribe(s.bob.socket, 'room:9')).ok, true, 'the limit is per socket');
    t.same(s.clients.violations(), [], 'everything matches asyncapi.yaml');
  },
);

t.test(
  'REALTIME_MAX_SOCKETS_PER_USER: up to the limit per user, one more refused, a place again after a disconnect',
  async (t) => {
    const s = await scene(t, { REALTIME_MAX_SOCKETS_PER_USER: '3' });
    // Alice has one socket already.
    const second = await s.clients.connect(s.alice.accessToken);
    await s.clients.connect(s.alice.accessToken);
    const refused: ConnectError = await s.clients.refusal(s.alice.accessToken);
    t.equal(refused.data?.code, 'TOO_MANY_CONNECTIONS', 'the 4th socket is refused');
    t.ok(await s.clients.connect(s.bob.accessToken), 'another user is not affected');
    second.disconnect();
    let accepted = false;
    for (let attempt = 0; attempt < 20 && !accepted; attempt++) {
      accepted = await s.clients.connect(s.alice.accessToken).then(
        () => true,
        async () => {
          await new Promise((resolve) => setTimeout(resolve, 100));
          return false;
        },
      );
    }
    t.ok(accepted, 'a place is free again once a socket has gone');
    t.same(s.clients.violations(), [], 'everything matches asyncapi.yaml');
  },
);

t.test(
  'REALTIME_HTTP_PUBLISH_RATE: up to the limit per user over HTTP, then 429; other users unaffected',
  async (t) => {
    const s = await scene(t, { REALTIME_HTTP_PUBLISH_RATE: '3' });
    const post = (session: MobileSession, n: number) =>
      s.app.inject({
        method: 'POST',
        url: '/api/realtime/messages',
        headers: bearer(session.accessToken),
        payload: { channel: CHANNEL, event: 'note', payload: { n } },
      });
    for (let n = 1; n <= 3; n++) t.equal((await post(s.alice, n)).statusCode, 201, `publish ${n} accepted`);
    const fourth = await post(s.alice, 4);
    assertErrorBody(t, fourth, 429, 'RATE_LIMITED');
    t.ok(Number(fourth.headers['retry-after']) > 0, 'with Retry-After');
    t.equal((await post(s.bob, 1)).statusCode, 201, 'Bob has his own budget');
    const overSocket = await publish(s.alice.socket, { channel: CHANNEL, event: 'note', payload: { n: 5 } });
    t.equal(overSocket.ok, true, 'the socket keeps its own budget');
  },
);

/** `levels` nested arrays around 1, as JSON text. */
const nestedText = (levels: number) => `${'['.repeat(levels)}1${']'.repeat(levels)}`;

t.test('nesting depth over HTTP: 32 levels pass, 33 and a 5,000-level payload are 400 INVALID_INPUT', async (t) => {
  const s = await scene(t, {});
  const post = (payloadText: string) =>
    s.app.inject({
      method: 'POST',
      url: '/api/realtime/messages',
      headers: { ...bearer(s.alice.accessToken), 'content-type': 'application/json' },
      payload: `{"channel":"${CHANNEL}","event":"note","payload":{"a":${payloadText}}}`,
    });
  // body (1) > payload (2) > a: arrays from level 3.
  t.equal((await post(nestedText(MAX_JSON_DEPTH - 2))).statusCode, 201, `${MAX_JSON_DEPTH} levels are accepted`);
  const over = await post(nestedText(MAX_JSON_DEPTH - 1));
  t.match(
    assertErrorBody(t, over, 400, 'INVALID_INPUT').message,
    /^body\.payload\.a(\[0\])* nests objects and arrays more than 32 levels deep$/,
  );
  const deep = await post(nestedText(5_000));
  assertErrorBody(t, deep, 400, 'INVALID_INPUT');
  const inProfile = await s.app.inject({
    method: 'PATCH',
    url: '/api/auth/profiles/current',
    headers: { ...bearer(s.alice.accessToken), 'content-type': 'application/json' },
    payload: `{"profile":{"x":${nestedText(5_000)}}}`,
  });
  assertErrorBody(t, inProfile, 400, 'INVALID_INPUT');
});

t.test('nesting depth on the socket: 32 levels pass; 33, 5,000 and 500,000 levels are INVALID_PAYLOAD', async (t) => {
  const s = await scene(t, {});
  const socket = s.alice.socket;
  const frame = (levels: number, ackId: number) =>
    `2${ackId}["realtime:publish",{"channel":"${CHANNEL}","event":"note","payload":{"a":${nestedText(levels)}}}]`;
  /** Sends a raw socket.io event frame (the client library would recurse over such a value itself). */
  const sendRaw = (levels: number, ackId: number) =>
    new Promise<Ack>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no answer to ${levels} levels`)), 5_000);
      const acks = (socket as unknown as { acks: Record<number, (ack: Ack) => void> }).acks;
      acks[ackId] = (ack) => {
        clearTimeout(timer);
        resolve(ack);
      };
      (socket.io.engine as unknown as { write(data: string): void }).write(frame(levels, ackId));
    });
  const accepted = await sendRaw(MAX_JSON_DEPTH - 2, 9_001);
  t.equal(accepted.ok, true, `${MAX_JSON_DEPTH} levels are accepted`);
  for (const [levels, id] of [
    [MAX_JSON_DEPTH - 1, 9_002],
    [5_000, 9_003],
    [500_000, 9_004],
  ] as const) {
    const ack = await sendRaw(levels, id);
    t.same([ack.ok, ack.error?.code], [false, 'INVALID_PAYLOAD'], `${levels + 2} levels: INVALID_PAYLOAD`);
  }
  const viaLibrary = await emitUncheckedWithAck(socket, 'realtime:subscribe', { channel: JSON.parse(nestedText(40)) });
  t.equal(viaLibrary.error?.code, 'INVALID_PAYLOAD', 'deep values in any field of any event');
  t.equal(
    (await publish(socket, { channel: CHANNEL, event: 'note', payload: { fine: true } })).ok,
    true,
    'the connection still works',
  );
  // A fresh socket.io client sees the same server (no stuck state).
  const other = io(urlOf(s.app), {
    transports: ['websocket'],
    auth: { token: s.bob.accessToken },
    forceNew: true,
    reconnection: false,
  });
  t.teardown(() => other.close());
  await new Promise<void>((resolve, reject) => {
    other.once('connect', resolve);
    other.once('connect_error', reject);
  });
  t.pass('new connections are accepted');
});

t.test('anonymous sockets (REALTIME_ALLOW_ANON) are counted per client address against the same limit', async (t) => {
  const s = await scene(t, { REALTIME_ALLOW_ANON: 'true', REALTIME_MAX_SOCKETS_PER_USER: '2' });
  await s.clients.connect(undefined);
  const second = await s.clients.connect(undefined);
  t.equal(
    (await s.clients.refusal(undefined)).data?.code,
    'TOO_MANY_CONNECTIONS',
    'a third from the address is refused',
  );
  t.ok(await s.clients.connect(s.bob.accessToken), 'signed-in users are counted on their own');
  second.disconnect();
  let accepted = false;
  for (let attempt = 0; attempt < 20 && !accepted; attempt++) {
    accepted = await s.clients.connect(undefined).then(
      () => true,
      async () => {
        await new Promise((resolve) => setTimeout(resolve, 100));
        return false;
      },
    );
  }
  t.ok(accepted, 'a place is free again once one has gone');
});

t.test(
  'realtime.subscribable: only the service may call it, and it leaves the role and settings as they were',
  async (t) => {
    const s = await scene(t, {});
    const asked = await sql<{ allowed: boolean }>`
    select allowed from realtime.subscribable(${[s.alice.userId, null]}::uuid[], ${[CHANNEL, CHANNEL]}::text[])
    order by ordinal`.execute(s.db);
    t.same(
      asked.rows.map((r) => r.allowed),
      [true, false],
      'Alice (a member) may, an anonymous caller may not',
    );
    const after = await s.db.transaction().execute(async (trx) => {
      await sql`select set_config('request.user_id', 'before', true), set_config('realtime.channel_name', 'kept', true)`.execute(
        trx,
      );
      await sql`select * from realtime.subscribable(${[s.bob.userId]}::uuid[], ${[CHANNEL]}::text[])`.execute(trx);
      return (
        await sql<{ role: string; userId: string; channel: string }>`
        select current_user as role, current_setting('request.user_id') as "userId",
          current_setting('realtime.channel_name') as channel`.execute(trx)
      ).rows[0];
    });
    t.match(after, { userId: 'before', channel: 'kept' }, 'the transaction keeps its settings');
    t.not(after?.role, 'authenticated', 'and its role');
    const refused = await s.db
      .transaction()
      .execute(async (trx) => {
        await sql`set local role authenticated`.execute(trx);
        await sql`select * from realtime.subscribable(${[s.bob.userId]}::uuid[], ${[CHANNEL]}::text[])`.execute(trx);
      })
      .then(
        () => 'called',
        (err: { code?: string }) => err.code,
      );
    t.equal(refused, '42501', 'a caller acting as authenticated may not execute it (insufficient_privilege)');
  },
);
