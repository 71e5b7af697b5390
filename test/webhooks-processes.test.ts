// Webhooks across real service processes (`node src/server.ts`): an event survives the service
// being killed (SIGKILL) between the change and its delivery, on PostgreSQL and on a PGlite data
// directory; and two instances on one PostgreSQL database deliver each event once, never both.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { enqueueWebhookEvents } from '../src/db/repositories/webhook-outbox.ts';
import { newEmail, PASSWORD } from './helpers/auth.ts';
import { createTestDatabase, usingPostgres } from './helpers/database.ts';
import { type ServiceInstance, startInstances, stopService } from './helpers/instances.ts';
import { newWebhookSecret, type Receipt, startWebhookReceiver } from './helpers/webhook-receiver.ts';

const ADMIN_EMAIL = newEmail('admin');
const ADMIN_PASSWORD = 'the administrator passphrase';
const JWT_SECRET = 'webhooks-processes-secret-2b8e6f1a9c4d7e30';
const METRICS_TOKEN = 'webhooks-processes-metrics-token-0123456789abcdef';

interface Delivery {
  id: string;
  eventType: string;
  status: string;
  attempts: number;
  lastError: string | null;
  payload: { data: { userId?: string } };
}

async function post(instance: ServiceInstance, url: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${instance.url}${url}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

async function signUp(instance: ServiceInstance, ip: string): Promise<string> {
  const res = await post(
    instance,
    '/api/auth/users?client_type=mobile',
    { email: newEmail('proc'), password: PASSWORD },
    { 'x-forwarded-for': ip },
  );
  if (res.status !== 201) throw new Error(`sign-up: ${res.status} ${JSON.stringify(res.json)}`);
  return (res.json.user as { id: string }).id;
}

const adminTokens = new Map<ServiceInstance, string>();

/** The outbox as the administrator sees it, through GET /api/auth/webhook-deliveries. */
async function deliveries(instance: ServiceInstance, status?: string): Promise<Delivery[]> {
  let token = adminTokens.get(instance);
  if (token === undefined) {
    const session = await post(instance, '/api/auth/sessions?client_type=mobile', {
      email: ADMIN_EMAIL,
      password: ADMIN_PASSWORD,
    });
    if (session.status !== 200) throw new Error(`admin sign-in: ${session.status}`);
    token = session.json.accessToken as string;
    adminTokens.set(instance, token);
  }
  const res = await fetch(`${instance.url}/api/auth/webhook-deliveries?limit=100${status ? `&status=${status}` : ''}`, {
    headers: { authorization: `Bearer ${token}` },
  });
  if (res.status !== 200) throw new Error(`listing deliveries: ${res.status}`);
  return ((await res.json()) as { deliveries: Delivery[] }).deliveries;
}

async function waitUntil(condition: () => Promise<boolean>, what: string, timeoutMs = 30_000): Promise<void> {
  const start = Date.now();
  while (!(await condition())) {
    if (Date.now() - start > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

function baseEnv(database: Record<string, string>, webhookUrl: string, secret: string): Record<string, string> {
  return {
    ...database,
    JWT_SECRET,
    ADMIN_EMAIL,
    ADMIN_PASSWORD,
    REQUIRE_EMAIL_VERIFICATION: 'false',
    RATE_LIMIT_SIGN_UP: '1000',
    RATE_LIMIT_SIGN_IN: '1000',
    TRUST_PROXY: 'true',
    WEBHOOK_URL: webhookUrl,
    WEBHOOK_SECRET: secret,
    METRICS_TOKEN,
  };
}

/**
 * Signs up with the receiver down, waits until the delivery has failed at least once (so the kill
 * certainly comes before any delivery), kills the service with SIGKILL, brings the receiver up and
 * starts the service again on the same database: the events arrive, signed, under their ids.
 */
async function survivesKill(t: Test, database: Record<string, string>): Promise<void> {
  const secret = newWebhookSecret();
  const receiver = await startWebhookReceiver(secret, { down: true });
  t.teardown(() => receiver.close());
  const env = baseEnv(database, receiver.url, secret);
  const [first] = (await startInstances(['first'], env)) as [ServiceInstance];
  t.teardown(() => stopService(first.service, 2_000));
  const userId = await signUp(first, '198.18.0.1');
  let queued: Delivery[] = [];
  await waitUntil(async () => {
    queued = (await deliveries(first)).filter((d) => d.payload.data.userId === userId);
    return queued.length === 2 && queued.every((d) => d.attempts >= 1 && d.lastError === 'connection refused');
  }, 'a failed attempt for each event of the sign-up');
  t.same(queued.map((d) => d.eventType).sort(), ['session.created', 'user.created']);
  t.ok(
    queued.every((d) => d.status === 'pending'),
    'pending when the service is killed',
  );

  first.service.child.kill('SIGKILL');
  await first.service.exited;
  t.equal(receiver.receipts.length, 0, 'nothing was delivered before the kill');
  await receiver.start();

  const [second] = (await startInstances(['second'], env)) as [ServiceInstance];
  t.teardown(() => stopService(second.service, 2_000));
  await receiver.waitFor(
    (all) => queued.every((d) => all.some((r) => r.id === d.id)),
    'the events queued before the kill',
    30_000,
  );
  for (const d of queued) {
    const receipts = receiver.of(d.id);
    t.equal(receipts.length, 1, `${d.eventType}: arrives once, under the id it was queued with`);
    t.ok(receipts[0]?.verified, 'signed');
    t.match(receipts[0]?.payload, { type: d.eventType, data: { userId } });
  }
  await waitUntil(
    async () => (await deliveries(second, 'pending')).every((d) => d.payload.data.userId !== userId),
    'recorded as delivered',
  );
  t.equal(await stopService(second.service), 0, 'the restarted service stops cleanly');
}

t.test(
  'an event queued before a SIGKILL is delivered after the restart (PostgreSQL)',
  { skip: !usingPostgres },
  async (t) => {
    const database = await createTestDatabase();
    t.teardown(() => database.drop());
    await survivesKill(t, { DATABASE_URL: database.url });
  },
);

t.test(
  'an event queued before a SIGKILL is delivered after the restart (PGlite data directory)',
  { skip: usingPostgres },
  async (t) => {
    const dataDir = mkdtempSync(path.join(os.tmpdir(), 'webhooks-data-'));
    t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
    await survivesKill(t, { DATA_DIR: dataDir });
  },
);

/** The value of a counter sample in a Prometheus exposition (0 when absent). */
function sample(exposition: string, line: string): number {
  const found = exposition.split('\n').find((l) => l.startsWith(`${line} `));
  return found === undefined ? 0 : Number(found.slice(line.length + 1));
}

t.test(
  'two instances on one PostgreSQL database deliver each event exactly once',
  { skip: !usingPostgres },
  async (t) => {
    const database = await createTestDatabase();
    t.teardown(() => database.drop());
    const secret = newWebhookSecret();
    // Always 200, a little slowly: both instances have attempts under way at once.
    const receiver = await startWebhookReceiver(secret, { answer: () => ({ status: 200, delayMs: 5 }) });
    t.teardown(() => receiver.close());
    const instances = await startInstances(['A', 'B'], baseEnv({ DATABASE_URL: database.url }, receiver.url, secret));
    t.teardown(() => Promise.all(instances.map((i) => stopService(i.service, 2_000))));

    // Sign-ups through both instances, and a burst queued straight into the outbox (30 transactions
    // of 10 events, as 30 changes committing at once would), which wakes both.
    for (let i = 0; i < 10; i++) await signUp(instances[i % 2] as ServiceInstance, `198.18.1.${i + 1}`);
    const db = database.handle.db;
    await Promise.all(
      Array.from({ length: 30 }, (_, batch) =>
        db.transaction().execute((trx) =>
          enqueueWebhookEvents(
            trx,
            Array.from({ length: 10 }, (_, i) => {
              const createdAt = new Date();
              return {
                eventType: 'user.updated',
                createdAt,
                payload: { type: 'user.updated', timestamp: createdAt.toISOString(), data: { batch, i, userId: null } },
              };
            }),
          ),
        ),
      ),
    );
    const all = await db.selectFrom('webhook_outbox').select('id').execute();
    t.ok(all.length >= 320, `${all.length} events queued`);
    await receiver.waitFor((receipts) => all.every((e) => receipts.some((r) => r.id === e.id)), 'every event', 60_000);
    await waitUntil(
      async () =>
        (await db.selectFrom('webhook_outbox').select('id').where('status', '!=', 'delivered').execute()).length === 0,
      'every event recorded as delivered',
    );
    // Late duplicates would come within the lease; give them a moment.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const counts = new Map<string, number>();
    for (const r of receiver.receipts as Receipt[]) counts.set(r.id, (counts.get(r.id) ?? 0) + 1);
    const twice = [...counts].filter(([, n]) => n !== 1);
    t.same(twice, [], 'exactly one receipt per webhook-id');
    t.equal(counts.size, all.length, 'no receipt of an unknown id');
    t.ok(
      receiver.receipts.every((r) => r.verified),
      'every receipt signed',
    );
    const rows = await db.selectFrom('webhook_outbox').select(['attempts']).execute();
    t.ok(
      rows.every((r) => r.attempts === 1),
      'one attempt each',
    );

    const delivered = await Promise.all(
      instances.map(async (i) => {
        const res = await fetch(`${i.url}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
        return sample(await res.text(), 'webhook_delivery_attempts_total{result="delivered"}');
      }),
    );
    t.comment(`delivered by A: ${delivered[0]}, by B: ${delivered[1]}`);
    t.equal(
      delivered.reduce((a, b) => a + b, 0),
      all.length,
      'the two instances together made one attempt per event',
    );
    t.ok(
      delivered.every((n) => n > 0),
      'both instances delivered (so the claims really competed)',
    );
  },
);
