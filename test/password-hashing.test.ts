// Password hashing is bounded work: sign-up, sign-in (the dummy hash of an unknown address too),
// reset and change run their hashes through one queue per instance, of fixed concurrency and fixed
// length, fair between networks. A request that finds no place is answered at once with 503
// SERVICE_UNAVAILABLE and Retry-After; when the queue is full, a newcomer from a network with at
// least two fewer hashes waiting than the network with the most takes the place of that network's
// newest waiting hash, which gets the 503 instead. Per-IP limits count an IPv6 client by its /56
// (RATE_LIMIT_IPV6_PREFIX), so addresses picked at will inside one home's allocation share one count.
import type { LightMyRequestResponse } from 'fastify';
import t, { type Test } from 'tap';
import { HashQueue, queuedHash } from '../src/auth/password-hashing.ts';
import { addressNetworks } from '../src/client-address.ts';
import type { Env } from '../src/config.ts';
import { buildAppCapturingLogs } from './helpers/app.ts';
import { buildAuthTestApp, newEmail, newRedisKeyPrefix, PASSWORD } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';

const METRICS_TOKEN = 'password-hashing-test-metrics-token-0123456789';

async function setup(t: Test, env: Env, generousRateLimits = true) {
  const built = await buildAuthTestApp(t, {
    env: { TRUST_PROXY: 'true', METRICS_TOKEN, ...env },
    label: 'password-hashing',
    generousRateLimits,
  });
  const { app } = built;
  const from = (ip: string) => ({ 'x-forwarded-for': ip });
  return {
    ...built,
    signUpFrom: (ip: string, email = newEmail('up')) =>
      app.inject({ method: 'POST', url: '/api/auth/users', payload: { email, password: PASSWORD }, headers: from(ip) }),
    signInFrom: (ip: string, email = newEmail('in'), password = PASSWORD) =>
      app.inject({
        method: 'POST',
        url: '/api/auth/sessions?client_type=mobile',
        payload: { email, password },
        headers: from(ip),
      }),
    refusals: async (reason: 'queue_full' | 'network_share') => {
      const res = await app.inject({ url: '/metrics', headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
      const line = res.body.split('\n').find((l) => l.startsWith(`password_hash_refused_total{reason="${reason}"}`));
      return Number(line?.split(' ')[1]);
    },
  };
}

/** Sends every request at once; the answers in the order they were completed. */
async function inCompletionOrder(requests: (() => Promise<LightMyRequestResponse>)[]) {
  const done: { index: number; res: LightMyRequestResponse }[] = [];
  await Promise.all(requests.map((send, index) => send().then((res) => done.push({ index, res }))));
  return done;
}

function assertBusy(t: Test, res: LightMyRequestResponse, label: string) {
  t.test(label, async (t) => {
    assertErrorBody(t, res, 503, 'SERVICE_UNAVAILABLE');
    const retryAfter = String(res.headers['retry-after']);
    t.match(retryAfter, /^[1-9]\d*$/, `Retry-After is a whole number of seconds, at least 1 (${retryAfter})`);
    t.ok(Number(retryAfter) <= 60, `Retry-After ${retryAfter} is short`);
  });
}

// One app for most tests (building one costs seconds): one hash at a time, three may wait, two of
// them from one network; two sign-ups per IP (an IPv6 /56) per window.
const admin = newEmail('admin');
const shared = await setup(
  t,
  {
    PASSWORD_HASH_CONCURRENCY: '1',
    PASSWORD_HASH_QUEUE: '3',
    PASSWORD_HASH_QUEUE_PER_NETWORK: '2',
    RATE_LIMIT_SIGN_UP: '2',
    ADMIN_EMAIL: admin,
    ADMIN_PASSWORD: PASSWORD,
  },
  false,
);

t.test('a full hash queue: sign-ups beyond its places get 503 with Retry-After at once', async (t) => {
  const { signUpFrom, refusals } = shared;
  const before = await refusals('queue_full');
  const done = await inCompletionOrder(Array.from({ length: 12 }, (_, i) => () => signUpFrom(`198.51.${i}.7`)));
  const accepted = done.filter((d) => d.res.statusCode === 202);
  const refused = done.filter((d) => d.res.statusCode !== 202);
  t.ok(accepted.length >= 3, `the running and the waiting sign-ups went on (${accepted.length} got 202)`);
  t.ok(refused.length >= 1, `sign-ups without a place were refused (${refused.length})`);
  for (const { index, res } of refused) assertBusy(t, res, `sign-up ${index}`);
  t.equal(done[0]?.res.statusCode, 503, 'the first answer is a refusal: it did not wait for any hash');
  t.equal(
    await refusals('queue_full'),
    before + refused.length,
    'each refusal is counted (password_hash_refused_total)',
  );
});

t.test('sign-in waits in the same queue, unknown addresses (the dummy hash) included', async (t) => {
  const { signInFrom } = shared;
  const done = await inCompletionOrder(
    Array.from({ length: 12 }, (_, i) => () => signInFrom(`203.0.${i}.9`, i % 2 === 0 ? admin : newEmail('nobody'))),
  );
  const refused = done.filter((d) => d.res.statusCode === 503);
  t.ok(refused.length >= 1, `sign-ins without a place were refused (${refused.length})`);
  t.ok(
    refused.some((d) => d.index % 2 === 1),
    'sign-ins of unknown addresses are refused alike: their dummy hash is queued too',
  );
  for (const { index, res } of refused) assertBusy(t, res, `sign-in ${index}`);
  t.equal(done[0]?.res.statusCode, 503, 'the first answer is a refusal: it did not wait for any hash');
  for (const { index, res } of done.filter((d) => d.res.statusCode !== 503)) {
    t.equal(res.statusCode, index % 2 === 0 ? 200 : 401, `sign-in ${index} that got a place was answered normally`);
  }
});

t.test('a flood from one /48 holds only its share of the queue: another network still gets a place', async (t) => {
  const { signInFrom, refusals } = shared;
  const before = await refusals('network_share');
  // Ten /56s of 2001:db8:77::/48, then one client elsewhere, all at once.
  const flood = Array.from({ length: 10 }, (_, i) => () => signInFrom(`2001:db8:77:${(i + 1).toString(16)}00::1`));
  const done = await inCompletionOrder([...flood, () => signInFrom('2001:db8:99::5')]);
  const floodRefused = done.filter((d) => d.index < 10 && d.res.statusCode === 503);
  t.ok(
    floodRefused.length >= 7,
    `the flood got one running and two waiting places at most (${floodRefused.length} refused)`,
  );
  for (const { index, res } of floodRefused) assertBusy(t, res, `flood sign-in ${index}`);
  t.equal(await refusals('network_share'), before + floodRefused.length, 'refused for its network share');
  const other = done.find((d) => d.index === 10);
  t.equal(other?.res.statusCode, 401, 'the other network was given a place and an answer (401: unknown address)');
});

t.test(
  "a full queue is fair at admission: a new network takes the place of the largest network's newest job",
  async (t) => {
    // One hash at a time, three may wait, two of them from one network. The running place is held by
    // a test-only route until released, so that the queue stays full while the newcomer arrives.
    const { app } = await buildAppCapturingLogs(t, 'error', {
      TRUST_PROXY: 'true',
      METRICS_TOKEN,
      REDIS_KEY_PREFIX: newRedisKeyPrefix('password-hashing'),
      RATE_LIMIT_SIGN_IN: '1000',
      PASSWORD_HASH_CONCURRENCY: '1',
      PASSWORD_HASH_QUEUE: '3',
      PASSWORD_HASH_QUEUE_PER_NETWORK: '2',
    });
    let release = () => {};
    let holding = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const holds = new Promise<void>((resolve) => {
      holding = resolve;
    });
    app.get('/test-only/hold-hash', async () => {
      await queuedHash(() => {
        holding();
        return held;
      });
      return {};
    });
    const signInFrom = (ip: string) =>
      app.inject({
        method: 'POST',
        url: '/api/auth/sessions?client_type=mobile',
        payload: { email: newEmail('fair'), password: PASSWORD },
        headers: { 'x-forwarded-for': ip },
      });
    const waiting = async () => {
      const res = await app.inject({ url: '/metrics', headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
      return Number(
        res.body
          .split('\n')
          .find((l) => l.startsWith('password_hash_queue_waiting '))
          ?.split(' ')[1],
      );
    };

    const holder = app.inject({ url: '/test-only/hold-hash', headers: { 'x-forwarded-for': '192.0.2.1' } });
    await holds;
    // The queue filled by two networks: two waiting from 2001:db8:a::/48 (two /56s), one from 2001:db8:b::/48.
    const named = (name: string, reply: Promise<LightMyRequestResponse>) => reply.then((res) => ({ name, res }));
    const fill = [
      named('a1', signInFrom('2001:db8:a:100::1')),
      named('a2', signInFrom('2001:db8:a:200::1')),
      named('b1', signInFrom('2001:db8:b:100::1')),
    ];
    for (let i = 0; i < 500 && (await waiting()) < 3; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    t.equal(await waiting(), 3, 'the queue is full: two networks fill its three places');

    // A newcomer from a network with nothing waiting.
    const newcomer = named('newcomer', signInFrom('198.51.100.7'));
    const first = await Promise.race([...fill, newcomer]);
    t.not(first.name, 'newcomer', 'the newcomer was not refused at once: it got a place');
    t.match(first.name, /^a[12]$/, `the largest network's job lost its place (${first.name})`);
    assertBusy(t, first.res, `${first.name}, evicted`);
    t.equal(await waiting(), 3, "the newcomer waits in the evicted job's place");

    release();
    t.equal((await holder).statusCode, 200, 'the held hash ran');
    const answers = await Promise.all([...fill, newcomer]);
    for (const { name, res } of answers) {
      if (name === first.name) continue;
      t.equal(res.statusCode, 401, `${name} had its turn and was answered normally (401: unknown address)`);
    }
  },
);

t.test('the queue serves networks in turn (HashQueue)', async (t) => {
  // Jobs that finish when told to: the order they start in is the order the queue chose.
  const started: string[] = [];
  const finish = new Map<string, () => void>();
  const queue = new HashQueue({ concurrency: 1, maxWaiting: 100, maxWaitingPerNetwork: 100 });
  const submit = (name: string, network: string, group: string) =>
    queue.run({ network, group }, () => {
      started.push(name);
      return new Promise<void>((resolve) => finish.set(name, resolve));
    });
  const settle = () => new Promise((resolve) => setImmediate(resolve));
  const all: Promise<void>[] = [];
  for (let i = 1; i <= 5; i++) all.push(submit(`flood${i}`, `f${i}`, 'flood'));
  await settle();
  all.push(submit('other', 'o', 'other'));
  t.same(queue.stats(), { running: 1, waiting: 5 });
  for (const name of ['flood1', 'other', 'flood2', 'flood3', 'flood4', 'flood5']) {
    await settle();
    t.equal(started.at(-1), name, `${name} runs next`);
    finish.get(name)?.();
  }
  await Promise.all(all);
  t.same(
    started,
    ['flood1', 'other', 'flood2', 'flood3', 'flood4', 'flood5'],
    "a job of another network goes before the flood's waiting jobs",
  );

  t.test("a full queue: only a group at least two larger than the newcomer's gives up its newest job", async (t) => {
    const q = new HashQueue({ concurrency: 1, maxWaiting: 4, maxWaitingPerNetwork: 3 });
    const outcome = new Map<string, string>();
    let release = () => {};
    const hold = new Promise<void>((resolve) => {
      release = resolve;
    });
    const job = (name: string, network: string, group: string) =>
      // A refusal is thrown by run(); the promise turns it into a rejection like an eviction's.
      new Promise<void>((resolve) => resolve(q.run({ network, group }, () => hold))).then(
        () => outcome.set(name, 'ran'),
        (err: { statusCode?: number }) => outcome.set(name, String(err.statusCode)),
      );
    const all = [job('running', 'r', 'r'), job('g1', 'g:1', 'g'), job('g2', 'g:2', 'g'), job('g3', 'g:1', 'g')];
    all.push(job('h1', 'h', 'h'));
    await settle();
    t.same(q.stats(), { running: 1, waiting: 4 });
    all.push(job('n1', 'n', 'n'));
    await settle();
    t.equal(outcome.get('g3'), '503', "the newest of the largest group's jobs (across its networks) is evicted");
    t.same(q.stats(), { running: 1, waiting: 4 }, 'the newcomer took its place');
    all.push(job('m1', 'm', 'm'));
    await settle();
    t.equal(outcome.get('g2'), '503', 'then its next newest');
    all.push(job('k1', 'k', 'k'));
    await settle();
    t.equal(outcome.get('k1'), '503', 'groups one apart do not swap: the newcomer is refused');
    release();
    await Promise.all(all);
    t.same(
      [...outcome]
        .filter(([, o]) => o === 'ran')
        .map(([name]) => name)
        .sort(),
      ['g1', 'h1', 'm1', 'n1', 'running'],
    );
  });

  t.test('within one group, its networks take turns', async (t) => {
    const order: string[] = [];
    const q = new HashQueue({ concurrency: 1, maxWaiting: 100, maxWaitingPerNetwork: 100 });
    const job = (name: string, network: string) =>
      q.run({ network, group: 'g' }, async () => {
        order.push(name);
        await settle();
      });
    await Promise.all([job('a1', 'a'), job('a2', 'a'), job('a3', 'a'), job('b1', 'b')]);
    t.same(order, ['a1', 'a2', 'b1', 'a3']);
  });
});

t.test('per-IP limits count IPv6 clients by /56 (RATE_LIMIT_IPV6_PREFIX)', async (t) => {
  t.test('addresses of one /56 share one count; another /56 has its own', async (t) => {
    const { signUpFrom } = shared;
    t.equal((await signUpFrom('2001:db8:0:100::1')).statusCode, 202, 'sign-up 1 from 2001:db8:0:100::1');
    t.equal((await signUpFrom('2001:db8:0:1ff:abcd::2')).statusCode, 202, 'sign-up 2 from 2001:db8:0:1ff:abcd::2');
    const third = await signUpFrom('2001:db8:0:1aa:1:2:3:4');
    assertErrorBody(t, third, 429, 'RATE_LIMITED');
    t.equal(
      (await signUpFrom('2001:db8:0:200::1')).statusCode,
      202,
      'the next /56 (2001:db8:0:200::/56) is not limited',
    );
    t.equal((await signUpFrom('198.51.100.1')).statusCode, 202, 'IPv4: 198.51.100.1');
    t.equal((await signUpFrom('198.51.100.2')).statusCode, 202, 'IPv4 clients are counted by address');
  });
  t.test('with RATE_LIMIT_IPV6_PREFIX=64 each /64 has its own count', async (t) => {
    const { signUpFrom } = await setup(t, { RATE_LIMIT_SIGN_UP: '2', RATE_LIMIT_IPV6_PREFIX: '64' }, false);
    t.equal((await signUpFrom('2001:db8:0:100::1')).statusCode, 202);
    t.equal((await signUpFrom('2001:db8:0:100::2')).statusCode, 202);
    assertErrorBody(t, await signUpFrom('2001:db8:0:100:ffff::3'), 429, 'RATE_LIMITED');
    t.equal((await signUpFrom('2001:db8:0:101::1')).statusCode, 202, 'another /64 of the same /56');
  });
  t.test('how addresses are grouped', async (t) => {
    t.same(addressNetworks('2001:db8:0:1ff:abcd::2', 56), {
      network: '2001:db8:0:100:0:0:0:0/56',
      group: '2001:db8:0:0:0:0:0:0/48',
    });
    t.same(addressNetworks('2001:DB8::1', 56), addressNetworks('2001:db8:0:ff::', 56), 'case and :: do not matter');
    t.same(addressNetworks('::ffff:192.0.2.33', 56), { network: '192.0.2.33', group: '192.0.2.0/24' });
    t.same(addressNetworks('::ffff:c000:221', 56), { network: '192.0.2.33', group: '192.0.2.0/24' });
    t.same(addressNetworks('192.0.2.33', 56), { network: '192.0.2.33', group: '192.0.2.0/24' });
    t.equal(addressNetworks('fe80::1%eth0', 64).network, 'fe80:0:0:0:0:0:0:0/64');
    t.equal(addressNetworks('2001:db8::1', 128).network, '2001:db8:0:0:0:0:0:1/128');
  });
});
