import type autocannon from 'autocannon';
import { firstNames, lastNames } from '../../scripts/lib/seed.ts';
import { SIGN_IN, VERIFY_CODE } from './prepare.ts';

// The soak's traffic: one autocannon `requests` sequence that every connection loops over. Requests
// take the current tokens when sent, and two "slots" decide then what they are (see below), so that
// the stateful flows stay correct: every refresh token is presented exactly once (a rotated token
// presented again would revoke its session: 401), and each prepared sign-up is verified once.
// Every answer is classified as it arrives (autocannon calls onResponse, then emits "response"
// with the latency, synchronously): a status outside the kind's expected one is an error.

/** What one request was, for the statistics. */
export type Kind =
  | 'health'
  | 'permissions'
  | 'current-session'
  | 'users-first-page'
  | 'users-page'
  | 'users-search'
  | 'embeddings-upstream-float'
  | 'embeddings-upstream-base64'
  | 'embeddings-local'
  | 'sign-in'
  | 'refresh'
  | 'logout'
  | 'verify-success'
  | 'verify-wrong-code';

export const kindTitles: Record<Kind, string> = {
  health: 'GET /api/health',
  permissions: 'GET /api/realtime/permissions (user token)',
  'current-session': 'GET /api/auth/sessions/current (user token)',
  'users-first-page': 'GET /api/auth/users, first page (admin)',
  'users-page': 'GET /api/auth/users, pages 2-100 (admin)',
  'users-search': 'GET /api/auth/users, search "first.last" (admin)',
  'embeddings-upstream-float': 'POST /api/ai/embeddings, fake upstream (float, 512 dims)',
  'embeddings-upstream-base64': 'POST /api/ai/embeddings, fake upstream (base64, 1536 dims)',
  'embeddings-local': 'POST /api/ai/embeddings, local/lexical-v1 (about 100 tokens)',
  'sign-in': 'POST /api/auth/sessions, sign-in (mobile; scrypt)',
  refresh: 'POST /api/auth/refresh (mobile; rotates the token)',
  logout: 'POST /api/auth/logout (mobile; ends a chain)',
  'verify-success': 'POST /api/auth/email/verify, prepared sign-up (200)',
  'verify-wrong-code': 'POST /api/auth/email/verify, wrong code (400 INVALID_OTP)',
};

/** Where the last answer was classified (read by the "response" listener right after). */
export interface Outcome {
  kind: Kind;
  status: number;
  ok: boolean;
  /** The start of the body of an unexpected answer. */
  body?: string;
}

export interface TrafficOptions {
  connections: number;
  /** Prepared sign-ups (each verified once, paced over the run); the last `wrongCodeAccounts` are kept for wrong codes. */
  signUps: string[];
  wrongCodeAccounts: number;
  /** Access token of the administrator (for the directory); replaceable while the load runs. */
  adminToken: () => string;
}

/** A mobile session being kept alive: its current refresh token and the refreshes left before logout. */
interface Chain {
  refreshToken: string;
  left: number;
}

type Req = autocannon.Request;
type Context = Record<string, unknown>;

const REFRESHES_PER_CHAIN = 50;
/** Every Nth use of the session slot signs in (about one sign-in a second at the usual rates). */
const SIGN_IN_EVERY = 100;
/** Successful verifications per second of the run, at most (the prepared sign-ups are sized from it). */
export const VERIFICATIONS_PER_SECOND = 40;

const texts = [
  'The quick brown fox jumps over the lazy dog',
  'Soak tests run a steady mix of requests for a long time and watch what keeps growing',
  'Embeddings turn a text into a vector so that similar texts land near each other',
  'A refresh token is exchanged once; presenting it again revokes the whole session',
  'PostgreSQL answers the directory queries from its indexes, the service serialises the page',
];
const localText = (i: number) =>
  `${texts[i % texts.length]} ${texts[(i + 1) % texts.length]} ${texts[(i + 2) % texts.length]} ${texts[(i + 3) % texts.length]} ${texts[(i + 4) % texts.length]} item ${i}`;

/** The mix, the live state of its flows, and the classification of each answer. */
export function soakTraffic(o: TrafficOptions) {
  const chains: Chain[] = [];
  const maxChains = 2 * o.connections;
  const verifiable = o.signUps.slice(0, o.signUps.length - o.wrongCodeAccounts);
  const wrongCodeEmails = o.signUps.slice(o.signUps.length - o.wrongCodeAccounts);
  if (verifiable.length === 0 || wrongCodeEmails.length === 0) throw new Error('not enough prepared sign-ups');
  let userToken = '';
  let sessionSlotUses = 0;
  let verified = 0;
  let counter = 0;
  let startedAt = Date.now();
  let last: Outcome | undefined;
  const stats = { chainsStarted: 0, chainsEnded: 0, chainsAbandoned: 0, verifySlotWrongCodes: 0 };

  const json = { 'content-type': 'application/json' };
  const user = () => ({ authorization: `Bearer ${userToken}` });
  const admin = () => ({ authorization: `Bearer ${o.adminToken()}` });
  const classify = (kind: Kind, status: number, ok: boolean, text: string) => {
    last = ok ? { kind, status, ok } : { kind, status, ok, body: text.slice(0, 300) };
  };
  /** A session answer: keeps its refresh token as a chain (refreshed, then logged out). */
  const keepSession = (text: string, left: number, always: boolean): boolean => {
    let parsed: { accessToken?: unknown; refreshToken?: unknown };
    try {
      parsed = JSON.parse(text) as typeof parsed;
    } catch {
      return false;
    }
    if (typeof parsed.accessToken !== 'string' || typeof parsed.refreshToken !== 'string') return false;
    if (always || chains.length < maxChains) {
      chains.push({ refreshToken: parsed.refreshToken, left });
      if (!always) stats.chainsStarted++;
    } else {
      stats.chainsAbandoned++; // a session the user never comes back to (it expires in 30 days)
    }
    return true;
  };

  /** A fixed request: expects one status. */
  const fixed = (kind: Kind, request: Req, expect = 200): Req => ({
    ...request,
    onResponse: (status, text) => classify(kind, status, status === expect, text),
  });
  /** A request built at send time. */
  const dynamic = (kind: Kind, build: (request: Req) => Req, expect = 200): Req => ({
    setupRequest: (request) => build(request),
    onResponse: (status, text) => {
      classify(kind, status, status === expect, text);
    },
  });

  /**
   * The session slot: a mobile client's life. Every SIGN_IN_EVERY-th use (or when no chain is
   * free) signs in; otherwise it takes a chain, refreshes it (the new refresh token replaces the
   * old) or, after REFRESHES_PER_CHAIN refreshes, logs it out. A chain is out of the pool while its
   * request is in flight, so no token is ever presented twice.
   */
  const sessionSlot: Req = {
    setupRequest: (request, context) => {
      const ctx = context as Context;
      sessionSlotUses++;
      const chain = sessionSlotUses % SIGN_IN_EVERY === 0 ? undefined : chains.shift();
      ctx.chain = chain;
      if (chain === undefined) {
        return {
          ...request,
          method: 'POST',
          path: '/api/auth/sessions?client_type=mobile',
          headers: json,
          body: JSON.stringify(SIGN_IN),
        };
      }
      const path = chain.left > 0 ? '/api/auth/refresh?client_type=mobile' : '/api/auth/logout?client_type=mobile';
      return {
        ...request,
        method: 'POST',
        path,
        headers: json,
        body: JSON.stringify({ refreshToken: chain.refreshToken }),
      };
    },
    onResponse: (status, text, context) => {
      const chain = (context as Context).chain as Chain | undefined;
      (context as Context).chain = undefined;
      if (chain === undefined) {
        classify('sign-in', status, status === 200 && keepSession(text, REFRESHES_PER_CHAIN, false), text);
      } else if (chain.left > 0) {
        classify('refresh', status, status === 200 && keepSession(text, chain.left - 1, true), text);
      } else {
        stats.chainsEnded++;
        classify('logout', status, status === 204, text);
      }
    },
  };

  /**
   * The verification slot: a prepared sign-up entering its code (a session comes back, which
   * becomes a chain while there is room), paced to VERIFICATIONS_PER_SECOND over the run so the
   * prepared sign-ups last; when ahead of that pace, a user mistyping the code instead.
   */
  const verifySlot: Req = {
    setupRequest: (request, context) => {
      const ctx = context as Context;
      const due = ((Date.now() - startedAt) / 1000 + 1) * VERIFICATIONS_PER_SECOND;
      const success = verified < due && verified < verifiable.length;
      ctx.verifySuccess = success;
      if (!success) stats.verifySlotWrongCodes++;
      const payload = success
        ? { otp: VERIFY_CODE, email: verifiable[verified++] }
        : { otp: '000001', email: wrongCodeEmails[counter++ % wrongCodeEmails.length] };
      return {
        ...request,
        method: 'POST',
        path: '/api/auth/email/verify?client_type=mobile',
        headers: json,
        body: JSON.stringify(payload),
      };
    },
    onResponse: (status, text, context) => {
      const success = (context as Context).verifySuccess === true;
      if (success)
        classify('verify-success', status, status === 200 && keepSession(text, REFRESHES_PER_CHAIN, false), text);
      else classify('verify-wrong-code', status, status === 400 && text.includes('INVALID_OTP'), text);
    },
  };

  const wrongCode = dynamic(
    'verify-wrong-code',
    (request) => ({
      ...request,
      method: 'POST',
      path: '/api/auth/email/verify?client_type=mobile',
      headers: json,
      body: JSON.stringify({ otp: '000001', email: wrongCodeEmails[counter++ % wrongCodeEmails.length] }),
    }),
    400,
  );
  const permissions = dynamic('permissions', (request) => ({
    ...request,
    method: 'GET',
    path: '/api/realtime/permissions',
    headers: user(),
  }));
  const embeddings = (kind: Kind, payload: (i: number) => object) =>
    dynamic(kind, (request) => ({
      ...request,
      method: 'POST',
      path: '/api/ai/embeddings',
      headers: { ...json, ...user() },
      body: JSON.stringify(payload(counter++)),
    }));
  const directory = (kind: Kind, query: () => string) =>
    dynamic(kind, (request) => ({ ...request, method: 'GET', path: `/api/auth/users${query()}`, headers: admin() }));
  const pick = <T>(list: readonly T[]) => list[Math.floor(Math.random() * list.length)] as T;

  // One loop of a connection: 16 requests. Cheap reads dominate, as they do for a real client
  // (a health probe, permissions fetched on every page and realtime connect); the directory is an
  // admin's screens; embeddings are a feature's calls; the auth flows run at the rates above.
  const requests: Req[] = [
    fixed('health', { method: 'GET', path: '/api/health' }),
    permissions,
    directory('users-first-page', () => ''),
    dynamic('current-session', (request) => ({
      ...request,
      method: 'GET',
      path: '/api/auth/sessions/current',
      headers: user(),
    })),
    embeddings('embeddings-upstream-float', (i) => ({
      model: 'text-embedding-3-small',
      input: texts[i % texts.length],
      dimensions: 512,
    })),
    permissions,
    directory('users-search', () => `?search=${pick(firstNames)}.${pick(lastNames)}`),
    sessionSlot,
    fixed('health', { method: 'GET', path: '/api/health' }),
    permissions,
    embeddings('embeddings-local', (i) => ({ model: 'local/lexical-v1', input: localText(i) })),
    verifySlot,
    directory('users-page', () => `?offset=${10 * (1 + Math.floor(Math.random() * 99))}&limit=10`),
    permissions,
    wrongCode,
    embeddings('embeddings-upstream-base64', (i) => ({
      model: 'text-embedding-3-small',
      input: [texts[i % texts.length] as string, texts[(i + 1) % texts.length] as string],
      encoding_format: 'base64',
    })),
  ];

  return {
    requests,
    /**
     * The user session of the user-token requests, made before the load and never ended by it (a
     * logout revokes its session's access tokens at once, so chained sessions cannot serve).
     */
    seed: async (base: string) => {
      const res = await fetch(`${base}/api/auth/sessions?client_type=mobile`, {
        method: 'POST',
        headers: json,
        body: JSON.stringify(SIGN_IN),
      });
      const body = res.status === 200 ? ((await res.json()) as { accessToken?: unknown }) : {};
      if (typeof body.accessToken !== 'string') throw new Error(`sign-in as ${SIGN_IN.email} failed: ${res.status}`);
      userToken = body.accessToken;
    },
    start: () => {
      startedAt = Date.now();
    },
    /** The classification of the answer just received (cleared when read). */
    takeOutcome: (): Outcome | undefined => {
      const o = last;
      last = undefined;
      return o;
    },
    stats: () => ({ ...stats, verified, chainsLive: chains.length, sessionSlotUses }),
  };
}
