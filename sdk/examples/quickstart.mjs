/**
 * The client from plain JavaScript (ES modules, no build step): sign up, verify the address with the
 * emailed code, list users as an administrator, create embeddings, and log out.
 *
 *   SERVICE_URL=http://127.0.0.1:7130 EMAIL=ann@example.com PASSWORD='correct horse battery staple' \
 *   ADMIN_EMAIL=admin@example.com ADMIN_PASSWORD=… node quickstart.mjs
 *
 * It asks for the 6-digit code on standard input and prints one JSON line per step; it exits 1 when
 * a step fails. test/sdk-package.test.ts runs it in a fresh project with the installed package.
 */
import { createInterface } from 'node:readline/promises';
import { createClient } from 'accounts-embeddings-realtime-client';

function setting(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

const baseUrl = setting('SERVICE_URL');
const email = setting('EMAIL');
const password = setting('PASSWORD');
const admin = { email: setting('ADMIN_EMAIL'), password: setting('ADMIN_PASSWORD') };

const report = (step, result) => console.log(JSON.stringify({ step, ...result }));

/** The data of a successful call; throws with the service's error code otherwise. */
function dataOf(step, { data, error, response }) {
  if (data === undefined) throw new Error(`${step}: ${response.status} ${error?.error ?? ''} ${error?.message ?? ''}`);
  return data;
}

async function askForCode() {
  const prompt = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return (await prompt.question(`6-digit code sent to ${email}: `)).trim();
  } finally {
    prompt.close();
  }
}

async function main() {
  const api = createClient({ baseUrl, clientType: 'mobile' });
  const query = { client_type: 'mobile' };

  // 1. Sign up: 202, and a code is emailed.
  const signUp = dataOf('createUser', await api.POST('/api/auth/users', { body: { email, password } }));
  report('signUp', { requireEmailVerification: signUp.requireEmailVerification === true });

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

  // An operation for administrators answers an error body to a user.
  const refused = await api.GET('/api/auth/users');
  report('listUsersAsUser', { status: refused.response.status, error: refused.error?.error });

  // 3. List users as an administrator (a desktop client: tokens in the body, like mobile).
  const adminApi = createClient({ baseUrl, clientType: 'desktop' });
  dataOf(
    'createSession',
    await adminApi.POST('/api/auth/sessions', { params: { query: { client_type: 'desktop' } }, body: admin }),
  );
  const list = dataOf('listUsers', await adminApi.GET('/api/auth/users', { params: { query: { search: email } } }));
  report('listUsers', {
    total: list.pagination.total,
    users: list.data.map((user) => ({ email: user.email, emailVerified: user.emailVerified })),
  });

  // 4. Embeddings with the user's session.
  const embeddings = dataOf(
    'createEmbeddings',
    await api.POST('/api/ai/embeddings', {
      body: { model: 'local/lexical-v1', input: ['hello world', 'goodbye'], dimensions: 8 },
    }),
  );
  report('embeddings', {
    model: embeddings.metadata.model,
    count: embeddings.data.length,
    dimensions: embeddings.data[0]?.embedding.length,
    usage: embeddings.metadata.usage,
  });

  // 5. Log out: the session ends on the server and the client forgets its tokens.
  const out = await api.logout();
  report('logout', { status: out.response.status, accessToken: api.tokens().accessToken ?? null });
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(error instanceof Error ? (error.stack ?? error.message) : String(error));
    process.exit(1);
  },
);
