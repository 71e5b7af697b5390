// What a slow or abusive client can hold: header, request and keep-alive timeouts over real
// sockets (a slowloris client is cut off while others are served), per-operation body limits,
// and the rate limits under a concurrent burst from one address (in memory and in Redis).
import net from 'node:net';
import t, { type Test } from 'tap';
import { operations } from '../generated/contract.ts';
import type { Env } from '../src/config.ts';
import { buildTestApp } from './helpers/app.ts';
import { newEmail, newRedisKeyPrefix, pause } from './helpers/auth.ts';
import { assertErrorBody } from './helpers/error-body.ts';
import { redisAvailable } from './helpers/redis.ts';
import { accessTokenFor } from './helpers/tokens.ts';

const HEADERS_TIMEOUT_MS = 600;
const REQUEST_TIMEOUT_MS = 1_200;
const KEEP_ALIVE_TIMEOUT_MS = 400;
const REDIS_URL = 'redis://127.0.0.1:6379';

/** Short slow-client limits, so that the tests of them take a second or two. */
const SHORT_TIMEOUTS: Env = {
  HTTP_HEADERS_TIMEOUT_MS: String(HEADERS_TIMEOUT_MS),
  HTTP_REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS),
  HTTP_KEEP_ALIVE_TIMEOUT_MS: String(KEEP_ALIVE_TIMEOUT_MS),
};

/** An app listening on loopback; resolves to it and its port. */
async function listening(t: Test, env: Env = {}) {
  const { app } = await buildTestApp(t, { env });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const port = (app.server.address() as net.AddressInfo).port;
  return { app, port };
}

interface RawExchange {
  /** Everything the server sent. */
  received: string;
  /** Milliseconds from connecting until the server closed the connection. */
  closedAfterMs: number;
}

/**
 * Connects, writes `first`, then keeps writing `drip` every `everyMs` (a slowloris client) until
 * the server closes the connection or `giveUpMs` passes.
 */
function slowClient(port: number, first: string, drip: string | undefined, everyMs: number, giveUpMs: number) {
  return new Promise<RawExchange>((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    const started = performance.now();
    let received = '';
    let timer: NodeJS.Timeout | undefined;
    const giveUp = setTimeout(() => {
      clearInterval(timer);
      socket.destroy();
      reject(new Error(`the server kept the connection open for ${giveUpMs} ms`));
    }, giveUpMs);
    socket.on('connect', () => {
      socket.write(first);
      if (drip !== undefined) {
        timer = setInterval(() => {
          if (socket.writable) socket.write(drip);
        }, everyMs);
      }
    });
    socket.on('data', (d) => {
      received += String(d);
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      clearInterval(timer);
      clearTimeout(giveUp);
      resolve({ received, closedAfterMs: performance.now() - started });
    });
  });
}

/** The status and JSON body of a raw HTTP/1.1 answer. */
function parseRaw(raw: string): { status: number; headers: string; body: unknown } {
  const [head = '', body = ''] = raw.split('\r\n\r\n');
  return { status: Number(head.split(' ')[1]), headers: head, body: JSON.parse(body) };
}

function assertRawError(t: Test, raw: string, status: number, code: string) {
  const answer = parseRaw(raw);
  t.equal(answer.status, status, `status ${status}`);
  t.match(answer.headers, /content-type: application\/json/i, 'JSON content type');
  t.same(answer.body, {
    error: code,
    message: String((answer.body as { message: string }).message),
    statusCode: status,
  });
}

t.test('slow clients are cut off', async (t) => {
  const { port } = await listening(t, SHORT_TIMEOUTS);
  const base = `http://127.0.0.1:${port}`;

  t.test('headers that trickle in (slowloris): 408 REQUEST_TIMEOUT, connection closed', async (t) => {
    const started = performance.now();
    // 50 such clients at once, while an ordinary client is still served.
    const slow = Array.from({ length: 50 }, () =>
      slowClient(port, 'GET /api/health HTTP/1.1\r\nHost: x\r\n', 'X-a: b\r\n', 100, 10_000),
    );
    await pause(200);
    const ordinary = await fetch(`${base}/api/health`);
    t.equal(ordinary.status, 200, 'an ordinary client is answered meanwhile');
    const exchanges = await Promise.all(slow);
    for (const e of exchanges.slice(0, 3)) assertRawError(t, e.received, 408, 'REQUEST_TIMEOUT');
    t.ok(
      exchanges.every((e) => parseRaw(e.received).status === 408),
      'every slow client got 408',
    );
    const latest = Math.max(...exchanges.map((e) => e.closedAfterMs));
    t.comment(
      `slowloris connections closed after at most ${Math.round(latest)} ms (headers timeout ${HEADERS_TIMEOUT_MS} ms)`,
    );
    t.ok(performance.now() - started < 10_000, 'all were closed well before the client would have stopped');
  });

  t.test('a body that trickles in: 408 once the request timeout passes', async (t) => {
    const head =
      'POST /api/auth/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10000\r\n\r\n{';
    const e = await slowClient(port, head, ' ', 100, 10_000);
    assertRawError(t, e.received, 408, 'REQUEST_TIMEOUT');
    t.comment(`closed after ${Math.round(e.closedAfterMs)} ms (request timeout ${REQUEST_TIMEOUT_MS} ms)`);
  });

  t.test('a connection that opens and sends nothing is closed too', async (t) => {
    const e = await slowClient(port, '', undefined, 0, 10_000);
    t.ok(e.closedAfterMs < 10_000, `closed after ${Math.round(e.closedAfterMs)} ms`);
  });

  t.test('an idle keep-alive connection is closed after the keep-alive timeout', async (t) => {
    const e = await slowClient(port, 'GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n', undefined, 0, 10_000);
    t.match(e.received, /^HTTP\/1\.1 200/, 'the request was answered');
    t.comment(
      `idle connection closed after ${Math.round(e.closedAfterMs)} ms (keep-alive ${KEEP_ALIVE_TIMEOUT_MS} ms)`,
    );
    t.ok(e.closedAfterMs >= KEEP_ALIVE_TIMEOUT_MS - 50, 'not before the keep-alive timeout');
  });

  t.test('headers over 16 KiB: 431 HEADERS_TOO_LARGE', async (t) => {
    const e = await slowClient(
      port,
      `GET /api/health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(17_000)}\r\n\r\n`,
      undefined,
      0,
      10_000,
    );
    assertRawError(t, e.received, 431, 'HEADERS_TOO_LARGE');
  });

  t.test('more than 1,000 header lines (each small): 431 HEADERS_TOO_LARGE; 1,000 pass', async (t) => {
    const request = (lines: number) =>
      `GET /api/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n${Array.from({ length: lines - 2 }, (_, i) => `x-h${i}: v\r\n`).join('')}\r\n`;
    const over = await slowClient(port, request(1001), undefined, 0, 10_000);
    assertRawError(t, over.received, 431, 'HEADERS_TOO_LARGE');
    const within = await slowClient(port, request(1000), undefined, 0, 10_000);
    t.match(within.received, /^HTTP\/1\.1 200 /, '1,000 lines are accepted');
  });

  t.test('a request that is not HTTP: 400 INVALID_INPUT', async (t) => {
    const e = await slowClient(port, 'HELLO THERE\r\n\r\n', undefined, 0, 10_000);
    assertRawError(t, e.received, 400, 'INVALID_INPUT');
  });
});

t.test('every operation that takes a body has its own limit (x-body-limit): 413 above it', async (t) => {
  const { app, port } = await listening(t);
  const token = accessTokenFor(app);
  const withBody = Object.entries(operations).filter(([, op]) => op.bodyLimit !== null);
  t.ok(withBody.length >= 7, `${withBody.length} operations take a body`);
  for (const [id, op] of withBody) {
    const limit = op.bodyLimit as number;
    t.test(`${id}: ${limit} bytes`, async (t) => {
      // A JSON string that makes the body exactly `size` bytes.
      const bodyOf = (size: number) => `{"x":"${'a'.repeat(size - 8)}"}`;
      const send = (payload: string) =>
        app.inject({
          method: op.method as 'POST',
          url: op.path,
          headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
          payload,
        });
      t.equal(Buffer.byteLength(bodyOf(limit + 1)), limit + 1);
      assertErrorBody(t, await send(bodyOf(limit + 1)), 413, 'PAYLOAD_TOO_LARGE');
      const atLimit = await send(bodyOf(limit));
      t.not(atLimit.statusCode, 413, `a body of exactly ${limit} bytes is read (${atLimit.statusCode})`);
    });
  }

  t.test('a Content-Length over the limit is refused before the body is sent', async (t) => {
    const head = `POST /api/auth/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${
      (operations.createSession.bodyLimit as number) + 1
    }\r\n\r\n`;
    // Sends the headers only: the answer must come without waiting for the body.
    const socket = net.connect(port, '127.0.0.1');
    const answer = await new Promise<string>((resolve) => {
      let received = '';
      socket.on('connect', () => socket.write(head));
      socket.on('data', (d) => {
        received += String(d);
        if (received.includes('\r\n\r\n') && received.includes('}')) resolve(received);
      });
    });
    socket.destroy();
    assertRawError(t, answer, 413, 'PAYLOAD_TOO_LARGE');
  });
});

/**
 * Sends `n` sign-in attempts at once from one client IP over real HTTP, each for an account of its
 * own (so that only the per-IP limit applies, not the per-account back-off); returns the answers.
 */
async function burst(port: number, n: number): Promise<Response[]> {
  return Promise.all(
    Array.from({ length: n }, () =>
      fetch(`http://127.0.0.1:${port}/api/auth/sessions?client_type=mobile`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ email: newEmail('burst'), password: 'not the password' }),
      }),
    ),
  );
}

// Without Redis the Redis half is skipped, except in CI, where it must run.
const redisMissing = !(await redisAvailable()) && process.env.CI !== 'true';
for (const store of ['memory', 'redis'] as const) {
  const skip = store === 'redis' && redisMissing ? 'Redis does not answer on 127.0.0.1:6379' : false;
  t.test(`rate limits hold under a burst from one address (${store} store)`, { skip }, async (t) => {
    const limit = 10;
    const { port } = await listening(t, {
      RATE_LIMIT_SIGN_IN: String(limit),
      // Room in the password-hashing queue for every attempt the limit lets through (the queue's own
      // refusals are test/password-hashing.test.ts's).
      PASSWORD_HASH_QUEUE: '32',
      PASSWORD_HASH_QUEUE_PER_NETWORK: '32',
      ...(store === 'redis' ? { REDIS_URL, REDIS_KEY_PREFIX: newRedisKeyPrefix('burst') } : {}),
    });
    const answers = await burst(port, 200);
    const bodies = await Promise.all(answers.map((r) => r.text()));
    const statuses = answers.map((r) => r.status);
    const limited = answers.filter((r) => r.status === 429);
    t.equal(statuses.length - limited.length, limit, `exactly ${limit} of 200 concurrent attempts were processed`);
    t.ok(
      statuses.every((s) => s === 429 || s === 401),
      'the others were 429, the processed ones 401 INVALID_CREDENTIALS',
    );
    t.ok(
      limited.every((r) => Number(r.headers.get('retry-after')) >= 1),
      'every 429 carries Retry-After',
    );
    const body = JSON.parse(bodies[statuses.indexOf(429)] ?? '{}');
    t.match(body, { error: 'RATE_LIMITED', statusCode: 429 });
  });
}

t.test('with Redis unreachable the limits are still counted, in this process', async (t) => {
  const closed = net.createServer();
  await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
  const deadPort = (closed.address() as net.AddressInfo).port;
  await new Promise((resolve) => closed.close(resolve));
  const limit = 5;
  const { port } = await listening(t, {
    RATE_LIMIT_SIGN_IN: String(limit),
    REDIS_URL: `redis://127.0.0.1:${deadPort}`,
    REDIS_KEY_PREFIX: newRedisKeyPrefix('no-redis'),
  });
  const answers = await burst(port, 50);
  await Promise.all(answers.map((r) => r.text()));
  const processed = answers.filter((r) => r.status !== 429).length;
  t.equal(processed, limit, `exactly ${limit} of 50 attempts were processed, not all of them`);
});
