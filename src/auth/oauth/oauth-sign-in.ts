import { createHash } from 'node:crypto';
import type { EventClient } from '../../audit/audit-trail.ts';
import * as oauth from '../../db/repositories/oauth.ts';
import * as users from '../../db/repositories/users.ts';
import { ApiError, type ErrorCode } from '../../errors.ts';
import { type AuthDeps, type ClientInfo, inSeconds } from '../auth-context.ts';
import type { BackgroundMail } from '../background-mail.ts';
import { constantTimeEqual, newOpaqueToken, sha256Hex } from '../crypto.ts';
import type { SessionIssuer } from '../session-issuer.ts';
import { createUnprovenPasswords } from '../unproven-password.ts';
import { createIdentities, type IdentityCaller } from './identities.ts';
import { accountForIdentity } from './identity-accounts.ts';
import { createProviderClients, type ProviderClient, ProviderRefused } from './provider-clients.ts';

/** How long the provider's sign-in page may take before the state is void. */
const AUTHORIZATION_TTL_SECONDS = 10 * 60;
/** How long the app has to exchange its one-time code. */
const CODE_TTL_SECONDS = 60;

const codeInvalid = () =>
  new ApiError('OAUTH_CODE_INVALID', 'The sign-in code is invalid or has expired; sign in again');
const stateInvalid = () => new ApiError('OAUTH_STATE_INVALID', 'This sign-in is unknown or has expired; start again');

/** Errors of a sign-in or a link that go back to the app as `?error=<code>` rather than as a page of JSON. */
const REDIRECTED_ERRORS: readonly ErrorCode[] = [
  'OAUTH_EMAIL_UNVERIFIED',
  'OAUTH_ACCOUNT_UNVERIFIED',
  'OAUTH_LINK_REQUIRED',
  'SIGN_UP_DISABLED',
  'ACCOUNT_DISABLED',
  'USER_ALREADY_EXISTS',
  'SERVICE_UNAVAILABLE',
  // A link started from a session:
  'IDENTITY_ALREADY_LINKED',
  'SESSION_REVOKED',
  'MFA_REQUIRED',
];

/** The S256 PKCE challenge of a verifier (RFC 7636). */
function s256(verifier: string): string {
  return createHash('sha256').update(verifier).digest('base64url');
}

/** Sign-in with OAuth 2 / OpenID Connect providers: the redirect flow, the code exchange, and ID tokens. */
export function createOAuthSignIn(deps: AuthDeps, sessions: SessionIssuer, mail: BackgroundMail) {
  const { db, config, clock, log } = deps;
  const unproven = createUnprovenPasswords(sessions, mail, deps.audit);
  const clients = createProviderClients(config.oauthProviders, clock);
  const identities = createIdentities(deps);

  function provider(name: string, route: 'built-in' | 'custom' | 'any'): ProviderClient {
    const client = clients.get(name);
    const fits = route === 'any' || (route === 'built-in') === client?.config.builtIn;
    if (client === undefined || !fits) {
      throw new ApiError('NOT_FOUND', `No OAuth provider named ${JSON.stringify(name)} is configured`);
    }
    return client;
  }

  const callbackUrl = (name: string) => `${config.publicUrl}/api/auth/oauth/${encodeURIComponent(name)}/callback`;

  /**
   * The provider's authorization URL for a round trip that ends at the app's (allowed)
   * `redirectUri`: a sign-in (the app's PKCE challenge) or a link (the account and session).
   */
  async function authorize(
    client: ProviderClient,
    redirectUri: string,
    purpose: { codeChallenge: string } | { link: { userId: string; sessionId: string } },
  ): Promise<string> {
    const name = client.config.name;
    const checks = { state: newOpaqueToken(), nonce: newOpaqueToken(), verifier: newOpaqueToken() };
    const authUrl = await client.authorizationUrl(callbackUrl(name), checks);
    const now = clock.now();
    await oauth.insertAuthorization(db, {
      state_hash: sha256Hex(checks.state),
      provider: name,
      redirect_uri: redirectUri,
      nonce: checks.nonce,
      provider_verifier: checks.verifier,
      expires_at: inSeconds(now, AUTHORIZATION_TTL_SECONDS),
      created_at: now,
      ...('link' in purpose
        ? { code_challenge: null, link_user_id: purpose.link.userId, link_session_id: purpose.link.sessionId }
        : { code_challenge: purpose.codeChallenge }),
    });
    return authUrl;
  }

  /** The provider's authorization URL for a sign-in that ends at the app's (allowed) `redirectUri`. */
  async function start(
    name: string,
    route: 'built-in' | 'custom',
    redirectUri: string,
    codeChallenge: string,
  ): Promise<string> {
    return authorize(provider(name, route), redirectUri, { codeChallenge });
  }

  /**
   * The provider's authorization URL for linking one of its identities to the caller's account
   * from the caller's session; the callback links it and ends at the app's (allowed) `redirectUri`.
   */
  async function startLink(caller: IdentityCaller, name: string, redirectUri: string): Promise<string> {
    const client = clients.get(name);
    if (client === undefined) {
      throw new ApiError('INVALID_INPUT', 'body.provider names no OAuth provider of this service');
    }
    identities.requireRecentProof(caller);
    if (await oauth.hasIdentityOf(db, caller.userId, name)) {
      throw new ApiError('IDENTITY_ALREADY_LINKED', `This account already has a ${name} identity; unlink it first`);
    }
    return authorize(client, redirectUri, { link: { userId: caller.userId, sessionId: caller.sessionId } });
  }

  /**
   * The provider's return: where to send the browser (the app's redirect URI with a one-time code,
   * the linked provider's name, or an error). `query` is the raw query string the provider sent;
   * `from` is where the browser's request came from (for the audit log).
   */
  async function callback(
    name: string,
    params: { state?: string | undefined; error?: string | undefined },
    query: string,
    from?: EventClient,
  ): Promise<string> {
    const client = provider(name, 'any');
    if (params.state === undefined || params.state === '') throw stateInvalid();
    const started = await oauth.takeAuthorization(db, sha256Hex(params.state), clock.now());
    if (started === undefined || started.provider !== name) throw stateInvalid();
    const back = (key: 'insforge_code' | 'linked' | 'error', value: string) => {
      const url = new URL(started.redirect_uri);
      // Only the service says how the sign-in or link ended: values planted in the redirect URI go.
      url.searchParams.delete('insforge_code');
      url.searchParams.delete('linked');
      url.searchParams.delete('error');
      url.searchParams.set(key, value);
      return url.href;
    };
    if (params.error !== undefined) {
      return back('error', params.error === 'access_denied' ? 'ACCESS_DENIED' : 'OAUTH_PROVIDER_ERROR');
    }
    try {
      const currentUrl = new URL(`${callbackUrl(name)}?${query}`);
      const identity = await client.finish(currentUrl, {
        state: params.state,
        nonce: started.nonce,
        verifier: started.provider_verifier,
      });
      if (started.link_user_id !== null && started.link_session_id !== null) {
        const link = { userId: started.link_user_id, sessionId: started.link_session_id };
        await identities.linkFromSession(link, name, identity, from);
        return back('linked', name);
      }
      // A sign-in's row has a challenge (the table's check constraint).
      if (started.code_challenge === null) throw stateInvalid();
      const user = await accountForIdentity(deps, name, identity, unproven, from);
      const code = newOpaqueToken();
      const now = clock.now();
      await oauth.insertCode(db, {
        codeHash: sha256Hex(code),
        userId: user.id,
        codeChallenge: started.code_challenge,
        now,
        expiresAt: inSeconds(now, CODE_TTL_SECONDS),
      });
      return back('insforge_code', code);
    } catch (err) {
      // The provider's keys could not be fetched: as for any other failure of the provider.
      if (err instanceof ApiError && err.code === 'PROVIDER_UNAVAILABLE') return back('error', 'OAUTH_PROVIDER_ERROR');
      if (err instanceof ProviderRefused) {
        log.warn(
          { provider: name, reason: err.message },
          'oauth: the provider refused or its answer failed the checks',
        );
        return back('error', 'OAUTH_PROVIDER_ERROR');
      }
      if (err instanceof ApiError && REDIRECTED_ERRORS.includes(err.code)) return back('error', err.code);
      // Any other refusal of what the provider sent (a value the database cannot store, say): the
      // browser still goes back to the app, with the provider to blame.
      if (err instanceof ApiError && err.statusCode < 500) {
        log.warn({ provider: name, code: err.code }, 'oauth: the identity the provider sent was refused');
        return back('error', 'OAUTH_PROVIDER_ERROR');
      }
      throw err;
    }
  }

  /** The session for a one-time code and the verifier of the challenge it was issued for. */
  async function exchange(code: string, verifier: string, client: ClientInfo) {
    // Taken (deleted) first: a code is spent by any attempt, right or wrong.
    const issued = await oauth.takeCode(db, sha256Hex(code));
    if (issued === undefined || issued.expires_at <= clock.now()) throw codeInvalid();
    if (!constantTimeEqual(s256(verifier), issued.code_challenge)) throw codeInvalid();
    const user = await users.findUserById(db, issued.user_id);
    if (user === undefined || user.disabled_at !== null) throw codeInvalid();
    return sessions.start(user, client, 'oauth');
  }

  /** The session for an ID token a configured OpenID Connect provider issued to this service's client id. */
  async function signInWithIdToken(
    body: { provider: string; token: string; nonce?: string | undefined },
    client: ClientInfo,
  ) {
    const known = clients.get(body.provider);
    if (known === undefined) {
      throw new ApiError('INVALID_INPUT', 'body.provider names no OpenID Connect provider of this service');
    }
    const { identity, usableUntil } = await known.verifyIdToken(body.token, body.nonce);
    // One session per token, on every instance: the token is recorded (by its signed part, which
    // the signature fixes, unlike the signature's own encoding) before the session is opened, and
    // the record is dropped again if no session comes of it, so a refusal or a failure does not
    // use the token up. Two presentations at once: one records, the other is refused.
    const tokenHash = sha256Hex(body.token.slice(0, body.token.lastIndexOf('.')));
    const first = await oauth.recordIdTokenUse(db, {
      tokenHash,
      provider: body.provider,
      expiresAt: usableUntil,
      now: clock.now(),
    });
    if (!first) {
      throw new ApiError('ID_TOKEN_INVALID', 'This ID token has already been used to sign in; get a new one');
    }
    try {
      const user = await accountForIdentity(deps, body.provider, identity, unproven, client);
      return await sessions.start(user, client, 'id_token');
    } catch (err) {
      await oauth.forgetIdTokenUse(db, tokenHash).catch((forgetErr: unknown) => {
        log.warn({ err: forgetErr }, 'oauth: an ID token that opened no session stays recorded as used');
      });
      throw err;
    }
  }

  return {
    start,
    startLink,
    callback,
    exchange,
    signInWithIdToken,
    identities: { list: identities.list, unlink: identities.unlink },
  };
}

export type OAuthSignIn = ReturnType<typeof createOAuthSignIn>;
