/**
 * The typed client of this service: openapi-fetch over the generated `paths`, plus the session
 * handling every caller needs. It keeps the access token, sends it as `Authorization: Bearer`, and
 * when an operation answers 401 it refreshes the session once and repeats the call:
 *   - web clients: the refresh token is the HttpOnly cookie (requests go out with credentials) and
 *     the CSRF token from the session result goes in `X-CSRF-Token`;
 *   - mobile and desktop clients: the refresh token from the session result goes in the body.
 * Every call returns `{ data }` typed by the spec's success response, or `{ error }` typed by its
 * Error schema, with the raw `response`.
 *
 *   import { createClient } from 'accounts-embeddings-realtime-client'; // the package built from sdk/
 *   const api = createClient({ baseUrl: 'https://accounts.example.com', clientType: 'mobile' });
 *   await api.POST('/api/auth/sessions', { params: { query: { client_type: 'mobile' } }, body: { email, password } });
 *   const { data, error } = await api.GET('/api/auth/users', { params: { query: { search: 'ann' } } });
 */
import createFetchClient from 'openapi-fetch';
import type { components, paths } from '../../generated/openapi.ts';

export type { BroadcastMessage, RealtimeClientEvents, RealtimeSchemas, RealtimeServerEvents } from './realtime.ts';
export type { components, paths };
export type ClientType = 'web' | 'mobile' | 'desktop';
export type ErrorBody = components['schemas']['Error'];
export type SessionResult = components['schemas']['SessionResult'];
/** The claims of an access token, for services that verify it with the JWKS (`/.well-known/jwks.json`). */
export type AccessTokenClaims = components['schemas']['AccessTokenClaims'];
/** The public key set that verifies access tokens. */
export type Jwks = components['schemas']['Jwks'];
/** A second factor (`GET /api/auth/factors`), and one just enrolled with its secret. */
export type Factor = components['schemas']['Factor'];
export type EnrolledFactor = components['schemas']['EnrolledFactor'];
/** A passkey (`GET /api/auth/passkeys`), and one just registered. */
export type Passkey = components['schemas']['Passkey'];
export type RegisteredPasskey = components['schemas']['RegisteredPasskey'];

export interface SessionTokens {
  accessToken: string | undefined;
  /** Mobile and desktop clients only; web clients hold theirs in the cookie. */
  refreshToken: string | undefined;
  /** Web clients only. */
  csrfToken: string | undefined;
  /**
   * Mobile and desktop clients: this device's known-device signal for the account (a session
   * result's `deviceToken`), sent as `X-Device-Token` with sign-ins, send-otp and reset requests so
   * that the device keeps its own email budget and sign-in back-off. Kept across logout (it
   * belongs to the device, not the session). Web clients hold theirs in the HttpOnly cookie.
   */
  deviceToken?: string | undefined;
}

export interface ClientOptions {
  baseUrl: string;
  /** How the session's refresh token travels (default mobile). */
  clientType?: ClientType;
  /** Tokens of an existing session, for example kept from an earlier run. */
  tokens?: Partial<SessionTokens>;
  /** The fetch to use (default globalThis.fetch); web clients need one that keeps cookies. */
  fetch?: (request: Request) => Promise<Response>;
  /** Called whenever the session's tokens change (sign-in, refresh, logout), to persist them. */
  onTokens?: (tokens: SessionTokens) => void;
}

// Operations whose answer is a Session result, and those that end a session.
/** The answers of a refresh that mean the refresh token (or its CSRF token) is not accepted. */
const REFUSED = new Set([400, 401, 403]);

const SESSION_RESULT =
  /\/api\/auth\/(sessions|email\/verify|refresh|users|oauth\/exchange|id-token|mfa\/verify|passkeys\/authentication\/verify)$/;
const SESSION_END = /\/api\/auth\/logout$/;
const PASSKEY_REGISTERED = /\/api\/auth\/passkeys\/registration\/verify$/;
const SIGN_UP = /\/api\/auth\/users$/;
// Operations where a known device has its own budget or back-off (the X-Device-Token header).
const DEVICE_SIGNAL = /^\/api\/auth\/(sessions|email\/send-otp|email\/send-reset-password)$/;
const VERIFY = /\/api\/auth\/email\/verify$/;
// A 401 from these is about credentials or refresh tokens, not the access token: never retry them.
const NO_RETRY =
  /^\/api\/auth\/(sessions|users|email\/send-verification|email\/verify|refresh|logout|oauth\/exchange|id-token|passkeys\/authentication\/verify)$/;

export function createClient(options: ClientOptions) {
  const clientType = options.clientType ?? 'mobile';
  const baseFetch = options.fetch ?? ((request: Request) => globalThis.fetch(request));
  const tokens: SessionTokens = {
    accessToken: options.tokens?.accessToken,
    refreshToken: options.tokens?.refreshToken,
    csrfToken: options.tokens?.csrfToken,
    deviceToken: options.tokens?.deviceToken,
  };
  const changed = () => options.onTokens?.({ ...tokens });
  let refreshing: Promise<boolean> | undefined;
  // The binding of this client's last sign-up, sent with the verification so that the password it
  // chose counts as proven (web clients also hold it in a cookie, which third-party cookie blocking
  // may drop).
  let signUpBinding: string | undefined;

  /** A verification request with this client's sign-up binding added to its body (unless it has one). */
  async function withSignUpBinding(request: Request): Promise<Request> {
    const path = new URL(request.url).pathname;
    if (signUpBinding === undefined || request.method !== 'POST' || !VERIFY.test(path)) return request;
    const body = (await request
      .clone()
      .json()
      .catch(() => undefined)) as Record<string, unknown> | undefined;
    if (body === undefined || typeof body !== 'object' || body === null || 'signUpBinding' in body) return request;
    return new Request(request, { body: JSON.stringify({ ...body, signUpBinding }) });
  }

  const authorised = (request: Request): Request => {
    const headers = new Headers(request.headers);
    if (tokens.accessToken && !headers.has('authorization'))
      headers.set('authorization', `Bearer ${tokens.accessToken}`);
    if (clientType === 'web' && tokens.csrfToken && !headers.has('x-csrf-token'))
      headers.set('x-csrf-token', tokens.csrfToken);
    const path = new URL(request.url).pathname;
    if (clientType !== 'web' && tokens.deviceToken && DEVICE_SIGNAL.test(path) && !headers.has('x-device-token'))
      headers.set('x-device-token', tokens.deviceToken);
    return new Request(request, { headers });
  };

  /** Keeps the tokens a Session result carries; forgets them when the session ends. */
  async function remember(request: Request, response: Response): Promise<void> {
    const path = new URL(request.url).pathname;
    if (SESSION_END.test(path) && response.status === 204) {
      Object.assign(tokens, { accessToken: undefined, refreshToken: undefined, csrfToken: undefined });
      changed();
      return;
    }
    if (SIGN_UP.test(path) && request.method === 'POST' && response.status === 202) {
      const accepted = (await response
        .clone()
        .json()
        .catch(() => undefined)) as { signUpBinding?: string } | undefined;
      signUpBinding = accepted?.signUpBinding;
      return;
    }
    if (VERIFY.test(path) && response.ok) signUpBinding = undefined;
    const registered = PASSKEY_REGISTERED.test(path);
    if (!(SESSION_RESULT.test(path) || registered) || !response.ok || request.method !== 'POST') return;
    const answer = (await response
      .clone()
      .json()
      .catch(() => undefined)) as (Partial<SessionResult> & { session?: Partial<SessionResult> }) | undefined;
    // A passkey that is the account's first second factor answers the session it raised.
    const body = registered ? answer?.session : answer;
    if (typeof body?.accessToken !== 'string') return;
    tokens.accessToken = body.accessToken;
    tokens.refreshToken = body.refreshToken ?? undefined;
    tokens.csrfToken = body.csrfToken ?? undefined;
    // A refresh carries none: the device keeps the one its session opened with.
    if (typeof body.deviceToken === 'string') tokens.deviceToken = body.deviceToken;
    changed();
  }

  /**
   * Exchanges the refresh token (or cookie) for a new session: true, or false when that fails. Only a
   * refusal of the refresh token itself (400, 401, 403) ends the session in the client; a rate limit
   * (429), an outage (5xx) or a network failure keeps the tokens, so that a later try can succeed.
   */
  async function refresh(): Promise<boolean> {
    if (clientType !== 'web' && !tokens.refreshToken) return false;
    const url = new URL(`/api/auth/refresh?client_type=${clientType}`, options.baseUrl);
    const request = new Request(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(clientType === 'web' && tokens.csrfToken ? { 'x-csrf-token': tokens.csrfToken } : {}),
      },
      body: JSON.stringify(clientType === 'web' ? {} : { refreshToken: tokens.refreshToken }),
      credentials: 'include',
    });
    const response = await baseFetch(request).catch(() => undefined);
    if (response === undefined) return false;
    if (!response.ok) {
      if (REFUSED.has(response.status)) {
        Object.assign(tokens, { accessToken: undefined, refreshToken: undefined, csrfToken: undefined });
        changed();
      }
      return false;
    }
    await remember(request, response);
    return true;
  }

  async function send(original: Request): Promise<Response> {
    const request = await withSignUpBinding(original);
    const again = request.clone();
    const response = await baseFetch(authorised(request));
    await remember(request, response);
    const noRetry = request.method === 'POST' && NO_RETRY.test(new URL(request.url).pathname);
    if (response.status !== 401 || noRetry) return response;
    refreshing ??= refresh().finally(() => {
      refreshing = undefined;
    });
    if (!(await refreshing)) return response;
    const retried = new Request(again, { headers: withoutAuthorization(again.headers) });
    const second = await baseFetch(authorised(retried));
    await remember(retried, second);
    return second;
  }

  const api = createFetchClient<paths>({
    baseUrl: options.baseUrl.replace(/\/+$/, ''),
    fetch: send,
    // Web clients' refresh cookie must travel with their requests.
    credentials: clientType === 'web' ? 'include' : 'same-origin',
  });
  return Object.assign(api, {
    clientType,
    /** The current session's tokens (a copy). */
    tokens: (): SessionTokens => ({ ...tokens }),
    /** Refreshes the session now: true, or false (the tokens are cleared only when the refresh token is refused). */
    refresh: () => (refreshing ??= refresh().finally(() => (refreshing = undefined))),
    /** Ends the session on the server (its refresh tokens die) and forgets the tokens. */
    logout: () =>
      api.POST('/api/auth/logout', {
        params: { query: { client_type: clientType } },
        body: clientType === 'web' ? {} : { refreshToken: tokens.refreshToken ?? '' },
      }),
  });
}

function withoutAuthorization(headers: Headers): Headers {
  const copy = new Headers(headers);
  copy.delete('authorization');
  copy.delete('x-csrf-token');
  return copy;
}

export type ServiceClient = ReturnType<typeof createClient>;
