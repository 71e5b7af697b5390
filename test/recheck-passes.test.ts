// How the re-check of live subscriptions makes progress, with a fake database: a pass put off by a
// transient error is tried again without waiting for the period (or a change), and changes that
// come faster than a pass still let every subscription be asked.
import type { FastifyBaseLogger } from 'fastify';
import t from 'tap';
import { type LiveSubscription, SubscriptionRecheck } from '../src/realtime/recheck.ts';

const silent = { warn: () => {}, error: () => {}, info: () => {} } as unknown as FastifyBaseLogger;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const transient = Object.assign(new Error('connection lost'), { transient: true });

function subscriptions(count: number): LiveSubscription<string>[] {
  return Array.from({ length: count }, (_, i) => ({ socket: `s${i}`, userId: `u${i}`, channel: 'c', joined: i }));
}

t.test('a pass put off by the database is tried again soon, without a period or another change', async (t) => {
  const ended: string[] = [];
  let calls = 0;
  const recheck = new SubscriptionRecheck<string>({
    list: () => subscriptions(2),
    check: async (questions) => {
      calls++;
      if (calls === 1) throw transient;
      return questions.map(() => false);
    },
    end: (s) => {
      ended.push(s.socket);
      return true;
    },
    isTransient: (err) => (err as { transient?: boolean }).transient === true,
    periodMs: 0,
    log: silent,
  });
  t.teardown(() => recheck.close());
  recheck.changed();
  await recheck.settled();
  t.same(ended, [], 'the first pass was put off');
  await sleep(1_500);
  await recheck.settled();
  t.same(ended, ['s0', 's1'], 'and tried again: both ended');
});

t.test('changes faster than a pass: every subscription is still asked while they keep coming', async (t) => {
  const asked = new Set<string>();
  const ended = new Set<string>();
  const recheck = new SubscriptionRecheck<string>({
    list: () => subscriptions(4),
    check: async (questions) => {
      await sleep(30);
      for (const q of questions) asked.add(String(q.userId));
      return questions.map(() => false);
    },
    end: (s) => {
      ended.add(s.socket);
      return true;
    },
    isTransient: () => false,
    periodMs: 0,
    log: silent,
    batchSize: 1,
  });
  t.teardown(() => recheck.close());
  // A change every 20 ms for 600 ms; a pass of four batches takes about 4 × 60 ms.
  for (let i = 0; i < 30; i++) {
    recheck.changed();
    await sleep(20);
  }
  t.same([...asked].sort(), ['u0', 'u1', 'u2', 'u3'], 'all four asked during the storm of changes');
  t.same([...ended].sort(), ['s0', 's1', 's2', 's3'], 'and ended');
  await recheck.settled();
});
