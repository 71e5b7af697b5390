/**
 * The typed client from a strict TypeScript project: sign up, verify the address with the emailed
 * code, list users as an administrator, create embeddings, then publish and receive a message over
 * the realtime socket (socket.io-client, typed with the SDK's event maps), and log out.
 *
 *   SERVICE_URL=http://127.0.0.1:7130 EMAIL=ann@example.com PASSWORD='correct horse battery staple' \
 *   ADMIN_EMAIL=admin@example.com ADMIN_PASSWORD=… node quickstart.js
 *
 * It asks for the 6-digit code on standard input and prints one JSON line per step; it exits 1 when
 * a step fails. test/sdk-package.test.ts compiles it in a fresh project with the installed package.
 */
import { createInterface } from 'node:readline/promises';
import {
  type BroadcastMessage,
  type components,
  createClient,
  type ErrorBody,
  type RealtimeClientEvents,
  type RealtimeServerEvents,
  type ServiceClient,
} from 'accounts-embeddings-realtime-client';
import { io, type Socket } from 'socket.io-client';

type User = components['schemas']['User'];

function setting(name: string): string {
  const value = process.env[name];
  if (value === undefined || value === '') throw new Error(`${name} is not set`);
  return value;
}

const baseUrl = setting('SERVICE_URL');
const email = setting('EMAIL');
const password = setting('PASSWORD');
const admin = { email: setting('ADMIN_EMAIL'), password: setting('ADMIN_PASSWORD') };

const report = (step: string, result: Record<string, unknown>) => console.log(JSON.stringify({ step, ...result }));

/** The data of a successful call; throws with the service's error code otherwise. */
function dataOf<T>(step: string, result: { data?: T; error?: ErrorBody; response: Response }): T {
  if (result.data === undefined) {
    throw new Error(`${step}: ${result.response.status} ${result.error?.error ?? ''} ${result.error?.message ?? ''}`);
  }
  return result.data;
}

async function askForCode(): Promise<string> {
  const prompt = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return (await prompt.question(`6-digit code sent to ${email}: `)).trim();
  } finally {
    prompt.close();
  }
}

async function realtimeRoundTrip(api: ServiceClient, adminApi: ServiceClient): Promise<Record<string, unknown>> {
  // Channels exist when an administrator has created a pattern that matches them (409: it exists already).
  const channel = await adminApi.POST('/api/realtime/channels', {
    body: { pattern: 'sdk-example:%', description: 'Channels of the SDK example' },
  });
  if (channel.response.status !== 201 && channel.response.status !== 409) {
    throw new Error(`createRealtimeChannel: ${channel.response.status} ${channel.error?.error ?? ''}`);
  }

  const token = api.tokens().accessToken;
  const socket: Socket<RealtimeServerEvents, RealtimeClientEvents> = io(baseUrl, {
    transports: ['websocket'],
    auth: { token },
    reconnection: false,
  });
  try {
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', () => resolve());
      socket.once('connect_error', reject);
    });
    const subscribed = await socket.timeout(15_000).emitWithAck('realtime:subscribe', { channel: 'sdk-example:1' });
    if (!subscribed.ok) throw new Error(`realtime:subscribe: ${subscribed.error.code} ${subscribed.error.message}`);

    const received = new Promise<BroadcastMessage & { text?: unknown }>((resolve) => {
      socket.once('greeting', (message: BroadcastMessage & { text?: unknown }) => resolve(message));
    });
    const published = await socket.timeout(15_000).emitWithAck('realtime:publish', {
      channel: 'sdk-example:1',
      event: 'greeting',
      payload: { text: 'hello from the SDK' },
    });
    if (!published.ok) throw new Error(`realtime:publish: ${published.error.code} ${published.error.message}`);
    const message = await received;
    return {
      subscribed: subscribed.channel,
      messageId: published.messageId,
      received: { channel: message.meta.channel, senderId: message.meta.senderId, text: message.text },
    };
  } finally {
    socket.close();
  }
}

async function main(): Promise<void> {
  const api = createClient({ baseUrl, clientType: 'mobile' });
  const query = { client_type: 'mobile' } as const;

  // 1. Sign up: 202, and a code is emailed.
  const signUp = dataOf('createUser', await api.POST('/api/auth/users', { body: { email, password, name: 'SDK' } }));
  report('signUp', { requireEmailVerification: 'requireEmailVerification' in signUp });

  // 2. Verify the address with the code: a session opens, and the client keeps its tokens.
  const otp = await askForCode();
  const session = dataOf(
    'verifyEmail',
    await api.POST('/api/auth/email/verify', { params: { query }, body: { email, otp } }),
  );
  report('verifyEmail', {
    userId: session.user.id,
    email: session.user.email,
    emailVerified: session.user.emailVerified,
    accessToken: api.tokens().accessToken !== undefined,
    refreshToken: api.tokens().refreshToken !== undefined,
  });

  // An operation for administrators answers a typed error to a user.
  const refused = await api.GET('/api/auth/users');
  const code: ErrorBody['error'] | undefined = refused.error?.error;
  report('listUsersAsUser', { status: refused.response.status, error: code });

  // 3. List users as an administrator (a desktop client: tokens in the body, like mobile).
  const adminApi = createClient({ baseUrl, clientType: 'desktop' });
  dataOf(
    'createSession',
    await adminApi.POST('/api/auth/sessions', { params: { query: { client_type: 'desktop' } }, body: admin }),
  );
  const list = dataOf(
    'listUsers',
    await adminApi.GET('/api/auth/users', { params: { query: { search: email, limit: '10' } } }),
  );
  const users: User[] = list.data;
  report('listUsers', {
    total: list.pagination.total,
    users: users.map((user) => ({ email: user.email, emailVerified: user.emailVerified })),
  });

  // 4. Embeddings with the user's session.
  const embeddings = dataOf(
    'createEmbeddings',
    await api.POST('/api/ai/embeddings', {
      body: { model: 'local/lexical-v1', input: ['hello world', 'goodbye'], dimensions: 8 },
    }),
  );
  const first = embeddings.data[0]?.embedding;
  report('embeddings', {
    model: embeddings.metadata.model,
    count: embeddings.data.length,
    dimensions: Array.isArray(first) ? first.length : null,
    usage: embeddings.metadata.usage,
  });

  // 5. Realtime: subscribe, publish, and receive the message back.
  report('realtime', await realtimeRoundTrip(api, adminApi));

  // 6. Log out: the session ends on the server and the client forgets its tokens.
  const out = await api.logout();
  report('logout', { status: out.response.status, accessToken: api.tokens().accessToken ?? null });
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error instanceof Error ? (error.stack ?? error.message) : String(error));
    process.exit(1);
  },
);
