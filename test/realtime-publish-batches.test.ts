// Publishes of one channel stored together (src/realtime/publisher.ts, channel-batches.ts): what
// arrives while a channel's batch is being stored goes in a next one, one caller's messages at a
// time, in arrival order, each message still checked by the policies and refused or failed alone
// (whatever a policy keeps in the transaction reaches no other caller); what waited too long, or was
// sent by a socket no longer subscribed, is not stored; with Redis, what Redis did not take is taken
// out again and the rest stays, and nothing is handed to Redis twice; with notifications, one that
// did not come back is taken out again alone. And a connection hands on consecutive publishes on one
// channel at once, while anything after them, a refused publish included, waits until they are
// answered.
import { randomUUID } from 'node:crypto';
import type { Kysely } from 'kysely';
import { sql } from 'kysely';
import t from 'tap';
import type { Database } from '../src/db/schema.ts';
import { ChannelBatches } from '../src/realtime/channel-batches.ts';
import type { Delivery, Fanout } from '../src/realtime/fanout.ts';
import { PublishSlots } from '../src/realtime/publish-budget.ts';
import { createPublisher, MAX_PUBLISH_BATCH, type PublishInput } from '../src/realtime/publisher.ts';
import { buildTestApp } from './helpers/app.ts';
import { decodeClaims } from './helpers/auth.ts';
import { createTestDatabase, heldTransaction, lockWaits, usingPostgres } from './helpers/database.ts';
import {
  type Ack,
  commitOrder,
  nextEvent,
  publish,
  RealtimeClients,
  subscribed,
  urlOf,
} from './helpers/realtime-client.ts';
import { accessTokenFor } from './helpers/tokens.ts';

const idOf = (d: Delivery) => String((d.body.meta as { messageId: string }).messageId);

t.test('ChannelBatches: alone when idle, then what waited, in order, at most max, per channel', async (t) => {
  const runs: Array<[string, number[]]> = [];
  const gates: Array<() => void> = [];
  const batches = new ChannelBatches<number>(
    async (channel, batch) => {
      runs.push([channel, [...batch]]);
      await new Promise<void>((resolve) => gates.push(resolve));
    },
    3,
    () => 'one group',
  );
  batches.add('a', 1);
  for (const n of [2, 3, 4, 5]) batches.add('a', n);
  batches.add('b', 10);
  t.same(runs, [
    ['a', [1]],
    ['b', [10]],
  ]);
  gates.shift()?.();
  await new Promise((resolve) => setImmediate(resolve));
  t.same(runs.at(-1), ['a', [2, 3, 4]], 'the next batch: what waited, in order, at most 3');
  batches.add('a', 6);
  gates.shift()?.(); // b's
  gates.shift()?.(); // a's [2, 3, 4]
  await new Promise((resolve) => setImmediate(resolve));
  t.same(runs.at(-1), ['a', [5, 6]]);
  gates.shift()?.();
  await new Promise((resolve) => setImmediate(resolve));
  batches.add('a', 7);
  t.same(runs.at(-1), ['a', [7]], 'an idle channel starts at once');
  gates.shift()?.();
});

t.test('ChannelBatches: a batch holds one group, the longest waiting, in order', async (t) => {
  const runs: string[][] = [];
  const gates: Array<() => void> = [];
  const batches = new ChannelBatches<string>(
    async (_, batch) => {
      runs.push([...batch]);
      await new Promise<void>((resolve) => gates.push(resolve));
    },
    2,
    (item) => item.slice(0, 1),
  );
  for (const item of ['a1', 'a2', 'b1', 'a3', 'b2', 'a4', 'b3']) batches.add('channel', item);
  for (let i = 0; i < 5; i++) {
    gates.shift()?.();
    await new Promise((resolve) => setImmediate(resolve));
  }
  t.same(runs, [['a1'], ['a2', 'a3'], ['b1', 'b2'], ['a4'], ['b3']]);
});

t.test('the publisher on the database', async (t) => {
  const database = await createTestDatabase();
  t.teardown(() => database.drop());
  const { db } = database.handle;
  await db.insertInto('realtime.channels').values({ pattern: 'room:%' }).execute();
  const user = randomUUID();

  /** A fan-out of the given kind that records what it is asked. */
  const fanoutOf = (ordering: Fanout['ordering'], refuse: (d: Delivery) => boolean = () => false) => {
    const seen = { asked: 0, delivered: [] as string[] };
    const fanout: Fanout = {
      ordering,
      notification: () => undefined,
      unavailable: () => {
        seen.asked += 1;
        return undefined;
      },
      deliver: async (d) => {
        if (refuse(d)) return false;
        seen.delivered.push(idOf(d));
        return true;
      },
      close: async () => {},
    };
    return { fanout, seen };
  };
  const publisherOf = (fanout: Fanout, slots = new PublishSlots(1, 2_000), maxWaitMs = 2_000) =>
    createPublisher({ db, fanout, slots, maxWaitMs, maxPayloadBytes: 4096 });
  const message = (channel: string, n: number | string, extra: Partial<PublishInput> = {}): PublishInput => ({
    userId: user,
    channel,
    event: 'seq',
    payload: { n, quoted: 'a "quoted" \\ string, {braces}' },
    ...extra,
  });
  const stored = async (channel: string) =>
    (
      await db
        .selectFrom('realtime.messages')
        .select(['id', 'payload'])
        .where('channel_name', '=', channel)
        .orderBy('seq')
        .execute()
    ).map((r) => r.payload as { n: number; quoted?: string });

  t.test('what waits goes together, in order; a refused message is refused alone', async (t) => {
    const { fanout, seen } = fanoutOf('local');
    const publishAt = publisherOf(fanout);
    const now = new Date();
    // The first goes alone; the next five wait for it and go in one batch. The third claims to be
    // someone else: the publish policy refuses it, and only it.
    const outcomes = await Promise.all([
      publishAt(message('room:a', 1), now),
      publishAt(message('room:a', 2), now),
      publishAt(message('room:a', 3, { senderId: randomUUID() }), now),
      publishAt(message('room:a', 4), now),
      publishAt(message('room:a', 5), now),
      publishAt(message('room:a', 6), now),
    ]);
    t.same(
      outcomes.map((o) => (o.ok ? 'ok' : o.code)),
      ['ok', 'ok', 'UNAUTHORIZED', 'ok', 'ok', 'ok'],
    );
    t.equal(seen.asked, 4, 'two batches (each asks the fan-out twice), not six');
    const payloads = await stored('room:a');
    t.same(
      payloads.map((p) => p.n),
      [1, 2, 4, 5, 6],
      'stored in the order they came',
    );
    t.equal(payloads[0]?.quoted, 'a "quoted" \\ string, {braces}', 'payloads arrive intact');
    t.same(
      seen.delivered,
      outcomes.flatMap((o) => (o.ok ? [o.meta.messageId] : [])),
      'delivered in that order',
    );
    t.same(seen.delivered, await commitOrder(db, 'room:a'), 'which is the commit order');
  });

  t.test(`at most ${MAX_PUBLISH_BATCH} in a batch`, async (t) => {
    const { fanout, seen } = fanoutOf('local');
    const publishAt = publisherOf(fanout);
    const now = new Date();
    const total = 1 + MAX_PUBLISH_BATCH + 3;
    const outcomes = await Promise.all(Array.from({ length: total }, (_, n) => publishAt(message('room:max', n), now)));
    t.ok(outcomes.every((o) => o.ok));
    t.equal(seen.asked, 2 * 3, 'three batches: 1, the most, the rest');
    t.same(
      (await stored('room:max')).map((p) => p.n),
      Array.from({ length: total }, (_, n) => n),
    );
  });

  t.test('a value the database refuses fails its message alone, within the batch', async (t) => {
    // A policy that cannot read a non-numeric n, and a sender id that is no uuid: each fails its
    // own message (SQLSTATE 22P02) inside the one statement; nothing is tried again alone.
    await sql`create policy numeric_n on realtime.messages as restrictive for insert to authenticated
      with check ((payload->>'n')::int >= 0)`.execute(db);
    t.teardown(() => sql`drop policy numeric_n on realtime.messages`.execute(db));
    const { fanout, seen } = fanoutOf('local');
    const publishAt = publisherOf(fanout);
    const now = new Date();
    const results = await Promise.allSettled([
      publishAt(message('room:error', 1), now),
      publishAt(message('room:error', 2), now),
      publishAt(message('room:error', 'x'), now),
      publishAt(message('room:error', 3, { senderId: 'not-a-uuid' }), now),
      publishAt(message('room:error', 4, { senderId: `urn:uuid:${user}` }), now),
    ]);
    t.same(
      results.map((r) => (r.status === 'fulfilled' ? r.value.ok : (r.reason as { code?: string }).code)),
      [true, true, '22P02', '22P02', true],
    );
    t.equal(seen.asked, 4, 'two batches, nothing tried again alone');
    t.same(
      (await stored('room:error')).map((p) => p.n),
      [1, 2, 4],
    );
    const sender = await db
      .selectFrom('realtime.messages')
      .select('sender_id')
      .where('channel_name', '=', 'room:error')
      .where(sql`payload->>'n'`, '=', '4')
      .executeTakeFirstOrThrow();
    t.equal(sender.sender_id, user, 'a sender id in its urn:uuid: form is stored plain');
  });

  t.test('an error a policy raises fails its message alone, whatever its class', async (t) => {
    await sql`create function public.refuse_some(p jsonb) returns boolean language plpgsql as $$
      begin
        case p->>'n'
          when 'feature' then raise exception 'no' using errcode = '0A000';
          when 'cardinality' then raise exception 'no' using errcode = '21000';
          when 'privilege' then raise exception 'members only' using errcode = '42501';
          else return true;
        end case;
      end $$`.execute(db);
    await sql`create policy not_some on realtime.messages as restrictive for insert to authenticated
      with check (public.refuse_some(payload))`.execute(db);
    t.teardown(async () => {
      await sql`drop policy not_some on realtime.messages`.execute(db);
      await sql`drop function public.refuse_some`.execute(db);
    });
    const { fanout, seen } = fanoutOf('local');
    const publishAt = publisherOf(fanout);
    const now = new Date();
    const results = await Promise.allSettled(
      [1, 2, 'feature', 'cardinality', 'privilege', 3].map((n) => publishAt(message('room:boom', n), now)),
    );
    t.same(
      results.map((r) => (r.status === 'fulfilled' ? r.value.ok : (r.reason as { code?: string }).code)),
      [true, true, '0A000', '21000', '42501', true],
    );
    t.equal(seen.asked, 4, 'two statements, nothing tried again');
    t.same(
      (await stored('room:boom')).map((p) => p.n),
      [1, 2, 3],
    );
  });

  t.test('one caller’s messages in one transaction: what a policy keeps there reaches no other caller', async (t) => {
    // A policy that remembers its decision in a transaction-local setting.
    const allowed = randomUUID();
    await sql`create function public.may_post() returns boolean language plpgsql as $$
      begin
        if coalesce(current_setting('app.may_post', true), '') = '' then
          perform set_config('app.may_post', (auth.uid() = ${sql.lit(allowed)}::uuid)::text, true);
        end if;
        return current_setting('app.may_post')::boolean;
      end $$`.execute(db);
    await sql`create policy cached on realtime.messages as restrictive for insert to authenticated
      with check (public.may_post())`.execute(db);
    t.teardown(async () => {
      await sql`drop policy cached on realtime.messages`.execute(db);
      await sql`drop function public.may_post`.execute(db);
    });
    const { fanout, seen } = fanoutOf('local');
    const publishAt = publisherOf(fanout);
    const now = new Date();
    const outsider = randomUUID();
    const results = await Promise.all([
      publishAt(message('room:cache', 1, { userId: allowed, senderId: allowed }), now),
      publishAt(message('room:cache', 2, { userId: allowed, senderId: allowed }), now),
      publishAt(message('room:cache', 'outsider', { userId: outsider, senderId: outsider }), now),
      publishAt(message('room:cache', 3, { userId: allowed, senderId: allowed }), now),
    ]);
    t.same(
      results.map((o) => (o.ok ? 'ok' : o.code)),
      ['ok', 'ok', 'UNAUTHORIZED', 'ok'],
    );
    t.equal(seen.asked, 6, 'three batches: the first alone, the allowed caller’s two, the outsider’s');
    t.same(
      (await stored('room:cache')).map((p) => p.n),
      [1, 2, 3],
    );
  });

  t.test('with Redis, a transaction that fails after Redis took its messages: none is sent again', async (t) => {
    await sql`create function public.no_boom_at_commit() returns trigger language plpgsql as $$
      begin
        if new.payload->>'n' = 'boom' then raise exception 'boom' using errcode = '23514'; end if;
        return null;
      end $$`.execute(db);
    await sql`create constraint trigger boom_at_commit after insert on realtime.messages
      deferrable initially deferred for each row execute function public.no_boom_at_commit()`.execute(db);
    t.teardown(async () => {
      await sql`drop trigger boom_at_commit on realtime.messages`.execute(db);
      await sql`drop function public.no_boom_at_commit`.execute(db);
    });
    const { fanout, seen } = fanoutOf('publish-under-lock');
    const publishAt = publisherOf(fanout);
    const now = new Date();
    const results = await Promise.allSettled([1, 2, 'boom', 3].map((n) => publishAt(message('room:commit', n), now)));
    t.same(
      results.map((r) => (r.status === 'fulfilled' ? r.value.ok : (r.reason as { code?: string }).code)),
      [true, '23514', '23514', '23514'],
      'the failed transaction’s messages are all refused',
    );
    t.equal(new Set(seen.delivered).size, seen.delivered.length, 'no message handed to Redis twice');
    t.equal(seen.delivered.length, 4);
    t.same(
      (await stored('room:commit')).map((p) => p.n),
      [1],
    );
  });

  t.test('a socket no longer subscribed once its batch holds a connection: not stored', async (t) => {
    const { fanout } = fanoutOf('local');
    const slots = new PublishSlots(1, 2_000);
    const publishAt = publisherOf(fanout, slots);
    let free!: () => void;
    const taken = slots.run(() => new Promise<void>((resolve) => (free = resolve)));
    let subscribedNow = true;
    const stillSubscribed = () => subscribedNow;
    const now = new Date();
    const outcomes = Promise.all([1, 2, 3].map((n) => publishAt(message('room:gone', n, { stillSubscribed }), now)));
    // The first batch waits for the place, the others behind it; the subscription ends meanwhile.
    subscribedNow = false;
    free();
    await taken;
    t.same(
      (await outcomes).map((o) => (o.ok ? 'ok' : o.code)),
      ['NOT_SUBSCRIBED', 'NOT_SUBSCRIBED', 'NOT_SUBSCRIBED'],
    );
    t.same(await stored('room:gone'), []);
  });

  t.test('what waited too long behind its channel is refused, not stored late', async (t) => {
    const { fanout } = fanoutOf('local');
    const slots = new PublishSlots(1, 2_000);
    const publishAt = publisherOf(fanout, slots, 100);
    // The only place is taken for 300 ms: the first batch waits for it, the others behind it.
    let free!: () => void;
    const taken = slots.run(() => new Promise<void>((resolve) => (free = resolve)));
    const now = new Date();
    const outcomes = Promise.all([1, 2, 3].map((n) => publishAt(message('room:wait', n), now)));
    setTimeout(() => free(), 300);
    await taken;
    const tooMany =
      'Messages cannot be delivered right now (too many publishes are waiting on this instance); try again shortly';
    t.same(
      (await outcomes).map((o) => (o.ok ? 'ok' : `${o.code}: ${o.message}`)),
      ['ok', `SERVICE_UNAVAILABLE: ${tooMany}`, `SERVICE_UNAVAILABLE: ${tooMany}`],
    );
    t.same(
      (await stored('room:wait')).map((p) => p.n),
      [1],
    );
  });

  t.test('Redis did not take one: that one alone is taken out again and refused', async (t) => {
    const { fanout } = fanoutOf('publish-under-lock', (d) => (d.body as { n?: unknown }).n === 3);
    const publishAt = publisherOf(fanout);
    const now = new Date();
    const outcomes = await Promise.all([
      publishAt(message('room:redis', 1), now),
      publishAt(message('room:redis', 2), now),
      publishAt(message('room:redis', 3), now),
      publishAt(message('room:redis', 4, { senderId: randomUUID() }), now),
      publishAt(message('room:redis', 5), now),
    ]);
    t.same(
      outcomes.map((o) => (o.ok ? 'ok' : o.code)),
      ['ok', 'ok', 'SERVICE_UNAVAILABLE', 'UNAUTHORIZED', 'ok'],
    );
    t.same(
      (await stored('room:redis')).map((p) => p.n),
      [1, 2, 5],
      'what Redis took (and subscribers may have) stays',
    );
  });

  t.test('a notification that did not come back: that message alone is taken out and refused', async (t) => {
    const { fanout } = fanoutOf('notify', (d) => (d.body as { n?: unknown }).n === 3);
    const publishAt = publisherOf(fanout);
    const now = new Date();
    const outcomes = await Promise.all([1, 2, 3, 4].map((n) => publishAt(message('room:notify', n), now)));
    t.same(
      outcomes.map((o) => (o.ok ? 'ok' : o.code)),
      ['ok', 'ok', 'SERVICE_UNAVAILABLE', 'ok'],
    );
    t.same(
      (await stored('room:notify')).map((p) => p.n),
      [1, 2, 4],
    );
  });
});

t.test(
  'a connection',
  { skip: !usingPostgres && 'PostgreSQL only (a channel lock held by another connection)' },
  async (t) => {
    const { app, database } = await buildTestApp(t, { env: { REALTIME_PUBLISH_RATE: '1000000' } });
    await app.listen({ port: 0, host: '127.0.0.1' });
    const db = database.handle.db as Kysely<Database>;
    await db.insertInto('realtime.channels').values({ pattern: 'room:%' }).execute();
    const clients = new RealtimeClients(t, urlOf(app));
    const waits = await lockWaits(t, database.url);
    /** Another transaction holds `channel`'s lock (another instance's batch, say): its publishes wait. */
    const holdChannel = async (channel: string) => {
      const held = heldTransaction(db, (trx) =>
        sql`select pg_advisory_xact_lock(hashtextextended(${`realtime:${channel}`}, 0))`.execute(trx),
      );
      await held.held;
      return held;
    };
    const storedBy = async (token: string) =>
      (
        await db
          .selectFrom('realtime.messages')
          .select(['channel_name', 'payload'])
          .where('sender_id', '=', String(decodeClaims(token).sub))
          .orderBy('seq')
          .execute()
      ).map((r) => `${r.channel_name}#${(r.payload as { n: number }).n}`);

    t.test('publishes on one channel are handed on together; a publish elsewhere waits for them', async (t) => {
      const token = accessTokenFor(app);
      const socket = await clients.connect(token);
      await subscribed(socket, 'room:a');
      await subscribed(socket, 'room:b');
      const held = await holdChannel('room:a');
      const answers: string[] = [];
      const send = (channel: string, n: number) =>
        publish(socket, { channel, event: 'seq', payload: { n } }, 20_000).then((ack: Ack) => {
          answers.push(`${channel}#${n}:${ack.ok}`);
          return ack;
        });
      const acks = [send('room:a', 1), send('room:a', 2), send('room:a', 3), send('room:b', 4)];
      t.ok(await waits('%publish_as_callers%'), 'the first publish waits for the lock');
      await new Promise((resolve) => setTimeout(resolve, 300));
      t.same(await commitOrder(db, 'room:b'), [], 'the publish on room:b waits its turn');
      await held.commit();
      await Promise.all(acks);
      t.same(answers, ['room:a#1:true', 'room:a#2:true', 'room:a#3:true', 'room:b#4:true'], 'answered in order');
      t.same(await storedBy(token), ['room:a#1', 'room:a#2', 'room:a#3', 'room:b#4'], 'stored in the order sent');
    });

    t.test('a socket gone while its publishes wait: only the one under way is stored', async (t) => {
      const token = accessTokenFor(app);
      const socket = await clients.connect(token);
      await subscribed(socket, 'room:gone');
      const held = await holdChannel('room:gone');
      for (let n = 1; n <= 5; n++)
        socket.emit('realtime:publish', { channel: 'room:gone', event: 'seq', payload: { n } });
      t.ok(await waits('%publish_as_callers%'), 'the first publish waits for the lock');
      socket.disconnect();
      await new Promise((resolve) => setTimeout(resolve, 300));
      await held.commit();
      await new Promise((resolve) => setTimeout(resolve, 500));
      t.same(await storedBy(token), ['room:gone#1'], 'the other four are not stored');
    });

    t.test('a publish refused for its subscription is answered after the ones before it', async (t) => {
      const token = accessTokenFor(app);
      const socket = await clients.connect(token);
      await subscribed(socket, 'room:ended');
      const held = await holdChannel('room:ended');
      const answers: string[] = [];
      const send = (n: number) =>
        publish(socket, { channel: 'room:ended', event: 'seq', payload: { n } }, 20_000).then((ack: Ack) =>
          answers.push(`#${n}:${ack.ok ? 'ok' : ack.error?.code}`),
        );
      const early = [1, 2, 3].map(send);
      t.ok(await waits('%publish_as_callers%'), 'the first publish waits for the lock');
      // A policy change ends the subscription (the re-check) while they wait.
      const ended = nextEvent(socket, 'realtime:error', 10_000);
      await sql`create policy not_ended on realtime.channels as restrictive for select to authenticated
        using (realtime.channel_name() is distinct from 'room:ended')`.execute(db);
      t.teardown(() => sql`drop policy not_ended on realtime.channels`.execute(db));
      t.match(await ended, { code: 'UNAUTHORIZED', channel: 'room:ended' }, 'the subscription ended');
      const late = send(99);
      await new Promise((resolve) => setTimeout(resolve, 300));
      t.same(answers, [], 'the late one waits for the earlier answers');
      await held.commit();
      await Promise.all([...early, late]);
      t.same(answers, ['#1:UNAUTHORIZED', '#2:NOT_SUBSCRIBED', '#3:NOT_SUBSCRIBED', '#99:NOT_SUBSCRIBED']);
      t.same(await storedBy(token), [], 'nothing stored');
    });
  },
);
