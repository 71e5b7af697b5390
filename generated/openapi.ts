// Generated from openapi.yaml by `npm run generate`. Do not edit.
export interface paths {
    "/api/health": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Check service health
         * @description Reports whether the service is running and its database answers a
         *     trivial query. Needs no authentication; suitable for load balancers and
         *     container health checks. When the database does not answer, the
         *     service responds `503 SERVICE_UNAVAILABLE`.
         *
         *     The answer also says whether Redis answers (when it is configured) and
         *     the state of the embeddings provider's circuit breaker. Neither
         *     changes the status: only the database decides between `200` and `503`.
         */
        get: operations["getHealth"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/metrics": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Scrape Prometheus metrics
         * @description This instance's metrics in Prometheus' text exposition format
         *     (version 0.0.4): request durations by operation and status code, sign-in
         *     and verification outcomes, refresh-token reuse, rate-limited requests,
         *     the database connection pool, the embeddings provider's latency and
         *     circuit breaker, realtime sockets, subscriptions and deliveries, and
         *     the Node.js process. Each instance reports its own: scrape every one.
         *
         *     Off unless the server is configured for it. With `METRICS_TOKEN` set,
         *     this operation needs `Authorization: Bearer <METRICS_TOKEN>`
         *     (`401 UNAUTHORIZED` without it or with another value). Without
         *     `METRICS_TOKEN` it answers `404 NOT_FOUND`, like any unknown route;
         *     `METRICS_PORT` then serves the same document on a port of its own,
         *     without a token.
         */
        get: operations["getMetrics"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/.well-known/jwks.json": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Get the public keys that verify access tokens (JWKS)
         * @description The JSON Web Key Set of the keys that verify this service's access
         *     tokens: the current key, a standby key (published before it signs,
         *     so that verifiers know it in time) and the previous keys not yet
         *     revoked. A token's `kid` header names its key. Only public members
         *     are published: never `d`, `p`, `q`, `dp`, `dq`, `qi` or `k`.
         *
         *     Needs no authentication. The answer carries
         *     `Cache-Control: public, max-age=300`: a verifier that meets an
         *     unknown `kid` should fetch the set again (as `jose`'s
         *     `createRemoteJWKSet` does) rather than wait for its copy to age.
         */
        get: operations["getJwks"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/.well-known/openid-configuration": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Get the token issuer's discovery document
         * @description The OpenID Connect discovery fields that apply to an issuer of access
         *     tokens, so that tools configured with an issuer URL find its keys:
         *     `issuer` (the `iss` of every access token) and `jwks_uri`, with the
         *     signing algorithms of the published keys. The service is not an
         *     OpenID Provider: it issues no ID tokens of its own and has no
         *     authorization endpoint. Needs no authentication; cached like the
         *     JWKS.
         */
        get: operations["getOpenIdConfiguration"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/users": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * List users
         * @description Returns one page of user accounts. **Administrators only**: any other
         *     authenticated caller receives `403 FORBIDDEN`.
         *
         *     - Records are sorted by `createdAt`, newest first; records created at
         *       the same instant are ordered by `id`, descending, so paging never
         *       repeats or skips a record while nothing changes. The page and its
         *       total come from one consistent snapshot.
         *     - `limit` is at most 1000; a larger value is rejected with
         *       `400 INVALID_INPUT`. `limit=0` returns no records but still reports
         *       the total.
         *     - An `offset` past the end returns an empty `data` array.
         *     - `pagination.total` is the exact number of records that match the
         *       search, independent of `offset` and `limit`.
         */
        get: operations["listUsers"];
        put?: never;
        /**
         * Sign up
         * @description Creates an account with an email address and a password.
         *
         *     - **When email verification is required** (the usual configuration),
         *       the service sends a verification email with a 6-digit code and a
         *       magic link, and answers `202` with `requireEmailVerification: true`.
         *       No session is created yet; the client continues with
         *       `POST /api/auth/email/verify`. The answer is the same when the
         *       address already belongs to an account, so the operation cannot be
         *       used to find out which addresses are registered.
         *     - **When email verification is not required**, the account is created
         *       and signed in at once: the answer is `201` with a `SessionResult`
         *       (see `client_type` for where the refresh token goes). An address that
         *       is already registered gets `409 USER_ALREADY_EXISTS`.
         *
         *     Email addresses are compared case-insensitively. The optional `name`
         *     becomes `profile.name`.
         *
         *     **Competing sign-ups.** The password of a sign-up becomes the
         *     account's only when its address is verified. When more than one
         *     sign-up was made for an address that is not verified yet (someone else
         *     may have typed it), verifying the address proves the mailbox and opens
         *     a session, but sets no password: the owner then chooses one with
         *     `POST /api/auth/password`. A sign-up inside the 60-second gap between
         *     two emails to one address is recorded all the same; no email is sent
         *     for it, and the code already sent stays valid.
         *
         *     **Sign-up binding.** The `202` answer carries `signUpBinding`, and web
         *     clients also get it in the HttpOnly cookie `sign_up_binding`. A
         *     verification that carries it (the cookie, or `signUpBinding` in the
         *     verify body) proves that whoever chose the password also holds the
         *     mailbox. A verification without it (a link opened on another device,
         *     a code typed into another app) proves the mailbox only: the password
         *     still signs in, but it is *unproven*, and the first time the mailbox
         *     is proven again (a sign-in with an emailed code, an OAuth or OpenID
         *     provider vouching for the address, a password reset) it is removed,
         *     with every session and linked provider of the account, and the owner
         *     is told by email. Accounts whose password is proven are not touched by
         *     those sign-ins. Every sign-up gets a binding, whatever the address.
         *
         *     `redirectTo` (optional) is where the page of the emailed link sends
         *     the person after confirming; it must be on the origin of the
         *     service's redirect URL (`400 INVALID_INPUT` otherwise, see
         *     `RedirectTo`). Without verification it is returned as the session's
         *     `redirectTo`.
         */
        post: operations["createUser"];
        /**
         * Delete users
         * @description Deletes the accounts whose ids are given, with everything they own
         *     (sessions, verifications, sign-in methods). **Administrators only**:
         *     any other authenticated caller receives `403 FORBIDDEN`.
         *
         *     - `userIds` holds 1 to 100 ids (UUIDs; anything else is
         *       `400 INVALID_INPUT`). An id given twice counts once; an id without
         *       an account is simply not counted: `deletedCount` is the number of
         *       accounts this call deleted.
         *     - Every session of a deleted account ends at once: its access tokens
         *       get `401 SESSION_REVOKED` on every instance within 2 seconds, its
         *       refresh tokens stop working and its realtime sockets are
         *       disconnected.
         *     - The last enabled administrator cannot be deleted: when the call
         *       would leave no enabled administrator, nothing is deleted and the
         *       answer is `409 LAST_ADMIN`. Concurrent calls are serialised, so two
         *       administrators deleting each other at once cannot both succeed.
         *     - An administrator may delete their own account while another enabled
         *       administrator remains.
         */
        delete: operations["deleteUsers"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/users/{userId}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Get a user
         * @description Returns one account with its role and whether it is disabled.
         *     **Administrators only**: any other authenticated caller receives
         *     `403 FORBIDDEN`. An id without an account gets `404 NOT_FOUND`; an id
         *     that is not a UUID gets `400 INVALID_INPUT`.
         */
        get: operations["getUser"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        /**
         * Change a user's role, or disable or enable it
         * @description Sets the account's `role` (`user` or `admin`) and/or whether it is
         *     `disabled`. **Administrators only**: any other authenticated caller
         *     receives `403 FORBIDDEN`.
         *
         *     - **Changing the role** ends every session of the account at once
         *       (their access tokens carry the old role): the user signs in again.
         *     - **Disabling** (`disabled: true`) ends every session of the account
         *       at once: its access tokens get `401 SESSION_REVOKED` on every
         *       instance within 2 seconds, its refresh tokens stop working and its
         *       realtime sockets are disconnected. A disabled account cannot sign
         *       in (it gets the answer of a wrong password, `401
         *       INVALID_CREDENTIALS`), refresh, verify its address, reset its
         *       password or sign in by email code. `disabled: false` enables it
         *       again; its old sessions stay ended.
         *     - The last enabled administrator cannot be demoted or disabled
         *       (`409 LAST_ADMIN`, nothing changes). Concurrent calls are
         *       serialised, so two administrators demoting each other at once
         *       cannot leave none; a caller who is no longer an enabled
         *       administrator when its call runs gets `403 FORBIDDEN`.
         *     - Setting what is already set changes nothing and ends no session.
         */
        patch: operations["updateUser"];
        trace?: never;
    };
    "/api/auth/users/{userId}/factors": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        post?: never;
        /**
         * Remove an account's second factors
         * @description Removes every factor and recovery code of the account and ends its
         *     sessions, for a person who lost their authenticator and their
         *     recovery codes. **Administrators only**. An id without an account
         *     gets `404 NOT_FOUND`; an id that is not a UUID gets
         *     `400 INVALID_INPUT`.
         */
        delete: operations["deleteUserFactors"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/users/{userId}/sessions": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * List an account's sessions
         * @description The account's live sessions, the most recently used first, at most
         *     200. **Administrators only**. `current` marks the caller's own
         *     session. An id without an account gets `404 NOT_FOUND`.
         */
        get: operations["listUserSessions"];
        put?: never;
        post?: never;
        /**
         * Sign an account out everywhere
         * @description Ends every session of the account, on every instance within 2
         *     seconds, sockets included, and forgets its known devices.
         *     **Administrators only**. An administrator ending their own sessions
         *     ends the one they call with too. An id without an account gets
         *     `404 NOT_FOUND`.
         */
        delete: operations["endUserSessions"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/sessions": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * List the caller's sessions
         * @description The caller's live sessions (not ended, not expired), the most
         *     recently used first, at most 200: "where am I signed in". `current`
         *     marks the session of the access token. A session's `ip` and
         *     `userAgent` are those of the sign-in that opened it (or of the
         *     second step that raised it).
         */
        get: operations["listSessions"];
        put?: never;
        /**
         * Sign in
         * @description Signs in with an email address and a password and creates a session.
         *
         *     - A wrong password and an unknown address get the same answer,
         *       `401 INVALID_CREDENTIALS`.
         *     - An account that was signed up for but is not verified yet has no
         *       password: the answer is `401 INVALID_CREDENTIALS`, as for an unknown
         *       address (anything else would tell whoever signed up whether the
         *       address had an account before). The client can ask for a new email
         *       with `POST /api/auth/email/send-verification`.
         *     - `403 EMAIL_NOT_VERIFIED` comes only after the right password of an
         *       unverified account created while email verification was not
         *       required.
         *     - Failed sign-ins slow down sign-ins to that address (known or not,
         *       counted across instances): 5 failures in a row are free; from the
         *       6th on, each failure makes the next attempt wait a delay that doubles
         *       from 1 second up to 15 minutes. An attempt made sooner is answered
         *       `429 RATE_LIMITED` with `Retry-After`, without checking the password.
         *       A successful sign-in clears the count; nothing is ever locked for
         *       good.
         *     - A known device of the account (the `device_id` cookie, or the
         *       `X-Device-Token` header, that an earlier session of this account
         *       gave the device) has a back-off of its own, with the same
         *       schedule: others' failures for the address do not hold it back,
         *       and its own failures and success touch only its own count. A
         *       missing, forged, expired or other account's signal is no known
         *       device.
         *
         *     **With an email code** (`method: "otp"`, after
         *     `POST /api/auth/email/send-otp`): the 6-digit code signs in the
         *     account with that address, with the same `client_type` rules.
         *
         *     - An address without an account becomes a verified account without
         *       a password (`name`, when sent, becomes `profile.name`), unless the
         *       service does not allow sign-ups (`ALLOW_SIGN_UP=false`): then the
         *       answer is the one for a wrong code.
         *     - An account whose address was not verified yet is verified by the
         *       code, but no password that was waiting for it (or that it held) is
         *       kept, and its earlier sessions end: the code proves the mailbox,
         *       not who signed up before. The person sets a password with
         *       `POST /api/auth/password`.
         *     - A wrong, expired, used or voided code, an address without a code,
         *       and a disabled account all get the same answer, `400 INVALID_OTP`.
         *       A code dies after 5 wrong attempts, and each address takes at most
         *       50 code attempts a day. Wrong codes also count as failed sign-ins
         *       of the address (the back-off above), and the per-client limit of
         *       sign-ins applies.
         *
         *     See `client_type` for where the refresh token goes.
         */
        post: operations["createSession"];
        /**
         * Sign out other devices, or everywhere
         * @description Ends the caller's sessions: `scope=others` every one but the
         *     current, `scope=all` every one including the current ("sign out
         *     everywhere"). Ending is a revocation: the refresh tokens stop
         *     working at once and the access tokens within 2 seconds on every
         *     instance, and the sessions' realtime sockets are disconnected.
         *     `scope=all` also forgets the account's known devices (devices that
         *     had signed in no longer skip the checks a new device gets).
         */
        delete: operations["endSessions"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/oauth/{provider}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Start signing in with a built-in OAuth provider
         * @description Starts a sign-in with one of the built-in provider names that the
         *     service is configured for (`OAUTH_PROVIDERS`; `google`, `github`,
         *     `microsoft`, or another of the names below set up as an OpenID
         *     Connect issuer). The answer's `authUrl` is where the browser goes:
         *     the provider's own sign-in page, with the service's state, nonce and
         *     PKCE challenge.
         *
         *     - The provider sends the browser back to the service
         *       (`GET /api/auth/oauth/{provider}/callback`), which finishes the
         *       exchange with the provider and then redirects to `redirect_uri`
         *       with `insforge_code=<one-time code>`, or with `error=<code>`.
         *     - `POST /api/auth/oauth/exchange` turns that code and the
         *       `code_verifier` of `code_challenge` into a session. The code lives
         *       60 seconds and works once.
         *     - `redirect_uri` must match `AUTH_REDIRECT_ALLOWLIST` (see
         *       `RedirectTo`); anything else is `400 INVALID_INPUT`.
         *
         *     Names that are not built in use
         *     `GET /api/auth/oauth/custom/{provider}`, with the same rules.
         */
        get: operations["getOAuthAuthorizationUrl"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/oauth/custom/{provider}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Start signing in with a configured OpenID Connect provider
         * @description The same as `GET /api/auth/oauth/{provider}`, for the providers whose
         *     name is not one of the built-in names: any OpenID Connect issuer the
         *     service is configured for (`OAUTH_PROVIDERS` with
         *     `OAUTH_<NAME>_ISSUER`).
         */
        get: operations["getCustomOAuthAuthorizationUrl"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/oauth/{provider}/callback": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * The provider's return to the service (register this URL with the provider)
         * @description Where the provider sends the browser after its sign-in page:
         *     `<PUBLIC_URL>/api/auth/oauth/<provider>/callback` is the redirect URL
         *     to register with the provider. Browsers arrive here; apps never call
         *     it.
         *
         *     The service checks the state (one use, 10 minutes), exchanges the
         *     provider's code with its PKCE verifier and client secret, checks the
         *     ID token (issuer, audience, signature, expiry, nonce) or, for
         *     GitHub, reads the user and its verified addresses, finds or creates
         *     the account, and answers `302` to the `redirect_uri` the sign-in
         *     started with:
         *
         *     - `?insforge_code=<one-time code>` on success (60 seconds, one use,
         *       only with the `code_verifier` of the sign-in's `code_challenge`);
         *     - `?error=<code>` otherwise: `ACCESS_DENIED` (the person refused at
         *       the provider), `OAUTH_PROVIDER_ERROR` (the provider answered with
         *       an error, or its answer did not pass the checks),
         *       `OAUTH_EMAIL_UNVERIFIED`, `OAUTH_ACCOUNT_UNVERIFIED`,
         *       `OAUTH_LINK_REQUIRED` (the account with the address is not linked
         *       by address: an administrator's, a provider with
         *       `OAUTH_<NAME>_LINK_BY_EMAIL=false`, or an identity its owner
         *       unlinked), `USER_ALREADY_EXISTS` (the account with the address is
         *       linked to another identity of this provider), `SIGN_UP_DISABLED`,
         *       `ACCOUNT_DISABLED` (see `ErrorCode`), or `SERVICE_UNAVAILABLE`.
         *
         *     A link started from a session (`POST /api/auth/identities`) ends
         *     here too: the identity is linked to the session's account, whatever
         *     address the provider gives, and the browser goes to the link's
         *     `redirect_uri` with `?linked=<provider>`, or with `?error=<code>`:
         *     `ACCESS_DENIED`, `OAUTH_PROVIDER_ERROR`, `IDENTITY_ALREADY_LINKED`
         *     (the identity is another account's, or the account has another
         *     identity of this provider), `SESSION_REVOKED` (the session that
         *     started the link has ended), `MFA_REQUIRED` (the account has a
         *     second factor the session has not proven), `ACCOUNT_DISABLED` or
         *     `SERVICE_UNAVAILABLE`.
         *
         *     No provider token reaches the browser or the app. A state that is
         *     unknown, expired or already used (a forged or replayed callback) is
         *     answered `400 OAUTH_STATE_INVALID`, with no redirect, since nothing
         *     says where to.
         */
        get: operations["handleOAuthCallback"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/oauth/exchange": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Exchange the one-time OAuth code for a session
         * @description Turns the `insforge_code` that the callback gave the app into a
         *     session, given the `code_verifier` whose S256 challenge started the
         *     sign-in. The code works once and for 60 seconds; a wrong verifier,
         *     an unknown, used or expired code all get the same
         *     `400 OAUTH_CODE_INVALID`, and a wrong verifier also uses the code up.
         *
         *     See `client_type` for where the refresh token goes.
         */
        post: operations["exchangeOAuthCode"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/id-token": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Sign in with an OpenID Connect ID token
         * @description Signs in with an ID token that an app obtained from a configured
         *     OpenID Connect provider itself (Google One Tap, a native sign-in
         *     SDK). The token must be signed by the provider's keys (its JWKS) and
         *     carry the provider's issuer, the service's client id for that
         *     provider as audience (and as `azp` when there are several
         *     audiences), an expiry in the future, an `iat` neither in the future
         *     nor more than 24 hours ago and, when `nonce` is sent, that nonce
         *     (a token that carries a `nonce` claim is refused when the request
         *     sends none). The account is found or created as in the redirect flow.
         *
         *     An ID token signs in once: the service keeps a record of each token
         *     that opened a session (the SHA-256 of its signed part, in the
         *     database, so every instance sees it) until the token could no longer
         *     be taken, and a second presentation is `401 ID_TOKEN_INVALID`;
         *     concurrent presentations open exactly one session. A presentation
         *     that opens no session (the account is refused, the service fails)
         *     does not use the token up.
         *
         *     `401 ID_TOKEN_INVALID` for any token that fails a check; GitHub has
         *     no ID tokens. See `client_type` for where the refresh token goes.
         */
        post: operations["signInWithIdToken"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/identities": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * List the provider identities linked to the caller's account
         * @description The provider identities that sign in to the caller's account, oldest
         *     first: each with its id (to unlink it), the provider's name, the
         *     provider's subject for the person, and the address the provider
         *     vouched for when the identity was linked (`null` when it vouched for
         *     none, and for identities linked before addresses were kept). The
         *     account's password and its address are not identities.
         */
        get: operations["listIdentities"];
        put?: never;
        /**
         * Start linking a provider identity to the caller's account
         * @description Starts a link of `provider` to the caller's account: the answer's
         *     `authUrl` is the provider's sign-in page, as for a sign-in. The
         *     provider sends the browser back to the service's callback
         *     (`GET /api/auth/oauth/{provider}/callback`), which links the identity
         *     to this account and redirects to `redirect_uri` with
         *     `linked=<provider>`, or with `error=<code>` (see the callback).
         *
         *     Linking from a session proves that the same person holds the account
         *     and the identity, so the provider's address need not be the
         *     account's, nor verified: this is how an administrator's account, or
         *     an account of a provider with `OAUTH_<NAME>_LINK_BY_EMAIL=false`,
         *     gets its identity. The session must have signed in or proven a
         *     second factor in the last 10 minutes (`403 REAUTHENTICATION_REQUIRED`
         *     otherwise) and must still be live when the provider sends the
         *     browser back (10 minutes at most). An identity linked to another
         *     account is not moved (`IDENTITY_ALREADY_LINKED`); an account has at
         *     most one identity per provider (`409 IDENTITY_ALREADY_LINKED` here
         *     when it has one: unlink it first).
         */
        post: operations["startIdentityLink"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/identities/{identityId}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        post?: never;
        /**
         * Unlink a provider identity from the caller's account
         * @description Unlinks one of the caller's identities: it no longer signs in to the
         *     account, and its provider does not link it again by address (only a
         *     link from a session does). The session must have signed in or proven
         *     a second factor in the last 10 minutes
         *     (`403 REAUTHENTICATION_REQUIRED` otherwise). The account must keep a
         *     way to sign in: a password, another identity of a configured
         *     provider, or a passkey (the mailbox alone, emailed sign-in codes,
         *     does not count); otherwise `409 LAST_SIGN_IN_METHOD`, and nothing
         *     changes. Another account's identity and an unknown id get the same
         *     `404 NOT_FOUND`. The account's sessions stay open.
         */
        delete: operations["unlinkIdentity"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/email/send-verification": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Send a verification email
         * @description Sends a fresh verification email (a 6-digit code and a magic link) to
         *     an account whose address is not verified yet. Codes and links sent
         *     earlier stop working.
         *
         *     The answer is always `202` with the same message, whether the address
         *     is unknown, already verified, or waiting for verification, so the
         *     operation reveals nothing about which addresses are registered.
         *     Requests are rate-limited per client and per address.
         *
         *     `redirectTo` (optional) is where the page of the emailed link sends
         *     the person after confirming; it must be on the origin of the
         *     service's redirect URL (`400 INVALID_INPUT` otherwise, see
         *     `RedirectTo`), and is checked before anything else, so its answer
         *     reveals nothing about the address either.
         */
        post: operations["sendVerificationEmail"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/email/verify": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Verify an email address
         * @description Verifies an email address with the 6-digit code or the magic-link
         *     token from the verification email, marks the address verified, and
         *     creates a session. No `Authorization` header is needed.
         *
         *     Rules:
         *
         *     1. When `client_type` is `web` (the default), the refresh token is set
         *        in the HttpOnly cookie `refresh_token`, `csrfToken` is returned in the
         *        body and `refreshToken` is `null`.
         *     2. When `client_type` is `mobile` or `desktop`, `refreshToken` is
         *        returned in the body and `csrfToken` is `null`; no cookie is set.
         *     3. `redirectTo` is the request's `redirectTo` when one was sent (the
         *        page of the emailed link sends it when the link carries
         *        `redirect_to`; it must be on the origin of the configured redirect
         *        URL, `400 INVALID_INPUT` otherwise), else the configured redirect
         *        URL; absent when neither exists.
         *     4. A 6-digit code is verified together with `email`; a 64-character hex
         *        magic-link token is verified on its own, without `email`. A code sent
         *        without `email`, or a link token sent with `email`, is rejected with
         *        `400 INVALID_INPUT`.
         *
         *     When more than one sign-up was made for the address before it was
         *     verified, the verification opens a session but sets no password (see
         *     `POST /api/auth/users`); the user sets one with
         *     `POST /api/auth/password`. The sign-up's password is proven only when
         *     the request carries that sign-up's binding (the `sign_up_binding`
         *     cookie, or `signUpBinding` in the body); otherwise it is unproven and
         *     goes the next time the mailbox is proven another way (see
         *     `POST /api/auth/users`). A binding that does not match changes
         *     nothing else: the verification succeeds all the same.
         *
         *     A wrong, expired, already used or unknown code or token, and a code
         *     paired with an unknown address, all receive the same answer,
         *     `400 INVALID_OTP`. Each code and token can be used once; a code stops
         *     working after repeated failed attempts, after which the client asks
         *     for a new email.
         */
        post: operations["verifyEmail"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/email/send-otp": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Email a sign-in code
         * @description Emails a 6-digit sign-in code to the address, for passwordless
         *     sign-in: the client then calls `POST /api/auth/sessions` with
         *     `{"method": "otp", "email", "otp"}`. The code is valid for 10 minutes,
         *     works once, and dies after 5 wrong attempts; a new code voids the
         *     previous one.
         *
         *     - An address with an account gets a code that signs that account in.
         *     - An address without one gets a code that creates the account
         *       (verified, without a password) when it is used, unless the service
         *       does not allow sign-ups (`ALLOW_SIGN_UP=false`): then no email is
         *       sent.
         *     - A disabled account gets no email.
         *
         *     The answer is always `202` with the same body, and the service does
         *     the same database work in every case (the email goes out after the
         *     answer), so the operation reveals nothing about which addresses are
         *     registered. Limits: per client (IP) as for verification emails, and
         *     per address one email per 60 seconds and 10 per day (of which one
         *     client causes at most 3), shared with every other email the service
         *     sends to that address. Beyond those 10, one sign-in or reset email
         *     per 15 minutes still goes out (whoever asks), so that no one can keep
         *     the owner from a way back in. A known device of the account (the
         *     `device_id` cookie or the `X-Device-Token` header) has a budget of
         *     its own that others cannot spend: 5 emails a day per device, 10 for
         *     all of the address's devices, one per 60 seconds. An address gets at
         *     most 10 + 96 + 10 emails a day. The answer is the same whatever the
         *     device signal says.
         */
        post: operations["sendOtpEmail"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/email/send-reset-password": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Email a password-reset code and link
         * @description Emails a 6-digit code and a link to reset the password of the account
         *     with this address. Both are valid for 10 minutes and work once; the
         *     code dies after 5 wrong attempts. The link carries its own
         *     64-character hexadecimal token (not derived from the code). A new
         *     email voids the code and link sent before.
         *
         *     - With the code, the client calls
         *       `POST /api/auth/email/exchange-reset-password-token` for a reset
         *       token, then `POST /api/auth/email/reset-password`.
         *     - The link opens the service's reset page (`/auth/reset-password`),
         *       where the person types the new password, or the app's page when
         *       the service sets `RESET_PASSWORD_URL` (the token is then the
         *       link's `token` query parameter, for `POST
         *       /api/auth/email/reset-password`).
         *
         *     `redirectTo` (optional) is where the service's reset page offers to
         *     go once the password is set; it must be on the origin of the
         *     service's redirect URL (`400 INVALID_INPUT` otherwise, see
         *     `RedirectTo`). It never changes where the link itself points.
         *
         *     The answer is always `202` with the same body, whether the address
         *     is unknown, belongs to a disabled account (neither gets an email) or
         *     to an account, and the service does the same database work in every
         *     case (the email goes out after the answer). Limits: per client (IP)
         *     as for verification emails, and per address as for every email the
         *     service sends (one per 60 seconds, 10 per day, at most 3 of them
         *     caused by one client); beyond them, one sign-in or reset email per
         *     15 minutes, and a known device's own budget, as for
         *     `POST /api/auth/email/send-otp`. The answer is the same whatever the
         *     device signal says.
         */
        post: operations["sendResetPasswordEmail"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/email/exchange-reset-password-token": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Exchange a password-reset code for a reset token
         * @description Checks the 6-digit code of a password-reset email and, when it is
         *     right, spends it and returns a reset token: 64 hexadecimal
         *     characters, stored only as a hash, valid for 10 minutes
         *     (`expiresAt`) and usable once, with
         *     `POST /api/auth/email/reset-password`.
         *
         *     A wrong, expired, used or voided code, a code of an account that has
         *     been disabled, and an address without an account all get the same
         *     answer, `400 INVALID_OTP`. Every attempt counts against the code
         *     (5 wrong ones and it is dead) and against the address's daily code
         *     attempts, whether or not the address has an account.
         */
        post: operations["exchangeResetPasswordToken"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/email/reset-password": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Set a new password with a reset token
         * @description Sets the account's password with a reset token: either the token of
         *     the emailed link or the one returned by
         *     `POST /api/auth/email/exchange-reset-password-token`, sent as `otp`.
         *     The new password follows the sign-up rules (8 to 256 characters).
         *
         *     A reset:
         *
         *     - sets the new password and marks the address verified (the mailbox
         *       was proven);
         *     - ends every session of the account at once: their access tokens
         *       get `401 SESSION_REVOKED` on every instance within 2 seconds, and
         *       their realtime sockets are disconnected;
         *     - deletes the account's other reset codes and tokens, its sign-in
         *       codes and its pending verification codes and links, with any
         *       competing sign-up that was waiting for verification;
         *     - clears the sign-in back-off of the address.
         *
         *     No session is opened: the person signs in with the new password.
         *
         *     An unknown, expired or already used token, and a token of an account
         *     that has been disabled, all get the same answer, `400 INVALID_OTP`.
         *     Of two resets sent at once with one token, exactly one succeeds.
         */
        post: operations["resetPassword"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/refresh": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Refresh the session
         * @description Exchanges a refresh token for a new access token and a new refresh
         *     token. The presented refresh token is retired.
         *
         *     - **Web** (`client_type=web`, the default): the refresh token comes
         *       from the `refresh_token` cookie, and the `X-CSRF-Token` header must
         *       carry the `csrfToken` of the session. No body is needed. A missing
         *       or mismatching header is answered with `403 CSRF_INVALID`. The new
         *       refresh token is set in the cookie.
         *     - **Mobile and desktop**: the refresh token is sent in the body as
         *       `refreshToken` (or `refresh_token`; both names may be sent only
         *       with the same token, `400 INVALID_INPUT` otherwise), and the new one
         *       comes back in the body. No cookie and no CSRF header are involved.
         *
         *     A missing, unknown, expired or revoked refresh token gets
         *     `401 REFRESH_TOKEN_INVALID`. A refresh token that was already
         *     exchanged gets `401 REFRESH_TOKEN_REUSED`, and the whole session is
         *     revoked: every token of that session stops working, and the user has
         *     to sign in again.
         *
         *     **Reuse interval.** For `REFRESH_TOKEN_REUSE_INTERVAL_SECONDS` (10 by
         *     default) after a refresh token was exchanged, presenting it again
         *     (a retry whose answer was lost, a second tab refreshing with the same
         *     cookie at the same moment) is not reuse: while the session is live,
         *     the answer is `200` with a fresh access token and the session's
         *     current refresh token (the same one the first answer carried, unless
         *     it was exchanged meanwhile), and nothing else changes. After the
         *     interval it is reuse as above; after the session ended it is refused
         *     (`401 REFRESH_TOKEN_REUSED`).
         */
        post: operations["refreshSession"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/logout": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Log out
         * @description Revokes a session on the server, named in one of two ways:
         *
         *     - **By its refresh token**, presented the same way as for
         *       `POST /api/auth/refresh`: web clients send the cookie and the
         *       `X-CSRF-Token` header; mobile and desktop clients send
         *       `refreshToken` (or `refresh_token`) in the body.
         *     - **By an access token**, when no refresh token is presented (no
         *       body, or `{}`, and for web no cookie): `Authorization: Bearer
         *       <accessToken>` ends the session that token belongs to, whatever its
         *       client type. The token must pass the same checks as on any Bearer
         *       operation (`401 UNAUTHORIZED`, `AUTH_UNAUTHORIZED` or, for a session
         *       that has already ended, `SESSION_REVOKED`). No CSRF header is
         *       needed: browsers never attach an Authorization header by
         *       themselves.
         *
         *     A refresh token, when one is presented, decides; the
         *     `Authorization` header is then not looked at. For web clients the
         *     answer clears the cookie.
         *
         *     Logging out is idempotent: a refresh token whose session has already
         *     ended (logged out before, expired, or revoked) and a token that was
         *     already rotated also get `204`, and the session is over. A rotated
         *     token counts as reuse all the same (the session ends for every
         *     holder of it, and the event is logged).
         *
         *     Access tokens of the session are refused from then on, by every
         *     instance within 2 seconds (`401 SESSION_REVOKED`), and its realtime
         *     sockets are disconnected.
         */
        post: operations["logout"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/password": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Change or set the password
         * @description Sets a new password for the signed-in account and ends every other
         *     session of the account (their access tokens get `401 SESSION_REVOKED`
         *     within 2 seconds); the session making the call stays signed in.
         *
         *     `currentPassword` is required when the account has a password, and
         *     must be right (`403 PASSWORD_INCORRECT` otherwise). An account without
         *     a password (after competing sign-ups, see `POST /api/auth/users`) sets
         *     its first one without it.
         */
        post: operations["changePassword"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/sessions/{sessionId}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        post?: never;
        /**
         * Sign out one device
         * @description Ends one of the caller's live sessions (the current one too), as
         *     `DELETE /api/auth/sessions` ends several. Another account's session,
         *     an ended one and an unknown id get the same `404 NOT_FOUND`.
         */
        delete: operations["endSession"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/sessions/current": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Get the current session
         * @description Returns the user that the access token belongs to, read fresh from
         *     the database. An expired access token gets `401 AUTH_UNAUTHORIZED`;
         *     the client refreshes the session and retries.
         */
        get: operations["getCurrentSession"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/factors": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * List the caller's second factors
         * @description The account's second factors, oldest first: verified ones, and
         *     unverified ones less than 10 minutes old (an enrollment not finished
         *     in that time is forgotten). Callable from a first-factor (`aal1`)
         *     session, so that an app can offer the factors to verify with.
         */
        get: operations["listFactors"];
        put?: never;
        /**
         * Enroll a TOTP factor
         * @description Starts an enrollment: a new TOTP secret (RFC 6238: SHA-1, 6 digits,
         *     30-second steps), answered once as base32 `secret`, as an
         *     `otpauth://` URI and as a QR code (an SVG data URI) for an
         *     authenticator app. The factor is `unverified` until its first code is
         *     sent to `POST /api/auth/mfa/verify`, and is forgotten after 10
         *     minutes. The secret is stored encrypted.
         *
         *     An account with a verified factor needs an `aal2` session to enroll
         *     another (`403 MFA_REQUIRED` otherwise). The session's last proof (its
         *     sign-in, or its last second factor) must be at most 10 minutes old
         *     (`403 REAUTHENTICATION_REQUIRED` otherwise): a leaked access token
         *     alone cannot add a factor that would lock its owner out. An account
         *     has at most 10 factors (`409 FACTOR_STATE`).
         */
        post: operations["createFactor"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/factors/recovery-codes": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Regenerate the recovery codes
         * @description Ten new single-use recovery codes, shown this once; the earlier ones
         *     stop working. Needs a verified factor (`409 FACTOR_STATE` otherwise),
         *     so an `aal2` session, whose last proof is at most 10 minutes old
         *     (`403 REAUTHENTICATION_REQUIRED` otherwise).
         */
        post: operations["regenerateRecoveryCodes"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/factors/{factorId}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        post?: never;
        /**
         * Remove a factor
         * @description Removes one of the caller's factors. When the account has a verified
         *     factor this needs an `aal2` session; its last proof must be at most 10
         *     minutes old (`403 REAUTHENTICATION_REQUIRED` otherwise). Removing the last verified factor
         *     also removes the recovery codes and ends the account's other sessions
         *     that are waiting for a second step. Another account's factor and an
         *     unknown id get the same `404 NOT_FOUND`.
         */
        delete: operations["deleteFactor"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/mfa/verify": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Complete the second step
         * @description Proves a second factor with a TOTP code (`factorId` and `code`) or a
         *     recovery code (`recoveryCode`), and answers a new session at `aal2`
         *     (the caller's session ends; its tokens stop working everywhere). The
         *     first code of an unverified factor verifies it; when it is the
         *     account's first verified factor the answer carries the account's
         *     ten recovery codes (`recoveryCodes`, shown this once), and the
         *     account's other sessions below `aal2` end.
         *
         *     A TOTP code is accepted within one 30-second step either side of the
         *     server's clock, and once: the same code, or the code of an earlier
         *     step, is refused afterwards on that factor. A recovery code is
         *     single-use; of two requests with the same code, one succeeds.
         *
         *     Wrong codes are counted per factor (recovery codes count together):
         *     after 5 in 5 minutes every code, the right one included, is answered
         *     `429 RATE_LIMITED` with `Retry-After` until the window ends. A wrong,
         *     used or replayed code gets `400 INVALID_OTP`; another account's factor
         *     and an unknown one get the same `404 NOT_FOUND`.
         */
        post: operations["verifyMfa"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/passkeys": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * List the caller's passkeys
         * @description The account's passkeys, oldest first. Passkeys are second factors
         *     too: `GET /api/auth/factors` lists them with `type: passkey`.
         */
        get: operations["listPasskeys"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/passkeys/registration/options": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Begin registering a passkey
         * @description The options for `navigator.credentials.create()` (the
         *     `PublicKeyCredentialCreationOptionsJSON` that `@simplewebauthn/browser`'s
         *     `startRegistration` takes): a discoverable credential (resident key
         *     required), user verification required, the account's passkeys
         *     excluded. The challenge is bound to the caller's session, works once
         *     and for 5 minutes; asking again replaces it.
         *
         *     An account with a verified factor needs an `aal2` session
         *     (`403 MFA_REQUIRED`), and, as for every change of the second
         *     factors, a proof of the last 10 minutes
         *     (`403 REAUTHENTICATION_REQUIRED`). An account has at most 10 factors,
         *     passkeys included (`409 FACTOR_STATE`).
         */
        post: operations["createPasskeyRegistrationOptions"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/passkeys/registration/verify": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Finish registering a passkey
         * @description Verifies what `navigator.credentials.create()` answered against the
         *     challenge of this session's last options: the origin (one of
         *     `WEBAUTHN_ORIGINS`), the RP ID (`WEBAUTHN_RP_ID`), user presence and
         *     user verification. The challenge is used up whatever the outcome.
         *
         *     A passkey is a verified second factor: when it is the account's
         *     first, the answer carries the account's ten recovery codes
         *     (`recoveryCodes`, shown this once) and the caller's session raised to
         *     `aal2` (`session`, a new session: the caller's tokens stop working, as
         *     after `POST /api/auth/mfa/verify`); every other session of the account
         *     below `aal2` ends, and later sign-ins by any other way owe a second
         *     step.
         */
        post: operations["verifyPasskeyRegistration"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/passkeys/authentication/options": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Begin signing in with a passkey
         * @description The options for `navigator.credentials.get()` (the
         *     `PublicKeyCredentialRequestOptionsJSON` that `@simplewebauthn/browser`'s
         *     `startAuthentication` takes), with user verification required, and
         *     the `challengeId` to send back with the answer. The challenge works
         *     once and for 5 minutes.
         *
         *     `allowCredentials` is empty: the browser offers the passkeys it holds
         *     for this site (every passkey is a discoverable credential). `email`,
         *     the address the person typed, may be sent: the answer is the same
         *     with or without it, for any address, so that it tells nothing about
         *     who has an account or a passkey.
         *
         *     Called with the access token of a session (an `aal1` session that
         *     owes its second step included), the challenge is bound to that
         *     session: its answer raises that session to `aal2` (the second step
         *     by a passkey). An `Authorization` header that does not verify is
         *     refused (`401`), never ignored.
         */
        post: operations["createPasskeyAuthenticationOptions"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/passkeys/authentication/verify": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Sign in with a passkey
         * @description Verifies what `navigator.credentials.get()` answered against the
         *     challenge `challengeId` names: the signature by the passkey's public
         *     key, the origin, the RP ID, user presence and **user verification**
         *     (the device's PIN or biometric; an assertion without it is refused,
         *     whatever the browser was asked), and the signature counter (a counter
         *     that does not move past the stored one is refused and logged as a
         *     possible cloned authenticator; authenticators that always send 0 are
         *     accepted). The challenge works once, whatever the outcome.
         *
         *     Without an access token it is a sign-in: the answer is a new session
         *     at `aal2` with `amr` `passkey` (possession of the device and its
         *     PIN or biometric, so no further factor is asked). With the access
         *     token of the session the options were asked with, the passkey must
         *     be that account's, and the session is raised to `aal2` as
         *     `POST /api/auth/mfa/verify` does (the caller's session ends).
         *
         *     Every refusal is the same `401 PASSKEY_REFUSED`.
         */
        post: operations["verifyPasskeyAuthentication"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/passkeys/{passkeyId}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        post?: never;
        /**
         * Remove a passkey
         * @description Removes one of the caller's passkeys, as `DELETE /api/auth/factors/{factorId}`
         *     removes any factor: an `aal2` session with a proof of the last 10
         *     minutes; removing the account's last second factor removes its
         *     recovery codes. Another account's passkey and an unknown id get the
         *     same `404 NOT_FOUND`.
         */
        delete: operations["deletePasskey"];
        options?: never;
        head?: never;
        /**
         * Rename a passkey
         * @description Gives one of the caller's passkeys a new name. Another account's
         *     passkey and an unknown id get the same `404 NOT_FOUND`.
         */
        patch: operations["updatePasskey"];
        trace?: never;
    };
    "/api/auth/profiles/{userId}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Get a user's public profile
         * @description Returns the public part of an account: its id and its profile
         *     (`name`, `avatar_url` and the free-form fields its owner set), and
         *     nothing else (no email address, role or dates). Any signed-in user
         *     may read any profile.
         *
         *     An id without an account, an id that is not a UUID and the id of a
         *     disabled account all get the same answer, `404 NOT_FOUND`.
         */
        get: operations["getProfile"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/profiles/current": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        /**
         * Update the signed-in user's profile
         * @description Merges `profile` into the signed-in user's profile and returns the
         *     result (a JSON merge patch: fields sent replace the stored ones,
         *     fields not sent are kept, a field sent as `null` is removed; `name`
         *     and `avatar_url` then read `null`).
         *
         *     - `name`: 1 to 100 characters. `avatar_url`: an `http://` or
         *       `https://` URL of at most 2048 characters.
         *     - Free-form fields: names of 1 to 64 letters, digits and `_`,
         *       starting with a letter; values are strings (at most 1000
         *       characters), numbers or booleans (no objects or arrays).
         *     - The stored profile holds at most 50 fields and 4096 bytes of JSON
         *       (UTF-8) after the merge; a patch that would exceed either is
         *       refused as a whole with `400 INVALID_INPUT`.
         *     - Account fields cannot be set here: `id`, `email`, `role`,
         *       `password`, `emailVerified`, `metadata`, `providers`, `createdAt`,
         *       `updatedAt`, `disabled` and their other spellings (any case, with
         *       or without `_`) are refused with `400 INVALID_INPUT`.
         *
         *     The new profile shows at once in `GET /api/auth/profiles/{userId}`,
         *     the current session, the user directory and every later session
         *     result.
         */
        patch: operations["updateCurrentProfile"];
        trace?: never;
    };
    "/api/auth/public-config": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Get the public auth configuration
         * @description What a sign-in page needs to know about this service, without
         *     authentication: the OAuth providers it offers, whether
         *     addresses must be verified before signing in, the password rules it
         *     enforces, how verification and password-reset emails are used, whether
         *     sign-ups are open, and where its links lead.
         *
         *     The answer depends on the service's configuration only. It carries an
         *     `ETag` and `Cache-Control: public, no-cache`: caches may keep it but
         *     must revalidate, so a changed configuration shows at once. A request
         *     whose `If-None-Match` names the current `ETag` gets `304` without a
         *     body.
         */
        get: operations["getPublicAuthConfig"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/audit-log": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Read the audit log
         * @description Returns one page of the audit log, newest first. **Administrators
         *     only**: any other authenticated caller receives `403 FORBIDDEN`.
         *
         *     Every account event is recorded, in the same transaction as the
         *     change it records (a change that rolls back leaves no entry): the
         *     event's type (`AuditEventType`), whether it succeeded, how it was
         *     done, who acted, whose account it concerns, the session, the
         *     client's address and user agent, and a few names and ids in
         *     `details`. No entry holds a secret: never a password, token, code,
         *     key or recovery code.
         *
         *     - Filters combine: `userId` (the account the events concern), `type`
         *       (a comma-separated list of types), and `since` (inclusive) and
         *       `until` (exclusive) on `occurredAt`. `since` at or after `until`
         *       returns no events.
         *     - Paging: pass the answer's `nextCursor` as `cursor`, with the same
         *       filters, for the next page; `nextCursor` is null on the last page.
         *       Pages follow the order in which entries were recorded, so a walk
         *       through the pages never returns an entry twice and misses none
         *       recorded before it began, however many are recorded meanwhile
         *       (newer entries come before its first page).
         *     - Entries are kept for `AUDIT_RETENTION_DAYS` days (90 by default),
         *       then deleted by the periodic housekeeping.
         */
        get: operations["listAuditEvents"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/audit-log/me": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Read your own sign-in history
         * @description Returns one page of the caller's own sign-ins and session ends,
         *     newest first: the audit events about the caller's account of the
         *     types `sign_in`, `mfa_verified`, `refresh_token_reused`, `logout`
         *     and `session_ended`, with where they came from (address and user
         *     agent), so that a person can spot a sign-in that was not theirs.
         *     Nothing of another account, and no other type, is returned: when
         *     someone else acted (an administrator ended a session), the entry
         *     says so by its `details.by` and `actorId`, `ip` and `userAgent` are
         *     `null`. No entry holds a secret: never a password, token or code.
         *
         *     `type` narrows the list to some of those types; `since`, `until`,
         *     `cursor` and `limit` work as for `GET /api/auth/audit-log`. Entries
         *     are kept for `AUDIT_RETENTION_DAYS` days (90 by default).
         */
        get: operations["listOwnAuditEvents"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/webhook-deliveries": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * List webhook deliveries
         * @description Returns one page of the webhook events and their delivery, newest
         *     first (by `createdAt`, then `id`). **Administrators only**: any other
         *     authenticated caller receives `403 FORBIDDEN`.
         *
         *     Each event is `pending` (waiting for its first attempt or a retry,
         *     due at `nextAttemptAt`), `delivered` (the receiver answered 2xx) or
         *     `failed` (dead-lettered: no attempt succeeded in the 24 hours after
         *     its creation). `lastStatus` and `lastError` describe the last failed
         *     attempt (`lastStatus` is null when no answer came: a timeout or a
         *     failed connection). `payload` is the body that was (or will be)
         *     posted; its `id` is the `webhook-id` header.
         *
         *     - `status` keeps only the events in that state (`failed`: the dead
         *       letters).
         *     - Paging: pass the answer's `nextCursor` as `cursor`, with the same
         *       `status`, for the next page; `nextCursor` is null on the last page.
         *     - Delivered and failed events are kept for `WEBHOOK_RETENTION_DAYS`
         *       days (30 by default).
         *     - Events are queued only while `WEBHOOK_URL` is set, and only those
         *       of the types in `WEBHOOK_EVENTS`.
         */
        get: operations["listWebhookDeliveries"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/signing-keys": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * List the signing keys
         * @description Every signing key with its state, newest first: no key material (the
         *     public halves are in `GET /.well-known/jwks.json`).
         *     **Administrators only**: any other authenticated caller receives
         *     `403 FORBIDDEN`.
         */
        get: operations["listSigningKeys"];
        put?: never;
        /**
         * Create a standby signing key
         * @description Creates a key in the `standby` state: published in the JWKS at once,
         *     signing only after `rotate`. Publish it a while before rotating (the
         *     longest time verifiers keep the JWKS: 5 minutes for this service's
         *     `Cache-Control`, more for some verifiers) so that none meets a token
         *     whose key it does not know. `alg` is `ES256` (P-256, the default),
         *     `RS256` (RSA 2048) or `EdDSA` (Ed25519).
         *
         *     There is at most one standby key: a second one gets
         *     `409 SIGNING_KEY_STATE`. **Administrators only**. The private half is
         *     kept encrypted in the database and never leaves the service.
         */
        post: operations["createSigningKey"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/signing-keys/rotate": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Rotate the signing key
         * @description The standby key becomes `current` (one is created first, ES256, when
         *     there is none) and the current key becomes `previous`: new access
         *     tokens carry the new `kid`, and tokens of the old key keep verifying
         *     until they expire or the key is revoked. Sessions are not ended.
         *     Every instance signs with the new key within 2 seconds.
         *     **Administrators only**. Answers the keys after the rotation.
         */
        post: operations["rotateSigningKeys"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/auth/signing-keys/{kid}/revoke": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Revoke a signing key
         * @description Withdraws a `previous` or `standby` key: it leaves the JWKS, and every
         *     instance refuses its tokens (`401 AUTH_UNAUTHORIZED`, HTTP and socket
         *     handshakes alike) within 2 seconds. Clients holding such a token
         *     refresh their session and get one signed by the current key; sessions
         *     are not ended. The `current` key cannot be revoked (rotate first):
         *     `409 SIGNING_KEY_STATE`. Revoking a revoked key changes nothing and
         *     answers it again. An unknown `kid` gets `404 NOT_FOUND`.
         *     **Administrators only**.
         */
        post: operations["revokeSigningKey"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/ai/embeddings": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Generate embeddings
         * @description Computes vector embeddings for one text or a batch of texts with the
         *     chosen embedding model. `data[i].index` is the position of the input
         *     the vector belongs to. Any signed-in user may call it, up to a
         *     per-user number of requests and of tokens per minute, shared by
         *     every instance (`429 RATE_LIMITED` with `Retry-After` beyond). Before
         *     its tokens are counted, a request holds what is left of the user's
         *     minute up to its size in UTF-8 bytes (an upper bound of its tokens):
         *     a user with nothing left is refused at once. Once counted, a request
         *     is charged its tokens, refused ones included: one that does not fit
         *     in what is left of the minute is `429` (and uses up the minute), one
         *     with more tokens than the whole per-minute allowance is
         *     `400 INVALID_INPUT`. Each user has at most 16 requests being counted
         *     (or waiting to be) at once per instance, a quarter of the shared
         *     counting queue; one more is refused at once with
         *     `429 RATE_LIMITED` and `Retry-After: 1`.
         *
         *     - `model`: `local/lexical-v1` is computed inside the service (512
         *       dimensions, lexical rather than semantic similarity) and is always
         *       available. Other models are served by the deployment's
         *       OpenAI-compatible provider. A model outside the deployment's list
         *       is rejected with `400 MODEL_NOT_ALLOWED`, whose message lists the
         *       allowed ones.
         *     - `input`: a string or an array of up to 2048 strings. Each is at most
         *       8192 tokens and a request at most 300,000 tokens in all (counted
         *       with OpenAI's cl100k_base tokenizer, not estimated from
         *       characters); empty strings and longer input are rejected with
         *       `400 INVALID_INPUT` before anything is sent to a provider. Bodies
         *       are at most 8 MiB (`413`).
         *     - `encoding_format` chooses between arrays of numbers (`float`, the
         *       default) and base64 strings of little-endian float32 values
         *       (`base64`), whatever the provider itself returns.
         *     - `dimensions` shortens the vectors; only some models support it.
         *       `0` (or leaving it out) keeps the model's own size. A value above
         *       the model's native size, or a value from 1 up for a model that
         *       cannot shorten (such as `text-embedding-ada-002`), is rejected with
         *       `400 INVALID_INPUT`.
         *     - `usage` (OpenAI's form) and `metadata.usage` give the same figures:
         *       the provider's token counts when it reports them, otherwise the
         *       service's own count; `completionTokens` is always 0.
         *     - `user` (OpenAI's end-user identifier) is recorded with the usage.
         *
         *     The answer has OpenAI's shape as well (`model`, `usage`), so
         *     OpenAI's client libraries work against this service with `baseURL`
         *     set to `<service>/api/ai` and an access token as the API key.
         *
         *     Provider failures: a request the provider refuses (its 400, 404 or
         *     422) is `400 INVALID_INPUT` with the provider's message; the provider
         *     rejecting the service's credentials is `502 PROVIDER_AUTH_FAILED`;
         *     the provider rate limiting the service (after retries) is
         *     `429 RATE_LIMITED` with `Retry-After`; provider errors or an
         *     unreachable provider (after up to two retries) are
         *     `502 PROVIDER_UNAVAILABLE`; no answer in time is
         *     `504 PROVIDER_TIMEOUT`. `503 SERVICE_UNAVAILABLE` means the model
         *     needs a provider and none is configured, or (with `Retry-After`)
         *     that too many requests are waiting to have their tokens counted.
         */
        post: operations["createEmbeddings"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/realtime/permissions": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Get realtime permissions
         * @description Returns the row-level-security policies that govern the realtime
         *     facility, read from the database catalogue (`pg_policies`):
         *
         *     - `subscribe`: the policies on the `realtime.channels` table, which
         *       decide who may subscribe to which channels (a socket may subscribe
         *       when, acting as it, a `SELECT` finds the channel);
         *     - `publish`: the policies on the `realtime.messages` table: its
         *       `INSERT` policies decide who may publish (a message is inserted
         *       acting as its sender), and its `SELECT` policies who may read a
         *       channel's history.
         *
         *     Each list is ordered by `policyName`; `roles` is always an array of
         *     role names. Any signed-in user may read them. The list reflects the
         *     policies in force, including any an operator added after
         *     installation: on PostgreSQL a created, altered or dropped policy
         *     shows up on every instance within a second (the database notifies
         *     them); on the embedded database, within a second as well (the
         *     answer is cached for one second).
         */
        get: operations["getRealtimePermissions"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/realtime/channels": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * List realtime channels
         * @description Returns every channel pattern, ordered by `pattern`. **Administrators
         *     only**: any other authenticated caller receives `403 FORBIDDEN`.
         *
         *     A channel row names the channels that may exist: `pattern` is matched
         *     with SQL `LIKE` against the channel a client subscribes to or
         *     publishes on, so `%` matches any run of characters and `_` any one
         *     character (`order:%` covers `order:1` and `order:abc`). Who may
         *     subscribe and publish is then up to the realtime policies (see
         *     `GET /api/realtime/permissions`); the default ones admit any signed-in
         *     user to every enabled channel.
         */
        get: operations["listRealtimeChannels"];
        put?: never;
        /**
         * Create a realtime channel
         * @description Adds a channel pattern. **Administrators only.** A pattern that
         *     already exists gets `409 CHANNEL_ALREADY_EXISTS`. New channels are
         *     enabled unless `enabled: false` is given.
         */
        post: operations["createRealtimeChannel"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/api/realtime/channels/{channelId}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        post?: never;
        /**
         * Delete a realtime channel
         * @description Removes a channel pattern. **Administrators only.** Messages already
         *     published keep their channel name (their history stays readable
         *     while another pattern covers the name).
         */
        delete: operations["deleteRealtimeChannel"];
        options?: never;
        head?: never;
        /**
         * Update a realtime channel
         * @description Enables or disables a channel, or changes its description.
         *     **Administrators only.** The pattern cannot change: delete the
         *     channel and create another.
         *
         *     Disabling a channel stops new subscriptions and publishes at once
         *     (the default policies admit enabled channels only); sockets already
         *     subscribed stay subscribed but can no longer publish.
         */
        patch: operations["updateRealtimeChannel"];
        trace?: never;
    };
    "/api/realtime/messages": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Read a channel's history
         * @description Returns the messages of one channel in the order subscribers received
         *     them (commit order), oldest first, read acting as the caller: the
         *     policies on `realtime.messages` decide what is returned (by default,
         *     a signed-in user reads the history of every channel it may subscribe
         *     to; anything else gets an empty list).
         *
         *     A client that reconnects passes the `messageId` of the last message
         *     it received as `after` and gets what it missed; it repeats with the
         *     last id of each page while `hasMore` is true. An `after` that the
         *     caller cannot read on this channel (unknown, deleted by the
         *     retention, or another channel's) gets `404 NOT_FOUND`. Messages are
         *     kept for `REALTIME_RETENTION_DAYS` days (7 by default).
         */
        get: operations["listRealtimeMessages"];
        put?: never;
        /**
         * Publish a realtime message
         * @description Publishes a message from a server, with the same check as a socket's
         *     `realtime:publish`: the message is inserted into `realtime.messages`
         *     acting as the caller, so the publish policies decide. When they
         *     refuse, the answer is `403 FORBIDDEN` and nothing is delivered.
         *     Unlike a socket, the caller does not need to be subscribed.
         *
         *     An accepted message reaches every subscriber of the channel, on every
         *     instance, as a socket.io event named after `event`, whose argument is
         *     the payload plus `meta` (see `/asyncapi.yaml`).
         *
         *     - `payload` must be a JSON object without a `meta` property, at most
         *       `REALTIME_MAX_PAYLOAD_BYTES` bytes as JSON (4096 by default);
         *       larger ones get `413 PAYLOAD_TOO_LARGE`.
         *     - `senderId` defaults to the caller; the default policy refuses any
         *       other value.
         *     - Each user may publish `REALTIME_HTTP_PUBLISH_RATE` messages a minute
         *       this way (600 by default, counted on every instance together when
         *       Redis is configured); beyond, `429 RATE_LIMITED` with `Retry-After`.
         *       A socket's own publishes have their own budget.
         *     - While the fan-out between instances (Redis with
         *       `REALTIME_ADAPTER=redis`, PostgreSQL's notifications with
         *       `postgres`) cannot deliver, or too many publishes are waiting on
         *       this instance, the answer is `503 SERVICE_UNAVAILABLE` with
         *       `Retry-After`, as while the database is away: the message is not
         *       kept in history. A `201` means the message is on its way to every
         *       subscriber. A refused message may still reach some subscribers
         *       (Redis or PostgreSQL took it, but its confirmation came too late),
         *       so a client that publishes again after a `503` may cause a
         *       duplicate: subscribers tell them apart by content, as the two
         *       publishes get different ids.
         */
        post: operations["publishRealtimeMessage"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
}
export type webhooks = Record<string, never>;
export interface components {
    schemas: {
        /**
         * @description A signing key's id, the `kid` of its JWK and of the tokens it signs.
         * @example 8pQm2T0cYwXbRZ4oKqJv1A
         */
        KeyId: string;
        /**
         * @description The JWS algorithm of a signing key: `ES256` (ECDSA on P-256 with
         *     SHA-256, the default), `RS256` (RSASSA-PKCS1-v1_5 with SHA-256, RSA
         *     2048) or `EdDSA` (Ed25519).
         * @enum {string}
         */
        SigningKeyAlgorithm: "ES256" | "RS256" | "EdDSA";
        /**
         * @description `standby`: published in the JWKS, not signing yet. `current`: signs
         *     every new access token (exactly one). `previous`: signed before the
         *     last rotations; published, its tokens verify until they expire.
         *     `revoked`: withdrawn from the JWKS; its tokens are refused.
         * @enum {string}
         */
        SigningKeyStatus: "standby" | "current" | "previous" | "revoked";
        /** @description A signing key's state and history, without key material. */
        SigningKey: {
            kid: components["schemas"]["KeyId"];
            alg: components["schemas"]["SigningKeyAlgorithm"];
            status: components["schemas"]["SigningKeyStatus"];
            /** Format: date-time */
            createdAt: string;
            /**
             * Format: date-time
             * @description When it became `current`; null while it never was.
             */
            activatedAt: string | null;
            /**
             * Format: date-time
             * @description When a rotation made it `previous`; null while it is not.
             */
            retiredAt: string | null;
            /**
             * Format: date-time
             * @description When it was revoked; null while it is not.
             */
            revokedAt: string | null;
        };
        /**
         * @description What an audit event records (`outcome` says whether it succeeded).
         *
         *     | type | the event |
         *     |---|---|
         *     | `sign_up` | an account was created: a sign-up (`method` `password`; a refused one at a taken address is a failure), a first emailed code (`otp`) or a provider's identity (the provider's name) |
         *     | `email_verified` | the account's address was verified (`method`: `code` or `link`) |
         *     | `sign_in` | a first factor opened a session (`method`: `password`, `otp` (an emailed code or a verification), `oauth`, `id_token`, `passkey`); a failure is a refused sign-in, with the account when the address has one |
         *     | `mfa_verified` | a second factor raised a session to `aal2` (`method`: the factor's type) |
         *     | `refresh_token_reused` | a retired refresh token was presented again: the session was ended as stolen |
         *     | `logout` | a session was ended by its own logout |
         *     | `session_ended` | a session was ended: `details.by` says why: `self` (its owner, from a session), `administrator`, `password_change`, `password_reset`, `second_factor` (the account's first factor was added or its last removed, ending the sessions below `aal2`), `mailbox_proof` (an unverified or unproven account's mailbox was proven), `promotion` (`ADMIN_EMAIL` made the account the administrator) |
         *     | `password_changed` | the password was changed from a session |
         *     | `password_reset` | the password was set with an emailed reset code or link |
         *     | `password_removed` | a password the mailbox's owner had not chosen (left unproven by a verification without the sign-up's binding) was removed when the owner proved the mailbox; its identities (`identity_unlinked`) and sessions (`session_ended`, by `mailbox_proof`) went with it |
         *     | `factor_enrolled` | a second factor was enrolled (not yet verified) |
         *     | `factor_verified` | an enrolled factor was verified: it now counts |
         *     | `factor_removed` | a second factor was removed |
         *     | `recovery_codes_regenerated` | new recovery codes replaced the old ones |
         *     | `passkey_added` | a passkey was registered |
         *     | `passkey_removed` | a passkey was removed |
         *     | `identity_linked` | an OAuth or OpenID Connect identity was linked to the account |
         *     | `identity_unlinked` | a linked identity was removed |
         *     | `profile_updated` | the account's profile was changed |
         *     | `user_created` | the service made the administrator's account from `ADMIN_EMAIL` at start (no actor) |
         *     | `user_role_changed` | an administrator changed an account's role, or `ADMIN_EMAIL` made an existing account the administrator at start (no actor) |
         *     | `user_disabled` | an administrator disabled an account |
         *     | `user_enabled` | an administrator enabled an account again |
         *     | `user_deleted` | an administrator deleted an account |
         *     | `user_factors_reset` | an administrator removed an account's second factors and recovery codes |
         *     | `signing_key_created` | a signing key was created (`details.kid`) |
         *     | `signing_key_rotated` | the signing keys were rotated |
         *     | `signing_key_revoked` | a signing key was revoked |
         * @enum {string}
         */
        AuditEventType: "sign_up" | "email_verified" | "sign_in" | "mfa_verified" | "refresh_token_reused" | "logout" | "session_ended" | "password_changed" | "password_reset" | "password_removed" | "factor_enrolled" | "factor_verified" | "factor_removed" | "recovery_codes_regenerated" | "passkey_added" | "passkey_removed" | "identity_linked" | "identity_unlinked" | "profile_updated" | "user_created" | "user_role_changed" | "user_disabled" | "user_enabled" | "user_deleted" | "user_factors_reset" | "signing_key_created" | "signing_key_rotated" | "signing_key_revoked";
        /** @description One or more `AuditEventType` values, comma-separated, without spaces. */
        AuditEventTypeList: string;
        /**
         * @description One or more of the types a person sees of their own history
         *     (`sign_in`, `mfa_verified`, `refresh_token_reused`, `logout`,
         *     `session_ended`), comma-separated, without spaces.
         */
        OwnAuditEventTypeList: string;
        /** @description One entry of the audit log. Never a password, token, code, key or recovery code. */
        AuditEvent: {
            /** @description The entry's number in the log (a decimal integer); later entries have larger numbers. */
            id: string;
            /** Format: date-time */
            occurredAt: string;
            type: components["schemas"]["AuditEventType"];
            /**
             * @description `failure`: the attempt was refused, and changed nothing.
             * @enum {string}
             */
            outcome: "success" | "failure";
            /** @description How it was done, where that varies (a sign-in's or a second factor's method). */
            method: string | null;
            /**
             * Format: uuid
             * @description Who acted (the account itself, an administrator); null for the service itself or an unknown caller.
             */
            actorId: string | null;
            /**
             * Format: uuid
             * @description The account the event concerns; null when there is none (a refused sign-in at an unknown address, a signing-key change).
             */
            userId: string | null;
            /**
             * Format: uuid
             * @description The session it happened in, or the session it opened or ended.
             */
            sessionId: string | null;
            /** @description The client's address (behind proxies, the one `TRUST_PROXY` finds). */
            ip: string | null;
            /** @description The client's User-Agent header (its first 512 characters). */
            userAgent: string | null;
            /** @description Names and ids that say more, depending on the type (`clientType`, `aal`, `by`, `kid`, …). */
            details: {
                [key: string]: string | number | boolean | null;
            };
        };
        AuditEventList: {
            /** @description The events of this page, newest first. */
            events: components["schemas"]["AuditEvent"][];
            /** @description Pass it as `cursor` for the next page; null on the last page. */
            nextCursor: string | null;
        };
        /**
         * @description A webhook event's type (`WEBHOOK_EVENTS` picks among them; all by
         *     default), and the audit events it announces.
         *
         *     | type | announces |
         *     |---|---|
         *     | `user.created` | `sign_up` (an account made without verification: at once; one awaiting verification: with its first verification), `user_created` |
         *     | `user.verified` | `email_verified` |
         *     | `user.updated` | `user_role_changed`, `user_enabled`, `profile_updated`, `identity_linked`, `identity_unlinked` |
         *     | `user.disabled` | `user_disabled` |
         *     | `user.deleted` | `user_deleted` |
         *     | `session.created` | a sign-up, verification or sign-in that opened a session |
         *     | `session.ended` | `logout`, `session_ended`, `refresh_token_reused` |
         *     | `password.changed` | `password_changed`, `password_reset`, `password_removed` |
         *     | `mfa.changed` | `factor_verified`, `factor_removed`, `recovery_codes_regenerated`, `passkey_added`, `passkey_removed`, `user_factors_reset` |
         * @enum {string}
         */
        WebhookEventType: "user.created" | "user.verified" | "user.updated" | "user.disabled" | "user.deleted" | "session.created" | "session.ended" | "password.changed" | "mfa.changed";
        /**
         * @description The JSON body of a webhook: the event's type, when it happened, and
         *     what it concerns. Never a secret: no password, token, code or key.
         */
        WebhookEvent: {
            type: components["schemas"]["WebhookEventType"];
            /**
             * Format: date-time
             * @description When the event happened (the same on every attempt; the `webhook-timestamp` header is the attempt's).
             */
            timestamp: string;
            data: {
                /**
                 * Format: uuid
                 * @description The account the event concerns.
                 */
                userId: string | null;
                /** @description The account's address (`user.*` events only). */
                email?: string;
                /**
                 * Format: uuid
                 * @description The session it happened in, or the session it opened or ended.
                 */
                sessionId?: string;
                /**
                 * Format: uuid
                 * @description Who acted (the account itself, an administrator); null for the service itself.
                 */
                actorId: string | null;
                auditEvent: components["schemas"]["AuditEventType"];
                /** @description How it was done, where that varies (a sign-in's or a second factor's method). */
                method?: string;
            } & {
                [key: string]: string | number | boolean | null;
            };
        };
        /**
         * @description `pending`: waiting for an attempt; `delivered`: answered 2xx; `failed`: dead-lettered after 24 hours of failed attempts.
         * @enum {string}
         */
        WebhookDeliveryStatus: "pending" | "delivered" | "failed";
        WebhookDelivery: {
            /**
             * Format: uuid
             * @description The event's id, sent as the `webhook-id` header (the same on every attempt).
             */
            id: string;
            eventType: components["schemas"]["WebhookEventType"];
            status: components["schemas"]["WebhookDeliveryStatus"];
            /** @description Attempts made so far (one under way included). */
            attempts: number;
            /**
             * Format: date-time
             * @description When the event was queued (the change it announces committed with it).
             */
            createdAt: string;
            /**
             * Format: date-time
             * @description When the last attempt started; null before the first.
             */
            lastAttemptAt: string | null;
            /**
             * Format: date-time
             * @description While pending, when the next attempt is due (while one is under way, the end of its lease); null once delivered or failed.
             */
            nextAttemptAt: string | null;
            /** @description The HTTP status of the last answer (the 2xx of a delivery); null when no answer came. */
            lastStatus: number | null;
            /** @description Why the last attempt failed (`answered HTTP 500`, `no answer within 10000 ms`, `connection refused`); null after a delivery. */
            lastError: string | null;
            /**
             * Format: date-time
             * @description When the receiver answered 2xx.
             */
            deliveredAt: string | null;
            payload: components["schemas"]["WebhookEvent"];
        };
        WebhookDeliveryList: {
            /** @description The events of this page, newest first. */
            deliveries: components["schemas"]["WebhookDelivery"][];
            /** @description Pass it as `cursor` for the next page; null on the last page. */
            nextCursor: string | null;
        };
        SigningKeyList: {
            /** @description Every key, newest first. */
            keys: components["schemas"]["SigningKey"][];
        };
        CreateSigningKeyRequest: {
            alg?: components["schemas"]["SigningKeyAlgorithm"];
        };
        /**
         * @description The public half of a signing key (RFC 7517): `kty` `EC` with `crv`
         *     `P-256`, `x` and `y`; `RSA` with `n` and `e`; or `OKP` with `crv`
         *     `Ed25519` and `x`. Never a private member.
         */
        Jwk: {
            /** @enum {string} */
            kty: "EC" | "RSA" | "OKP";
            /** @enum {string} */
            crv?: "P-256" | "Ed25519";
            x?: string;
            y?: string;
            n?: string;
            e?: string;
            kid: components["schemas"]["KeyId"];
            alg: components["schemas"]["SigningKeyAlgorithm"];
            /** @constant */
            use: "sig";
        };
        Jwks: {
            /** @description The current key, a standby key if there is one, and the previous keys not revoked. */
            keys: components["schemas"]["Jwk"][];
        };
        /** @description The discovery fields (OpenID Connect Discovery 1.0) that apply to an issuer of access tokens. */
        OpenIdConfiguration: {
            /**
             * Format: uri
             * @description The `iss` claim of every access token.
             */
            issuer: string;
            /** Format: uri */
            jwks_uri: string;
            /** @description The algorithms of the published keys (the service issues access tokens, no ID tokens). */
            id_token_signing_alg_values_supported: components["schemas"]["SigningKeyAlgorithm"][];
            subject_types_supported: "public"[];
            claims_supported: string[];
        };
        /**
         * @description The claims of an access token (a JWS whose header names its key in
         *     `kid`). Verify the signature with the JWKS, `iss`, `aud` and `exp`
         *     before trusting any of them.
         */
        AccessTokenClaims: {
            /**
             * Format: uuid
             * @description The user's id.
             */
            sub: string;
            /** @description The account's email address when the token was issued. */
            email: string;
            /** @enum {string} */
            role: "user" | "admin";
            /**
             * Format: uuid
             * @description The session's id; a revoked session's tokens are refused by the service.
             */
            sid: string;
            /** @constant */
            token_use: "access";
            /**
             * Format: uri
             * @description The service's public URL (`issuer` in its discovery document).
             */
            iss: string;
            /** @constant */
            aud: "accounts-service:api";
            iat: number;
            exp: number;
            /** @description Unique per token. */
            jti: string;
            aal: components["schemas"]["AuthenticatorAssuranceLevel"];
            /** @description How the session's factors were proven, in order. */
            amr: components["schemas"]["AuthenticationMethod"][];
            /**
             * @description Present when the account has a verified second factor and this
             *     session has not proven it: every operation but those marked
             *     `x-aal: aal1` answers `403 MFA_REQUIRED`, and sockets are refused.
             * @constant
             */
            next_aal?: "aal2";
        };
        /**
         * @description `totp`: an authenticator app; `passkey`: a passkey (registered with `POST /api/auth/passkeys/registration/verify`).
         * @enum {string}
         */
        FactorType: "totp" | "passkey";
        Factor: {
            /** Format: uuid */
            id: string;
            type: components["schemas"]["FactorType"];
            /** @description The name its owner gave it, if any. */
            friendlyName: string | null;
            /** @enum {string} */
            status: "unverified" | "verified";
            /** Format: date-time */
            createdAt: string;
            /** Format: date-time */
            lastUsedAt: string | null;
        };
        FactorList: {
            factors: components["schemas"]["Factor"][];
        };
        CreateFactorRequest: {
            /**
             * @description The kind of factor to enroll here (passkeys are registered with `POST /api/auth/passkeys/registration/options`).
             * @constant
             */
            type: "totp";
            /** @description A name for the factor, shown in the list. The characters a profile name refuses are refused here too. */
            friendlyName?: string;
        };
        /** @description A new factor, with its secret (answered this once). */
        EnrolledFactor: {
            /** Format: uuid */
            id: string;
            /** @constant */
            type: "totp";
            friendlyName: string | null;
            /** @constant */
            status: "unverified";
            /** Format: date-time */
            createdAt: string;
            lastUsedAt: null;
            totp: {
                /** @description The shared secret, base32 (160 bits). */
                secret: string;
                /** @description An `otpauth://totp/` URI naming the issuer (`MFA_ISSUER`) and the account's address. */
                uri: string;
                /** @description The URI as a QR code, an SVG image in a data URI. */
                qrCode: string;
            };
        };
        RecoveryCodes: {
            codes: components["schemas"]["RecoveryCode"][];
        };
        /** @description A single-use recovery code (three groups of four lower-case letters and digits). */
        RecoveryCode: string;
        MfaVerifyRequest: {
            /** Format: uuid */
            factorId: string;
            code: string;
        } | {
            recoveryCode: string;
        };
        Passkey: {
            /** Format: uuid */
            id: string;
            /** @description The name its owner gave it, if any. */
            friendlyName: string | null;
            /** Format: date-time */
            createdAt: string;
            /** Format: date-time */
            lastUsedAt: string | null;
            /** @description Whether the authenticator said the credential is backed up (synced to other devices). */
            backedUp: boolean;
            /** @description How the browser can reach the authenticator (`internal`, `usb`, `nfc`, `ble`, `hybrid`, ...), as it said at registration. */
            transports: string[];
        };
        /** @description The new passkey; with the account's recovery codes when it is the account's first second factor. */
        RegisteredPasskey: {
            /** Format: uuid */
            id: string;
            friendlyName: string | null;
            /** Format: date-time */
            createdAt: string;
            lastUsedAt: null;
            backedUp: boolean;
            transports: string[];
            /** @description The account's ten recovery codes, shown this once (its first second factor only). */
            recoveryCodes?: components["schemas"]["RecoveryCode"][];
            /**
             * @description The account's first second factor only: the caller's session raised to `aal2` (a new
             *     session, as `POST /api/auth/mfa/verify` answers; the caller's tokens stop working).
             *     Keep its tokens as after a sign-in.
             */
            session?: components["schemas"]["SessionResult"];
        };
        PasskeyList: {
            passkeys: components["schemas"]["Passkey"][];
        };
        /** @description A name for the passkey, shown in the lists. The characters a profile name refuses are refused here too. */
        PasskeyName: string;
        UpdatePasskeyRequest: {
            friendlyName: components["schemas"]["PasskeyName"];
        };
        Base64Url: string;
        /** @description A `PublicKeyCredentialCreationOptionsJSON` (WebAuthn Level 3), for `navigator.credentials.create()`. */
        PasskeyCreationOptions: {
            rp: {
                name: string;
                id: string;
            };
            user: {
                id: components["schemas"]["Base64Url"];
                name: string;
                displayName: string;
            };
            challenge: components["schemas"]["Base64Url"];
            pubKeyCredParams: {
                /** @constant */
                type: "public-key";
                alg: number;
            }[];
            timeout?: number;
            excludeCredentials?: components["schemas"]["PasskeyDescriptor"][];
            authenticatorSelection?: {
                /** @constant */
                residentKey?: "required";
                requireResidentKey?: boolean;
                /** @constant */
                userVerification?: "required";
            };
            attestation?: string;
            extensions?: Record<string, never>;
        };
        PasskeyDescriptor: {
            id: components["schemas"]["Base64Url"];
            /** @constant */
            type: "public-key";
            transports?: string[];
        };
        /** @description A `PublicKeyCredentialRequestOptionsJSON` (WebAuthn Level 3), for `navigator.credentials.get()`. */
        PasskeyRequestOptions: {
            challenge: components["schemas"]["Base64Url"];
            timeout?: number;
            rpId: string;
            allowCredentials: components["schemas"]["PasskeyDescriptor"][];
            /** @constant */
            userVerification: "required";
            extensions?: Record<string, never>;
        };
        PasskeyAuthenticationOptionsRequest: {
            /**
             * Format: email
             * @description The address the person typed, if any. It does not change the answer (every passkey is discoverable, and listing an account's passkeys would tell who has one).
             */
            email?: string;
        };
        PasskeyAuthenticationOptions: {
            /** @description Send it back with the answer (`POST /api/auth/passkeys/authentication/verify`). */
            challengeId: string;
            options: components["schemas"]["PasskeyRequestOptions"];
        };
        /** @description A `RegistrationResponseJSON`, what `@simplewebauthn/browser`'s `startRegistration` (or `PublicKeyCredential.toJSON()`) gives. */
        WebAuthnRegistrationResponse: {
            id: components["schemas"]["Base64Url"];
            rawId: components["schemas"]["Base64Url"];
            /** @constant */
            type: "public-key";
            /** @enum {string} */
            authenticatorAttachment?: "platform" | "cross-platform";
            clientExtensionResults?: Record<string, never>;
            response: {
                clientDataJSON: components["schemas"]["Base64Url"];
                attestationObject: components["schemas"]["Base64Url"];
                authenticatorData?: components["schemas"]["Base64Url"];
                publicKey?: components["schemas"]["Base64Url"];
                publicKeyAlgorithm?: number;
                transports?: string[];
            };
        };
        /** @description An `AuthenticationResponseJSON`, what `@simplewebauthn/browser`'s `startAuthentication` (or `PublicKeyCredential.toJSON()`) gives. */
        WebAuthnAuthenticationResponse: {
            id: components["schemas"]["Base64Url"];
            rawId: components["schemas"]["Base64Url"];
            /** @constant */
            type: "public-key";
            /** @enum {string} */
            authenticatorAttachment?: "platform" | "cross-platform";
            clientExtensionResults?: Record<string, never>;
            response: {
                clientDataJSON: components["schemas"]["Base64Url"];
                authenticatorData: components["schemas"]["Base64Url"];
                signature: components["schemas"]["Base64Url"];
                userHandle?: components["schemas"]["Base64Url"];
            };
        };
        PasskeyRegistrationRequest: {
            response: components["schemas"]["WebAuthnRegistrationResponse"];
            friendlyName?: components["schemas"]["PasskeyName"];
        };
        PasskeyAuthenticationRequest: {
            challengeId: string;
            response: components["schemas"]["WebAuthnAuthenticationResponse"];
        };
        /** @description A live session, as its owner and administrators see it. */
        SessionInfo: {
            /**
             * Format: uuid
             * @description The session's id (`sid` in its access tokens).
             */
            id: string;
            clientType: components["schemas"]["SessionClientType"];
            /**
             * Format: date-time
             * @description When the session opened.
             */
            createdAt: string;
            /**
             * Format: date-time
             * @description When its refresh token was last used (when it opened, until then).
             */
            lastRefreshedAt: string;
            /**
             * Format: date-time
             * @description When it ends unless ended before.
             */
            expiresAt: string;
            /** @description The client's address when it opened; `null` when unknown. */
            ip: string | null;
            /** @description The client's `User-Agent` when it opened (at most 512 characters); `null` when none was sent. */
            userAgent: string | null;
            aal: components["schemas"]["AuthenticatorAssuranceLevel"];
            /** @description Whether this is the session of the caller's access token. */
            current: boolean;
        };
        /**
         * @description The kind of client the session was opened for.
         * @enum {string}
         */
        SessionClientType: "web" | "mobile" | "desktop";
        SessionList: {
            sessions: components["schemas"]["SessionInfo"][];
        };
        /**
         * @description `aal1`: one factor proven (a password, an emailed code or link, an
         *     OAuth provider, an ID token). `aal2`: a second factor proven too.
         * @enum {string}
         */
        AuthenticatorAssuranceLevel: "aal1" | "aal2";
        AuthenticationMethod: {
            /** @enum {string} */
            method: "password" | "otp" | "oauth" | "id_token" | "totp" | "recovery_code" | "passkey";
            /** @description When it was proven (seconds since the epoch). */
            timestamp: number;
        };
        /**
         * @description Stable, machine-readable error codes. Clients branch on these, never
         *     on `message`.
         *
         *     | Code | Status | Meaning |
         *     |---|---|---|
         *     | `INVALID_INPUT` | 400 | The request does not match the contract: a missing, malformed or unknown field, or a parameter out of range. |
         *     | `INVALID_OTP` | 400 | The verification, sign-in or password-reset code, magic-link token or reset token is wrong, expired, already used or unknown (or belongs to a disabled account). |
         *     | `INVALID_CREDENTIALS` | 401 | Sign-in failed: the email address or the password is wrong (the two are not told apart). |
         *     | `EMAIL_NOT_VERIFIED` | 403 | Sign-in with the right password of an account created while verification was not required, whose address is not verified yet. |
         *     | `USER_ALREADY_EXISTS` | 409 | Sign-up without verification for an address that already has an account; OAuth: the account with the provider's address is linked to another identity of that provider. |
         *     | `SIGN_UP_DISABLED` | 403 | Sign-up is refused: the service does not allow sign-ups (`ALLOW_SIGN_UP=false`). |
         *     | `UNAUTHORIZED` | 401 | No access token: the `Authorization` header is missing or is not `Bearer <token>`. |
         *     | `AUTH_UNAUTHORIZED` | 401 | The access token has expired or is not valid; refresh the session and retry. The code InsForge's clients refresh on. |
         *     | `SESSION_REVOKED` | 401 | The session the access token belongs to has ended (logout, refresh-token reuse, a password change, the account's role changed, disabled or deleted); sign in again. |
         *     | `PASSWORD_INCORRECT` | 403 | Changing the password: `currentPassword` is missing or wrong. |
         *     | `FORBIDDEN` | 403 | The caller is authenticated but lacks the role the operation needs. |
         *     | `REAUTHENTICATION_REQUIRED` | 403 | The operation needs a recent proof: the session's last sign-in or second factor is more than 10 minutes old. Sign in again (or prove a factor with `POST /api/auth/mfa/verify`) and retry. |
         *     | `MFA_REQUIRED` | 403 | The account has a second factor and this session has not proven it (`aal1`), or the operation needs `aal2`: complete `POST /api/auth/mfa/verify` first. |
         *     | `CSRF_INVALID` | 403 | A web client's `X-CSRF-Token` header is missing or does not match the session. |
         *     | `REFRESH_TOKEN_INVALID` | 401 | The refresh token is missing, unknown, expired or revoked. |
         *     | `REFRESH_TOKEN_REUSED` | 401 | An already exchanged refresh token was presented again; the whole session has been revoked. |
         *     | `ACCOUNT_DISABLED` | 403 | OAuth sign-in: the account of this identity is disabled. |
         *     | `OAUTH_CODE_INVALID` | 400 | The one-time OAuth code is unknown, used or expired, or the `code_verifier` does not match its challenge. |
         *     | `OAUTH_STATE_INVALID` | 400 | The provider's return carries a state that is missing, unknown, expired or already used. |
         *     | `OAUTH_EMAIL_UNVERIFIED` | 403 | The provider gave no verified email address for an identity that has no account yet. |
         *     | `OAUTH_ACCOUNT_UNVERIFIED` | 409 | An account with the provider's address exists but its address is not verified, so it is not linked. |
         *     | `OAUTH_LINK_REQUIRED` | 409 | An account with the provider's address exists but is not linked by address: an administrator's account, a provider with `OAUTH_<NAME>_LINK_BY_EMAIL=false`, or an identity its owner unlinked. Sign in to the account and link the provider from the session (`POST /api/auth/identities`). |
         *     | `IDENTITY_ALREADY_LINKED` | 409 | Linking from a session: the provider identity is linked to another account, or the account already has an identity of this provider (unlink it first). |
         *     | `LAST_SIGN_IN_METHOD` | 409 | Unlinking the identity would leave the account no way to sign in (no password, no other identity of a configured provider, no passkey); nothing was changed. |
         *     | `OAUTH_PROVIDER_ERROR` | 302 | Only in a callback's `?error=`: the provider answered with an error, or its answer did not pass the checks. |
         *     | `ACCESS_DENIED` | 302 | Only in a callback's `?error=`: the person refused at the provider. |
         *     | `ID_TOKEN_INVALID` | 401 | The ID token's signature, issuer, audience, expiry or nonce is wrong, or it was already used to sign in. |
         *     | `NOT_FOUND` | 404 | No route or resource matches the request. |
         *     | `CHANNEL_ALREADY_EXISTS` | 409 | A realtime channel with this pattern exists already. |
         *     | `PASSKEY_REGISTRATION_INVALID` | 400 | The answer of `navigator.credentials.create()` does not verify: no live challenge of this session, another origin or RP ID, no user verification, or a credential registered already. Ask for new options. |
         *     | `PASSKEY_REFUSED` | 401 | The passkey assertion does not sign in or raise the session: the challenge is unknown, used, expired or another session's, the passkey is unknown or another account's, or the signature, origin, RP ID, user verification or counter is wrong. |
         *     | `FACTOR_STATE` | 409 | The account's factors do not allow the change: at most 10 factors, and recovery codes need a verified factor. |
         *     | `SIGNING_KEY_STATE` | 409 | The signing key's state does not allow the change: the current key cannot be revoked, and there is at most one standby key. |
         *     | `LAST_ADMIN` | 409 | Deleting, demoting or disabling accounts would leave no enabled administrator; nothing was changed. |
         *     | `METHOD_NOT_ALLOWED` | 405 | The path exists but does not accept this HTTP method. |
         *     | `PAYLOAD_TOO_LARGE` | 413 | The request body exceeds the size limit. |
         *     | `UNSUPPORTED_MEDIA_TYPE` | 415 | The request body is not `application/json`. |
         *     | `RATE_LIMITED` | 429 | Too many requests (from this client, or failed sign-ins for this account); wait for the seconds given in `Retry-After`. |
         *     | `MODEL_NOT_ALLOWED` | 400 | The requested embedding model is not on the service's allow-list. |
         *     | `PROVIDER_AUTH_FAILED` | 502 | The upstream provider rejected the service's credentials. |
         *     | `PROVIDER_UNAVAILABLE` | 502 | The upstream provider failed or could not be reached. |
         *     | `PROVIDER_TIMEOUT` | 504 | The upstream provider did not answer in time. |
         *     | `INTERNAL_ERROR` | 500 | An unexpected failure; no details are revealed. |
         *     | `SERVICE_UNAVAILABLE` | 503 | A dependency is not available: the database, the embedding provider (paused after repeated failures) or the embeddings configuration. |
         *     | `REQUEST_TIMEOUT` | 408 | The request's headers or body did not arrive in time; the connection is closed. Sent by the HTTP layer, before any operation. |
         *     | `HEADERS_TOO_LARGE` | 431 | The request's headers exceed 16 KiB or 1,000 lines; the connection is closed. Sent by the HTTP layer, before any operation. |
         * @enum {string}
         */
        ErrorCode: "INVALID_INPUT" | "INVALID_OTP" | "INVALID_CREDENTIALS" | "EMAIL_NOT_VERIFIED" | "USER_ALREADY_EXISTS" | "SIGN_UP_DISABLED" | "UNAUTHORIZED" | "AUTH_UNAUTHORIZED" | "SESSION_REVOKED" | "PASSWORD_INCORRECT" | "FORBIDDEN" | "MFA_REQUIRED" | "REAUTHENTICATION_REQUIRED" | "CSRF_INVALID" | "REFRESH_TOKEN_INVALID" | "REFRESH_TOKEN_REUSED" | "ACCOUNT_DISABLED" | "OAUTH_CODE_INVALID" | "OAUTH_STATE_INVALID" | "OAUTH_EMAIL_UNVERIFIED" | "OAUTH_ACCOUNT_UNVERIFIED" | "OAUTH_LINK_REQUIRED" | "IDENTITY_ALREADY_LINKED" | "LAST_SIGN_IN_METHOD" | "OAUTH_PROVIDER_ERROR" | "ACCESS_DENIED" | "ID_TOKEN_INVALID" | "NOT_FOUND" | "CHANNEL_ALREADY_EXISTS" | "LAST_ADMIN" | "SIGNING_KEY_STATE" | "FACTOR_STATE" | "PASSKEY_REGISTRATION_INVALID" | "PASSKEY_REFUSED" | "METHOD_NOT_ALLOWED" | "PAYLOAD_TOO_LARGE" | "UNSUPPORTED_MEDIA_TYPE" | "RATE_LIMITED" | "MODEL_NOT_ALLOWED" | "PROVIDER_AUTH_FAILED" | "PROVIDER_UNAVAILABLE" | "PROVIDER_TIMEOUT" | "INTERNAL_ERROR" | "SERVICE_UNAVAILABLE" | "REQUEST_TIMEOUT" | "HEADERS_TOO_LARGE";
        /**
         * @description The body of every error response.
         * @example {
         *       "error": "INVALID_INPUT",
         *       "message": "body.email must match format \"email\"",
         *       "statusCode": 400
         *     }
         */
        Error: {
            error: components["schemas"]["ErrorCode"];
            /** @description A human-readable explanation in English. Its wording may change; do not parse it. */
            message: string;
            /** @description The HTTP status code of the response, repeated. */
            statusCode: number;
        };
        /**
         * @description A provider's name, as configured in `OAUTH_PROVIDERS` (lower case).
         *     `custom` and `exchange` are reserved (they are path segments of
         *     their own).
         */
        OAuthProviderName: string;
        OAuthAuthorizationUrl: {
            /**
             * Format: uri
             * @description The provider's authorization URL, with the service's client id, callback, state, nonce and PKCE challenge.
             */
            authUrl: string;
        };
        Identity: {
            /**
             * Format: uuid
             * @description The identity's id in this service.
             */
            id: string;
            /** @description The provider's name (as in `OAUTH_PROVIDERS`). */
            provider: string;
            /** @description The provider's own id for the person (an OpenID Connect `sub`, GitHub's user id). */
            subject: string;
            /**
             * Format: email
             * @description The address the provider vouched for (a verified address) when
             *     the identity was linked; `null` when it vouched for none, or the
             *     identity was linked before addresses were kept. Not updated
             *     afterwards.
             */
            email: string | null;
            /**
             * Format: date-time
             * @description When the identity was linked.
             */
            linkedAt: string;
        };
        IdentityList: {
            /** @description Oldest first. */
            identities: components["schemas"]["Identity"][];
        };
        IdentityLinkRequest: {
            provider: components["schemas"]["OAuthProviderName"];
            /**
             * Format: uri
             * @description Where the browser returns to the app once the provider has
             *     answered, with `linked=<provider>` or `error=<code>` set in its
             *     query (values of those two already there are replaced). Must
             *     match `AUTH_REDIRECT_ALLOWLIST` (see `RedirectTo`) and have no
             *     fragment (`#`).
             */
            redirect_uri: string;
        };
        OAuthCodeExchangeRequest: {
            /** @description The `insforge_code` the callback added to the app's `redirect_uri`. */
            code: string;
            /** @description The PKCE verifier whose S256 challenge started the sign-in. */
            code_verifier: string;
        };
        IdTokenSignInRequest: {
            provider: components["schemas"]["OAuthProviderName"];
            /** @description The ID token (a signed JWT, in its compact form) the provider issued to the app. */
            token: string;
            /**
             * @description The nonce the app asked the provider to put in the token, as the
             *     token carries it (compared exactly). When sent, the token must
             *     carry this nonce; when the token carries a nonce, it must be sent
             *     (a token issued for a sign-in that asked for a nonce is refused
             *     without it).
             */
            nonce?: string;
        };
        Health: {
            /**
             * @description Always `ok` in a successful answer.
             * @constant
             */
            status: "ok";
            /**
             * @description Always `up` in a successful answer; a database that does not answer produces `503` instead.
             * @constant
             */
            database: "up";
            /**
             * @description Present only with `DATABASE_READ_URL`: the streaming replica that
             *     serves the reads which tolerate a little lag (the user directory,
             *     public profiles, the audit log). `replica`: it serves them;
             *     `lagging`: its replay lag exceeds `DATABASE_READ_MAX_LAG_MS`, so
             *     they go to the primary; `down`: it does not answer, so they go to
             *     the primary. It does not change the status.
             */
            replica?: {
                /** @enum {string} */
                state: "replica" | "lagging" | "down";
                /** @description The replay lag at the last measurement (every 250 ms); `null` while the replica does not answer. */
                lagMs: number | null;
                /** @description `DATABASE_READ_MAX_LAG_MS`. */
                maxLagMs: number;
            };
            /**
             * @description Whether Redis (`REDIS_URL`: shared rate-limit counters) answers a
             *     PING within a second; `not configured` without `REDIS_URL`. While it
             *     is `down`, each instance counts its rate limits by itself. It does
             *     not change the status.
             * @enum {string}
             */
            redis: "up" | "down" | "not configured";
            /**
             * @description The circuit breaker in front of the embeddings provider: `closed`
             *     (calls go through), `open` (calls are refused with `503` after
             *     repeated failures), `half-open` (one trial call decides), or
             *     `not configured` without a provider (`EMBEDDINGS_BASE_URL`). It
             *     does not change the status.
             * @enum {string}
             */
            embeddingsBreaker: "closed" | "open" | "half-open" | "not configured";
            /** @description The version of the running service. */
            version: string;
            /** @description Seconds since the process started. */
            uptimeSeconds: number;
        };
        /**
         * @description Public profile of a user: `name` and `avatar_url` (always present,
         *     `null` when not set) and the free-form fields the user set with
         *     `PATCH /api/auth/profiles/current`: at most 50 fields in all, within
         *     4096 bytes of JSON, each named by 1 to 64 letters, digits and `_`,
         *     each a string, a number or a boolean.
         */
        Profile: {
            /** @description Display name; `null` when none was given. */
            name: string | null;
            /**
             * Format: uri
             * @description Address (`http://` or `https://`) of the user's avatar image; `null` when there is none.
             */
            avatar_url: string | null;
        } & {
            [key: string]: string | number | boolean;
        };
        /** @description A user account. */
        User: {
            /**
             * Format: uuid
             * @description Identifier of the user.
             */
            id: string;
            /**
             * Format: email
             * @description Email address of the user, in lower case.
             */
            email: string;
            profile: components["schemas"]["Profile"];
            /** @description Free-form object for application data about the user. Empty when nothing was stored. */
            metadata: {
                [key: string]: unknown;
            };
            /** @description Whether the email address has been verified. */
            emailVerified: boolean;
            /**
             * @description The ways the account has signed in or may sign in: `email` (by
             *     its address: a password or an emailed code) and the name of each
             *     OAuth provider linked to it (`google`, `github`, a custom
             *     provider's name). More values may appear later, so clients should
             *     tolerate unknown ones.
             * @example [
             *       "email"
             *     ]
             */
            providers: string[];
            /**
             * Format: date-time
             * @description When the account was created (RFC 3339, UTC).
             */
            createdAt: string;
            /**
             * Format: date-time
             * @description When the account was last changed (RFC 3339, UTC).
             */
            updatedAt: string;
        };
        Pagination: {
            /** @description The number of records skipped, as applied. */
            offset: number;
            /** @description The maximum number of records in this page, as applied. */
            limit: number;
            /** @description The exact number of records that match the search, across all pages. */
            total: number;
        };
        UserList: {
            /** @description The page's accounts, each with its role and whether it is disabled. */
            data: components["schemas"]["AdminUser"][];
            pagination: components["schemas"]["Pagination"];
        };
        /**
         * @description The answer to every operation that creates or refreshes a session.
         *     Web clients get `csrfToken` and `refreshToken: null` (the refresh token
         *     is in the cookie); mobile and desktop clients get `refreshToken` and
         *     `csrfToken: null`.
         */
        SessionResult: {
            user: components["schemas"]["User"];
            /**
             * @description A JWT access token, valid for 15 minutes. Send it as `Authorization: Bearer <accessToken>`.
             *     Its claims are `AccessTokenClaims`; other services verify it with `GET /.well-known/jwks.json`.
             */
            accessToken: string;
            /** @description Web clients only; send it in the `X-CSRF-Token` header when refreshing or logging out. `null` for mobile and desktop clients. */
            csrfToken: string | null;
            /** @description Mobile and desktop clients only; an opaque token valid for 30 days that rotates on every refresh. `null` for web clients, whose refresh token is in the HttpOnly cookie. */
            refreshToken: string | null;
            /**
             * Format: uri
             * @description Where the client should go next. The `redirectTo` of the request when it sent an allowed one (sign-up without verification, verification), else the service's configured redirect URL; absent when neither exists.
             */
            redirectTo?: string;
            /**
             * @description Mobile and desktop clients, when a session opens (not on refresh):
             *     the signal that this device has signed in to the account, valid a
             *     year. Keep it and send it in the `X-Device-Token` header of later
             *     sign-ins, `send-otp` and `send-reset-password` requests for this
             *     account's address: the device then has its own email budget and
             *     its own sign-in back-off. Web clients get it as the HttpOnly
             *     `device_id` cookie instead.
             */
            deviceToken?: string;
            /**
             * @description `POST /api/auth/mfa/verify` only, when it verified the account's
             *     first factor: the ten single-use recovery codes, shown this once.
             */
            recoveryCodes?: components["schemas"]["RecoveryCode"][];
        };
        SignUpRequest: {
            /**
             * Format: email
             * @description Email address for the account.
             */
            email: string;
            /** @description Password for the account, 8 to 256 characters. */
            password: string;
            /**
             * @description Display name, stored as `profile.name`. Control characters (U+0000-U+001F, U+007F-U+009F), line and
             *     paragraph separators, bidirectional controls (U+061C, U+200E,
             *     U+200F, U+202A-U+202E, U+2066-U+2069) and invisible format
             *     characters (U+00AD, U+180E, U+200B, U+2060-U+206F, U+FEFF,
             *     U+FFF9-U+FFFB) are refused with `400 INVALID_INPUT`; the zero-width
             *     joiner and non-joiner (emoji sequences, Persian and Indic scripts)
             *     are accepted.
             */
            name?: string;
            redirectTo?: components["schemas"]["RedirectTo"];
        };
        /**
         * Format: uri
         * @description Where the verification link's page sends the person once the address
         *     is confirmed (the emailed link carries it as `redirect_to`, and
         *     `POST /api/auth/email/verify` returns it as `redirectTo`). Accepted
         *     only when it matches the service's allow-list,
         *     `AUTH_REDIRECT_ALLOWLIST`: an entry that is an origin (scheme, host
         *     and port) accepts any URL on that origin, an entry with a path accepts
         *     URLs that start with it. Without the list, the one entry is the origin
         *     of the configured redirect URL (`AUTH_REDIRECT_URL`). URLs with user
         *     information, or with an encoded `/`, `\` or `.` in the path (`%2F`,
         *     `%5C`, `%2E`), are refused; any other value, or any value when neither is
         *     configured, is refused with `400 INVALID_INPUT`, so the service never
         *     redirects to an address a caller chose. OAuth's `redirect_uri` follows
         *     the same rule. Without it the page goes to
         *     the configured redirect URL, as before.
         * @example https://app.example.com/welcome
         */
        RedirectTo: string;
        SignUpAccepted: {
            /**
             * @description Always `true`; the client continues with email verification.
             * @constant
             */
            requireEmailVerification: true;
            /** @description Always `null`; no session exists until the address is verified. */
            accessToken: null;
            signUpBinding?: components["schemas"]["SignUpBinding"];
        };
        /**
         * @description The binding of this sign-up (256 random bits, base64url). Send it
         *     back with the verification (`signUpBinding` in the verify body, or
         *     the `sign_up_binding` cookie web clients got) to prove that the
         *     password's chooser holds the mailbox; without it the password is
         *     unproven (see `POST /api/auth/users`).
         */
        SignUpBinding: string;
        SignInRequest: {
            /** Format: email */
            email: string;
            password: string;
            /**
             * @description Optional; `password` is the only value for a password sign-in (the default when absent).
             * @constant
             */
            method?: "password";
        };
        /** @description Sign-in with the 6-digit code from `POST /api/auth/email/send-otp`. */
        OtpSignInRequest: {
            /** @constant */
            method: "otp";
            /** Format: email */
            email: string;
            /** @description The 6-digit code from the email. */
            otp: string;
            /**
             * @description Display name (`profile.name`) of the account, used only when the
             *     code creates it. Control characters (U+0000-U+001F, U+007F-U+009F), line and
             *     paragraph separators, bidirectional controls (U+061C, U+200E,
             *     U+200F, U+202A-U+202E, U+2066-U+2069) and invisible format
             *     characters (U+00AD, U+180E, U+200B, U+2060-U+206F, U+FEFF,
             *     U+FFF9-U+FFFB) are refused with `400 INVALID_INPUT`; the zero-width
             *     joiner and non-joiner (emoji sequences, Persian and Indic scripts)
             *     are accepted.
             */
            name?: string;
        };
        /**
         * @description A password sign-in (`SignInRequest`: `method` absent or `password`)
         *     or an email-code sign-in (`OtpSignInRequest`: `method: otp`).
         */
        CreateSessionRequest: components["schemas"]["OtpSignInRequest"] | components["schemas"]["SignInRequest"];
        SendOtpRequest: {
            /**
             * Format: email
             * @description The address to send the sign-in code to.
             */
            email: string;
        };
        SendResetPasswordRequest: {
            /**
             * Format: email
             * @description The address of the account whose password is to be reset.
             */
            email: string;
            redirectTo?: components["schemas"]["RedirectTo"];
        };
        CodeEmailAccepted: {
            /**
             * @description Always `true`, whether or not an email was sent.
             * @constant
             */
            success: true;
            /** @description A fixed message that is the same whether or not an email was sent. */
            message: string;
        };
        ExchangeResetPasswordTokenRequest: {
            /**
             * Format: email
             * @description The address the reset email was sent to.
             */
            email: string;
            /** @description The 6-digit code from the reset email. */
            code: string;
        };
        ResetPasswordToken: {
            /** @description The reset token, for `POST /api/auth/email/reset-password` (as `otp`). Usable once. */
            token: string;
            /**
             * Format: date-time
             * @description When the reset token stops working (RFC 3339, UTC).
             */
            expiresAt: string;
        };
        ResetPasswordRequest: {
            /** @description The new password, 8 to 256 characters. */
            newPassword: string;
            /**
             * @description The reset token: the `token` of the emailed link, or the `token`
             *     returned by `POST /api/auth/email/exchange-reset-password-token`.
             */
            otp: string;
        };
        PasswordResetDone: {
            /** @description A fixed message; no session is opened. */
            message: string;
        };
        ChangePasswordRequest: {
            /** @description The account's password; required when it has one. */
            currentPassword?: string;
            /** @description The new password, 8 to 256 characters. */
            newPassword: string;
        };
        /**
         * @description Either the 6-digit code from the verification email together with
         *     the address it was sent to, or the 64-character hexadecimal token of
         *     the emailed link on its own.
         */
        VerifyEmailRequest: components["schemas"]["VerifyEmailWithCode"] | components["schemas"]["VerifyEmailWithLink"];
        /** With a code */
        VerifyEmailWithCode: {
            /**
             * @description The 6-digit code from the verification email.
             * @example 123456
             */
            otp: string;
            /**
             * Format: email
             * @description The address being verified.
             */
            email: string;
            redirectTo?: components["schemas"]["RedirectTo"];
            signUpBinding?: components["schemas"]["SignUpBinding"];
        };
        /** With a link token */
        VerifyEmailWithLink: {
            /** @description The 64-character hexadecimal token of the emailed link (`?token=`), sent without `email`. */
            otp: string;
            redirectTo?: components["schemas"]["RedirectTo"];
            signUpBinding?: components["schemas"]["SignUpBinding"];
        };
        SendVerificationRequest: {
            /**
             * Format: email
             * @description The address to send the verification email to.
             */
            email: string;
            redirectTo?: components["schemas"]["RedirectTo"];
        };
        VerificationEmailAccepted: {
            /**
             * @description Always `true`, whether or not an email was sent.
             * @constant
             */
            success: true;
            /** @description A fixed message that is the same whether or not an email was sent. */
            message: string;
        };
        /**
         * @description Body of refresh and logout. Mobile and desktop clients send the
         *     refresh token as `refreshToken` or as `refresh_token` (the same token
         *     under either name; when both are sent they must be equal, or the
         *     answer is `400 INVALID_INPUT`); web clients send no body (an empty
         *     one, or `{}`), because their token is in the cookie, and any body
         *     token is ignored.
         */
        RefreshRequest: {
            /** @description The refresh token received with the session (mobile and desktop clients). */
            refreshToken?: string;
            /** @description The same as `refreshToken`, under the name some clients send. */
            refresh_token?: string;
        };
        CurrentSession: {
            user: components["schemas"]["User"];
            aal: components["schemas"]["AuthenticatorAssuranceLevel"];
            /**
             * @description `aal2` when the account has a verified second factor that this
             *     session has not proven: send a code to `POST /api/auth/mfa/verify`
             *     (`GET /api/auth/factors` lists the factors). `null` otherwise.
             * @enum {string|null}
             */
            nextLevel: "aal2" | null;
        };
        /**
         * @description The name of a profile field: 1 to 64 letters, digits and `_`,
         *     starting with a letter. Names of account fields are refused (those
         *     listed here, and the same names in any case, with or without `_`).
         */
        ProfileFieldName: string;
        /**
         * @description Fields to merge into the profile; `null` removes a field. After the
         *     merge the profile holds at most 50 fields and 4096 bytes of JSON.
         */
        ProfileUpdate: {
            /**
             * @description Display name; `null` removes it. Control characters (U+0000-U+001F, U+007F-U+009F), line and
             *     paragraph separators, bidirectional controls (U+061C, U+200E,
             *     U+200F, U+202A-U+202E, U+2066-U+2069) and invisible format
             *     characters (U+00AD, U+180E, U+200B, U+2060-U+206F, U+FEFF,
             *     U+FFF9-U+FFFB) are refused with `400 INVALID_INPUT`; the zero-width
             *     joiner and non-joiner (emoji sequences, Persian and Indic scripts)
             *     are accepted.
             */
            name?: string | null;
            /**
             * Format: uri
             * @description An `http://` or `https://` URL of the avatar image; `null` removes it.
             */
            avatar_url?: string | null;
        } & {
            [key: string]: string | number | boolean | null;
        };
        UpdateProfileRequest: {
            profile: components["schemas"]["ProfileUpdate"];
        };
        /** @description The public part of an account. */
        UserProfile: {
            /**
             * Format: uuid
             * @description Identifier of the user.
             */
            id: string;
            profile: components["schemas"]["Profile"];
        };
        /** @description A user account as administrators see it, with its role and whether it is disabled. */
        AdminUser: {
            /**
             * Format: uuid
             * @description Identifier of the user.
             */
            id: string;
            /**
             * Format: email
             * @description Email address of the user, in lower case.
             */
            email: string;
            profile: components["schemas"]["Profile"];
            /** @description Free-form object for application data about the user. Empty when nothing was stored. */
            metadata: {
                [key: string]: unknown;
            };
            /** @description Whether the email address has been verified. */
            emailVerified: boolean;
            /** @description The ways the user can sign in (`email` for a password or an emailed code); clients should tolerate unknown values. */
            providers: string[];
            /**
             * Format: date-time
             * @description When the account was created (RFC 3339, UTC).
             */
            createdAt: string;
            /**
             * Format: date-time
             * @description When the account was last changed (RFC 3339, UTC).
             */
            updatedAt: string;
            /**
             * @description `admin` may use the administrators' operations.
             * @enum {string}
             */
            role: "user" | "admin";
            /** @description Whether an administrator disabled the account (it cannot sign in or keep a session). */
            disabled: boolean;
            /**
             * Format: date-time
             * @description When the account was disabled; `null` while it is enabled.
             */
            disabledAt: string | null;
        };
        UpdateUserRequest: {
            /**
             * @description The account's new role.
             * @enum {string}
             */
            role?: "user" | "admin";
            /** @description `true` disables the account and ends its sessions; `false` enables it again. */
            disabled?: boolean;
        };
        DeleteUsersRequest: {
            /** @description The ids of the accounts to delete (1 to 100; an id given twice counts once). */
            userIds: string[];
        };
        DeleteUsersResult: {
            /** @description A sentence saying how many accounts were deleted. */
            message: string;
            /** @description The number of accounts this call deleted (ids without an account are not counted). */
            deletedCount: number;
        };
        /**
         * @description The service's auth configuration as a sign-in page needs it (the shape
         *     of InsForge's `getPublicAuthConfig`, plus the password's maximum
         *     length and the addresses links lead to).
         */
        PublicAuthConfig: {
            /** @description The built-in provider names the service is configured for (`OAUTH_PROVIDERS`); sign in with `GET /api/auth/oauth/{provider}`. */
            oAuthProviders: ("google" | "github" | "discord" | "linkedin" | "facebook" | "instagram" | "tiktok" | "apple" | "x" | "spotify" | "microsoft")[];
            /** @description The other configured providers (OpenID Connect issuers), by name; sign in with `GET /api/auth/oauth/custom/{provider}`. */
            customOAuthProviders: string[];
            /** @description Whether an address must be verified before its account signs in (`REQUIRE_EMAIL_VERIFICATION`). */
            requireEmailVerification: boolean;
            /** @description The fewest characters a password may have (sign-up, password change and reset). */
            passwordMinLength: number;
            /** @description The most characters a password may have. */
            passwordMaxLength: number;
            /** @description Whether a password must contain a digit (never; only its length is checked). */
            requireNumber: boolean;
            /** @description Whether a password must contain a lower-case letter (never). */
            requireLowercase: boolean;
            /** @description Whether a password must contain an upper-case letter (never). */
            requireUppercase: boolean;
            /** @description Whether a password must contain a character other than a letter or digit (never). */
            requireSpecialChar: boolean;
            /**
             * @description How a verification email is meant to be used. Always `code`: every
             *     verification email carries a 6-digit code to type in the app, and
             *     also a link that verifies on its own.
             * @enum {string}
             */
            verifyEmailMethod: "code" | "link";
            /**
             * @description How a password-reset email is meant to be used. Always `code`: the
             *     email carries a 6-digit code (exchanged for a reset token in the
             *     app), and also a link to a page where the new password is typed.
             * @enum {string}
             */
            resetPasswordMethod: "code" | "link";
            /** @description Whether new accounts cannot be created (`ALLOW_SIGN_UP=false`). */
            disableSignup: boolean;
            /**
             * Format: uri
             * @description Where the service's pages send a person after verifying an address (`AUTH_REDIRECT_URL`); without `AUTH_REDIRECT_ALLOWLIST`, the origin that `redirectTo` values must be on. `null` when none is configured.
             */
            redirectUrl: string | null;
            /**
             * Format: uri
             * @description The page that verification links open (`EMAIL_VERIFY_URL`).
             */
            verifyEmailUrl: string;
            /**
             * Format: uri
             * @description The page that password-reset links open (`RESET_PASSWORD_URL`).
             */
            resetPasswordUrl: string;
            /** @description The second factors an account may add (`totp`: `POST /api/auth/factors`; `passkey`: `POST /api/auth/passkeys/registration/options`, listed unless the relying party's id is an IP address, which browsers refuse). */
            mfaFactorTypes: components["schemas"]["FactorType"][];
            /** @description Whether administrator operations need an `aal2` session (`MFA_REQUIRED_FOR_ADMINS`). */
            mfaRequiredForAdmins: boolean;
        };
        EmbeddingsRequest: {
            /** @description Identifier of the embedding model; must be one the service allows. */
            model: string;
            /**
             * @description The text to embed, or an array of up to 2048 texts. Each text is at
             *     most 8192 tokens and the request at most 300,000 tokens in all,
             *     counted with a real tokenizer for the model. Empty strings are
             *     rejected.
             */
            input: string | string[];
            /**
             * @description `float` returns arrays of numbers; `base64` returns base64 strings of little-endian float32 values.
             * @default float
             * @enum {string}
             */
            encoding_format?: "float" | "base64";
            /**
             * @description Number of dimensions of the output vectors, at most the model's
             *     own size. `0` means the model's own size, as when the field is left
             *     out. A value from 1 up is supported only by models that can
             *     shorten their vectors; for another model it is rejected with
             *     `400 INVALID_INPUT`.
             */
            dimensions?: number;
            /**
             * @description An identifier of the end user on whose behalf the call is made
             *     (OpenAI's field of the same name). Recorded with the usage. The
             *     provider gets it only when the service is configured to
             *     (`EMBEDDINGS_FORWARD_USER`), and then as a keyed pseudonym of the
             *     caller's account and this value, never the value itself.
             */
            user?: string;
        };
        EmbeddingItem: {
            /** @constant */
            object: "embedding";
            /** @description The vector, in the form chosen by `encoding_format`. */
            embedding: number[] | string;
            /** @description Position of the corresponding input (0 for a single string). */
            index: number;
        };
        EmbeddingUsage: {
            promptTokens: number;
            /** @description Always 0 for embeddings. */
            completionTokens: number;
            totalTokens: number;
        };
        EmbeddingMetadata: {
            /** @description The model that produced the embeddings. */
            model: string;
            usage: components["schemas"]["EmbeddingUsage"];
        };
        /** @description The usage in OpenAI's form (the same figures as `metadata.usage`). */
        OpenAIEmbeddingUsage: {
            prompt_tokens: number;
            total_tokens: number;
        };
        /**
         * @description The vectors, with `object`, `data` and `metadata` as InsForge
         *     answers, and OpenAI's top-level `model` and `usage`, so that OpenAI's
         *     client libraries read it unchanged.
         */
        EmbeddingsResponse: {
            /** @constant */
            object: "list";
            data: components["schemas"]["EmbeddingItem"][];
            /** @description The model that produced the embeddings (as `metadata.model`). */
            model: string;
            usage: components["schemas"]["OpenAIEmbeddingUsage"];
            metadata: components["schemas"]["EmbeddingMetadata"];
        };
        /** @description One row-level-security policy, as listed in `pg_policies`. */
        Policy: {
            policyName: string;
            /** @description Name of the table in the `realtime` schema, without the schema. */
            tableName: string;
            /**
             * @description The command the policy applies to.
             * @enum {string}
             */
            command: "SELECT" | "INSERT" | "UPDATE" | "DELETE" | "ALL";
            /** @description Database roles the policy applies to. */
            roles: string[];
            /** @description The `USING` expression, which decides which existing rows are visible; `null` when the policy has none. */
            using: string | null;
            /** @description The `WITH CHECK` expression, which new rows must satisfy; `null` when the policy has none. */
            withCheck: string | null;
        };
        PolicyList: {
            policies: components["schemas"]["Policy"][];
        };
        RealtimePermissions: {
            /** @description Policies on `realtime.channels`, which govern subscribing to channels. */
            subscribe: components["schemas"]["PolicyList"];
            /** @description Policies on `realtime.messages`, which govern publishing messages. */
            publish: components["schemas"]["PolicyList"];
        };
        /**
         * @description A channel's name, such as `order:123` or `chat:room-1`.
         * @example order:123
         */
        ChannelName: string;
        /**
         * @description A channel name in which `%` matches any run of characters and `_`
         *     any one character (SQL `LIKE`).
         * @example order:%
         */
        ChannelPattern: string;
        Channel: {
            /** Format: uuid */
            id: string;
            pattern: components["schemas"]["ChannelPattern"];
            description: string | null;
            /** @description Whether the channel may be subscribed to and published on (under the default policies). */
            enabled: boolean;
            /** Format: date-time */
            createdAt: string;
            /** Format: date-time */
            updatedAt: string;
        };
        ChannelList: {
            channels: components["schemas"]["Channel"][];
        };
        CreateChannelRequest: {
            pattern: components["schemas"]["ChannelPattern"];
            description?: string | null;
            /** @default true */
            enabled?: boolean;
        };
        UpdateChannelRequest: {
            description?: string | null;
            enabled?: boolean;
        };
        PublishMessageRequest: {
            channel: components["schemas"]["ChannelName"];
            /**
             * @description The socket.io event name subscribers receive: 1 to 64 characters,
             *     not starting with `realtime:` or `presence:`, and none of
             *     socket.io's reserved names.
             */
            event: string;
            /**
             * @description Any JSON object without a `meta` property (the service adds it).
             *     Objects and arrays in it nest at most 32 levels deep counted from
             *     the request body: the body is level 1, `payload` level 2. No
             *     object in it, at any depth, may have a key named `__proto__`,
             *     `constructor` or `prototype` (`400 INVALID_INPUT`, naming the
             *     key's path), as on the socket.
             */
            payload: {
                [key: string]: components["schemas"]["RealtimePayloadValue"];
            };
            /**
             * Format: uuid
             * @description Who the message is from; the caller by default. The publish policies decide whether another value is accepted.
             */
            senderId?: string;
        };
        /**
         * @description Any JSON value in a published payload: its objects, at any depth,
         *     have no key named `__proto__`, `constructor` or `prototype`.
         */
        RealtimePayloadValue: {
            [key: string]: components["schemas"]["RealtimePayloadValue"];
        };
        RealtimeMessage: {
            /** Format: uuid */
            messageId: string;
            channel: components["schemas"]["ChannelName"];
            event: string;
            payload: {
                [key: string]: unknown;
            };
            /** @enum {string} */
            senderType: "user" | "system";
            /** Format: uuid */
            senderId: string | null;
            /**
             * Format: date-time
             * @description When the message was accepted (the `meta.timestamp` subscribers received).
             */
            timestamp: string;
        };
        RealtimeMessageList: {
            messages: components["schemas"]["RealtimeMessage"][];
            /** @description Whether more messages follow the last one returned. */
            hasMore: boolean;
        };
    };
    responses: {
        /**
         * @description `INVALID_INPUT`: the request does not match the contract (a missing or
         *     malformed field, an unknown property, an unknown or repeated query
         *     parameter, a parameter out of range); the message names the field.
         *     The embeddings operation also answers `MODEL_NOT_ALLOWED` with this
         *     status when the model is not on the allow-list.
         */
        BadRequest: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                "application/json": components["schemas"]["Error"];
            };
        };
        /**
         * @description `UNAUTHORIZED`: no access token (no `Authorization: Bearer <token>`
         *     header). `AUTH_UNAUTHORIZED`: the access token has expired or is not
         *     valid; refresh the session and retry. `SESSION_REVOKED`: the session of the access token has ended
         *     (logout, refresh-token reuse, a password change, an administrator
         *     changing the account's role, disabling or deleting it); sign in again.
         */
        Unauthorized: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                "application/json": components["schemas"]["Error"];
            };
        };
        /** @description The provider's sign-in page to send the browser to. */
        OAuthAuthorizationUrl: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "authUrl": "https://accounts.google.com/o/oauth2/v2/auth?client_id=1234.apps.googleusercontent.com&redirect_uri=https%3A%2F%2Faccounts.example.com%2Fapi%2Fauth%2Foauth%2Fgoogle%2Fcallback&response_type=code&scope=openid+email+profile&state=3Pq1mZr0k9oX4cKQd2x0b1Wm7LJQy0hV8aP9VYqW6cQ&nonce=uJ3k0h2d8sQpYw6eX1mZ4rT7vB9nC5aL2fG0jH8kD1s&code_challenge=Ys0rJ7gC4nH1mW3kP8tQ2xV6bZ9aD5fL0eR4uI7oN2c&code_challenge_method=S256"
                 *     }
                 */
                "application/json": components["schemas"]["OAuthAuthorizationUrl"];
            };
        };
        /** @description `NOT_FOUND`: the service has no provider of this name (see `GET /api/auth/public-config` for the ones it has). */
        OAuthProviderNotFound: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "error": "NOT_FOUND",
                 *       "message": "No OAuth provider named \"discord\" is configured",
                 *       "statusCode": 404
                 *     }
                 */
                "application/json": components["schemas"]["Error"];
            };
        };
        /** @description `PROVIDER_UNAVAILABLE`: the provider's discovery document or keys could not be fetched. */
        OAuthProviderUnavailable: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "error": "PROVIDER_UNAVAILABLE",
                 *       "message": "The OAuth provider \"google\" could not be reached",
                 *       "statusCode": 502
                 *     }
                 */
                "application/json": components["schemas"]["Error"];
            };
        };
        /**
         * @description `OAUTH_EMAIL_UNVERIFIED`: the provider gave no verified email address
         *     and this identity is not linked to an account yet.
         *     `SIGN_UP_DISABLED`: the identity has no account and the service does
         *     not allow sign-ups. `ACCOUNT_DISABLED`: the account is disabled.
         */
        OAuthAccountRefused: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "error": "OAUTH_EMAIL_UNVERIFIED",
                 *       "message": "The provider did not confirm an email address for this account",
                 *       "statusCode": 403
                 *     }
                 */
                "application/json": components["schemas"]["Error"];
            };
        };
        /**
         * @description `OAUTH_ACCOUNT_UNVERIFIED`: an account with the provider's address
         *     exists, but its address was never verified, so nothing proves it
         *     belongs to the same person; it is not linked. The owner signs in
         *     with an email code (`POST /api/auth/email/send-otp`, then
         *     `POST /api/auth/sessions` with `method: "otp"`), which proves the
         *     mailbox and keeps no password an earlier sign-up chose, then signs in
         *     with the provider again. (Not the sign-up's verification email: that
         *     one would keep the password whoever signed up chose.)
         *     `USER_ALREADY_EXISTS`: the account with the provider's address is
         *     linked to another identity of the same provider.
         *     `OAUTH_LINK_REQUIRED`: the account with the provider's address is
         *     not linked by address (an administrator's account, a provider with
         *     `OAUTH_<NAME>_LINK_BY_EMAIL=false`, or an identity its owner
         *     unlinked); its owner signs in and links the provider from the
         *     session (`POST /api/auth/identities`).
         */
        OAuthAccountUnverified: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "error": "OAUTH_ACCOUNT_UNVERIFIED",
                 *       "message": "An account with this address exists but its address is not verified; sign in with a code sent to it, then sign in with the provider again",
                 *       "statusCode": 409
                 *     }
                 */
                "application/json": components["schemas"]["Error"];
            };
        };
        /** @description `FORBIDDEN`: the caller is authenticated but not allowed to perform this operation. `MFA_REQUIRED`: the session has not proven the account's second factor, or the operation needs `aal2` (see Assurance levels). */
        Forbidden: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "error": "FORBIDDEN",
                 *       "message": "This operation needs the admin role",
                 *       "statusCode": 403
                 *     }
                 */
                "application/json": components["schemas"]["Error"];
            };
        };
        /** @description `MFA_REQUIRED`: the account has a second factor and this session has not proven it (or the operation needs `aal2`). `REAUTHENTICATION_REQUIRED`: the operation changes the second factors and the session's last proof is more than 10 minutes old. `FORBIDDEN`: the caller lacks the role. */
        MfaRequired: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "error": "MFA_REQUIRED",
                 *       "message": "This operation needs a second factor; complete POST /api/auth/mfa/verify",
                 *       "statusCode": 403
                 *     }
                 */
                "application/json": components["schemas"]["Error"];
            };
        };
        /** @description `REAUTHENTICATION_REQUIRED`: the session's last sign-in or second factor is more than 10 minutes old; sign in again. `MFA_REQUIRED`: the account has a second factor and this session has not proven it. */
        IdentityChangeForbidden: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "error": "REAUTHENTICATION_REQUIRED",
                 *       "message": "Linking or unlinking an identity needs a sign-in or a second factor in the last 10 minutes; sign in again",
                 *       "statusCode": 403
                 *     }
                 */
                "application/json": components["schemas"]["Error"];
            };
        };
        /** @description `PASSKEY_REGISTRATION_INVALID`: the answer of `navigator.credentials.create()` does not verify (no live challenge of this session, another origin or RP ID, no user verification, a credential registered already). `INVALID_INPUT`: the request does not match the contract. */
        PasskeyRegistrationInvalid: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "error": "PASSKEY_REGISTRATION_INVALID",
                 *       "message": "The passkey could not be registered; ask for new options and try again",
                 *       "statusCode": 400
                 *     }
                 */
                "application/json": components["schemas"]["Error"];
            };
        };
        /** @description `PASSKEY_REFUSED`: the assertion does not sign in (an unknown, used or expired challenge, another session's challenge, an unknown passkey or another account's, a wrong signature, origin or RP ID, no user verification, a counter that went backwards). `UNAUTHORIZED`, `AUTH_UNAUTHORIZED`, `SESSION_REVOKED`: an `Authorization` header was sent and does not verify. */
        PasskeyRefused: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "error": "PASSKEY_REFUSED",
                 *       "message": "The passkey did not sign in",
                 *       "statusCode": 401
                 *     }
                 */
                "application/json": components["schemas"]["Error"];
            };
        };
        /** @description `FACTOR_STATE`: the account's factors do not allow the change (10 factors already; no verified factor for recovery codes). */
        FactorState: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "error": "FACTOR_STATE",
                 *       "message": "An account has at most 10 factors",
                 *       "statusCode": 409
                 *     }
                 */
                "application/json": components["schemas"]["Error"];
            };
        };
        /** @description `SIGNING_KEY_STATE`: the key's state does not allow the change (the current key cannot be revoked; there is a standby key already). */
        SigningKeyState: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "error": "SIGNING_KEY_STATE",
                 *       "message": "The current signing key cannot be revoked; rotate first",
                 *       "statusCode": 409
                 *     }
                 */
                "application/json": components["schemas"]["Error"];
            };
        };
        /** @description `NOT_FOUND`: no live session of the caller has this id. */
        SessionNotFound: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "error": "NOT_FOUND",
                 *       "message": "No such session",
                 *       "statusCode": 404
                 *     }
                 */
                "application/json": components["schemas"]["Error"];
            };
        };
        /** @description `NOT_FOUND`: the resource named in the path or query does not exist (or the caller may not see it). */
        NotFound: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "error": "NOT_FOUND",
                 *       "message": "No such channel",
                 *       "statusCode": 404
                 *     }
                 */
                "application/json": components["schemas"]["Error"];
            };
        };
        /** @description `CHANNEL_ALREADY_EXISTS`: a channel with this pattern exists already. */
        Conflict: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "error": "CHANNEL_ALREADY_EXISTS",
                 *       "message": "A channel with this pattern exists already",
                 *       "statusCode": 409
                 *     }
                 */
                "application/json": components["schemas"]["Error"];
            };
        };
        /** @description `NOT_FOUND`: no account has this id (or the caller may not see it). */
        UserNotFound: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "error": "NOT_FOUND",
                 *       "message": "No such user",
                 *       "statusCode": 404
                 *     }
                 */
                "application/json": components["schemas"]["Error"];
            };
        };
        /** @description `LAST_ADMIN`: the call would leave no enabled administrator (deleting, demoting or disabling the last one); nothing was changed. */
        LastAdmin: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "error": "LAST_ADMIN",
                 *       "message": "This would leave no enabled administrator",
                 *       "statusCode": 409
                 *     }
                 */
                "application/json": components["schemas"]["Error"];
            };
        };
        /**
         * @description `PAYLOAD_TOO_LARGE`: the request body exceeds the size limit of the
         *     operation, given in bytes by the operation's `x-body-limit` (16 KiB for
         *     the auth operations, 8 MiB for embeddings). A `Content-Length` over
         *     the limit is refused before the body is read.
         */
        PayloadTooLarge: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "error": "PAYLOAD_TOO_LARGE",
                 *       "message": "Request body is too large",
                 *       "statusCode": 413
                 *     }
                 */
                "application/json": components["schemas"]["Error"];
            };
        };
        /** @description `UNSUPPORTED_MEDIA_TYPE`: the request body is not sent as `application/json`. */
        UnsupportedMediaType: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "error": "UNSUPPORTED_MEDIA_TYPE",
                 *       "message": "Unsupported media type: text/plain; use application/json",
                 *       "statusCode": 415
                 *     }
                 */
                "application/json": components["schemas"]["Error"];
            };
        };
        /**
         * @description `INVALID_INPUT`: the body is malformed. `INVALID_OTP`: the code or
         *     token is wrong, expired, already used or unknown, or belongs to an
         *     address without an account or to a disabled account (these are not
         *     told apart).
         */
        InvalidOtp: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                "application/json": components["schemas"]["Error"];
            };
        };
        /** @description `RATE_LIMITED`: too many requests from this client; wait for the number of seconds in `Retry-After`. */
        TooManyRequests: {
            headers: {
                "Retry-After": components["headers"]["RetryAfter"];
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "error": "RATE_LIMITED",
                 *       "message": "Too many requests; retry in 60 seconds",
                 *       "statusCode": 429
                 *     }
                 */
                "application/json": components["schemas"]["Error"];
            };
        };
        /** @description `INTERNAL_ERROR`: an unexpected failure. No internal details are revealed. */
        InternalError: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "error": "INTERNAL_ERROR",
                 *       "message": "An unexpected error occurred",
                 *       "statusCode": 500
                 *     }
                 */
                "application/json": components["schemas"]["Error"];
            };
        };
        /**
         * @description `PROVIDER_UNAVAILABLE`: the upstream provider failed or could not be
         *     reached. `PROVIDER_AUTH_FAILED`: the upstream provider rejected the
         *     service's credentials (a configuration problem on the server side, not
         *     the caller's).
         */
        BadGateway: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                "application/json": components["schemas"]["Error"];
            };
        };
        /**
         * @description `SERVICE_UNAVAILABLE`: a dependency the operation needs is not
         *     available: the database does not answer (the service keeps running
         *     and recovers by itself when it returns), the embedding provider has
         *     failed repeatedly and calls to it are paused, or embeddings are not
         *     configured. When waiting helps, `Retry-After` says how long.
         */
        ServiceUnavailable: {
            headers: {
                /**
                 * @description Seconds to wait before retrying; absent when waiting will not help (a missing configuration).
                 * @example 5
                 */
                "Retry-After"?: number;
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "error": "SERVICE_UNAVAILABLE",
                 *       "message": "The database is not answering",
                 *       "statusCode": 503
                 *     }
                 */
                "application/json": components["schemas"]["Error"];
            };
        };
        /**
         * @description `SERVICE_UNAVAILABLE`, answered at once: the service is checking as
         *     many passwords as it can and its queue of password hashes (shared by
         *     sign-up, password sign-in, password reset and change) has no place
         *     for this request, or the client's network (an IPv6 /48, an IPv4 /24)
         *     already holds its share of that queue; or the database does not
         *     answer. A request already waiting in a full queue may get this answer
         *     too, at once, when its network has the most hashes waiting and a
         *     request from a network with at least two fewer waiting arrives: the
         *     newcomer takes the place of the newest waiting request of that
         *     network. Retry after the seconds in `Retry-After`.
         */
        PasswordHashingUnavailable: {
            headers: {
                "Retry-After": components["headers"]["RetryAfter"];
                [name: string]: unknown;
            };
            content: {
                "application/json": components["schemas"]["Error"];
            };
        };
        /** @description `PROVIDER_TIMEOUT`: the upstream provider did not answer in time. */
        GatewayTimeout: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                /**
                 * @example {
                 *       "error": "PROVIDER_TIMEOUT",
                 *       "message": "The embedding provider did not answer in time",
                 *       "statusCode": 504
                 *     }
                 */
                "application/json": components["schemas"]["Error"];
            };
        };
    };
    parameters: {
        /**
         * @description The kind of client, which decides how the refresh token travels.
         *
         *     - `web` (default): the refresh token is set in the HttpOnly cookie
         *       `refresh_token` (scoped to `Path=/api/auth`) and never appears in the
         *       body (`refreshToken: null`). The body carries a `csrfToken`, which
         *       the client sends back in the `X-CSRF-Token` header when it refreshes
         *       or logs out.
         *     - `mobile`, `desktop`: no cookie is set; the refresh token is returned
         *       in the body as `refreshToken` (`csrfToken: null`) and sent back in
         *       the body when refreshing or logging out.
         * @example web
         */
        ClientType: "web" | "mobile" | "desktop";
        /**
         * @description A built-in provider name the service is configured for (`OAUTH_PROVIDERS`).
         * @example google
         */
        BuiltInOAuthProvider: "google" | "github" | "discord" | "linkedin" | "facebook" | "instagram" | "tiktok" | "apple" | "x" | "spotify" | "microsoft";
        /**
         * @description The name of a configured OpenID Connect provider that is not a built-in name (`OAUTH_PROVIDERS`).
         * @example corp-sso
         */
        CustomOAuthProvider: components["schemas"]["OAuthProviderName"];
        /**
         * @description The name of a configured provider, built-in or not.
         * @example google
         */
        AnyOAuthProvider: components["schemas"]["OAuthProviderName"];
        /**
         * @description Where the browser returns to the app at the end, with
         *     `insforge_code` or `error` set in its query (values of those two
         *     already there are replaced). Must match `AUTH_REDIRECT_ALLOWLIST`
         *     (see `RedirectTo`) and have no fragment (`#`).
         * @example https://app.example.com/auth/callback
         */
        OAuthRedirectUri: string;
        /**
         * @description The app's PKCE challenge: the base64url SHA-256 of a random
         *     `code_verifier` (43 to 128 characters) that the app keeps and later
         *     sends to `POST /api/auth/oauth/exchange`.
         * @example E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM
         */
        OAuthCodeChallenge: string;
        /**
         * @description Number of records to skip (an integer from 0 to 999999999999999, without leading zeros)
         * @example 0
         */
        Offset: string;
        /**
         * @description Maximum number of records to return (an integer from 0 to 1000, without leading zeros; 0 returns only the total)
         * @example 10
         */
        Limit: string;
        /**
         * @description Case-insensitive substring match on the email address or the profile
         *     name. `%`, `_` and `\` match themselves (they are not wildcards). A
         *     blank value (empty or only whitespace) means no filter.
         * @example ada
         */
        Search: string;
        /**
         * @description Only events that occurred at or after this instant (RFC 3339).
         * @example 2026-11-01T00:00:00Z
         */
        AuditSince: string;
        /**
         * @description Only events that occurred before this instant (RFC 3339).
         * @example 2026-12-01T00:00:00Z
         */
        AuditUntil: string;
        /**
         * @description The `nextCursor` of the previous page: this page continues after
         *     it. Opaque: pass it back as it came.
         * @example AAAAAAAABBI
         */
        AuditCursor: string;
        /**
         * @description Maximum number of events to return (an integer from 1 to 200, without leading zeros).
         * @example 50
         */
        AuditLimit: string;
        /** @description The channel's id. */
        ChannelId: string;
        /** @description The session's id (`sid` in its access tokens). */
        SessionId: string;
        /** @description The user's id. */
        UserId: string;
        /** @description The passkey's id (a UUID; anything else is answered `404 NOT_FOUND`). */
        PasskeyId: string;
        /** @description The factor's id (a UUID; anything else is answered `404 NOT_FOUND`). */
        FactorId: string;
        /** @description The identity's id (a UUID; anything else is answered `404 NOT_FOUND`). */
        IdentityId: string;
        /**
         * @description The `csrfToken` returned with the session. Required for web clients
         *     (whose refresh token travels in the cookie); ignored for mobile and
         *     desktop clients.
         * @example BMQ0--RAd6oi3JYwYqk1d980v6d_lbdwbAYK-0G8UPQ
         */
        CsrfToken: string;
        /**
         * @description Web clients: the known-device cookie the service set when a session
         *     opened on this browser (HttpOnly, `Path=/api/auth`, a year). It says
         *     that this device has signed in to the account before, signed by the
         *     service and bound to that account, so it counts only for that
         *     account's address. A known device has its own budget of emails
         *     (send-otp, reset) that others cannot use up, and its own sign-in
         *     back-off, which others' failed sign-ins do not hold back. Browsers
         *     send it by themselves; a missing, forged, expired or other account's
         *     cookie is simply not a known device (the answers do not change): a
         *     value of any form is taken and ignored, never refused.
         * @example d1.q8Wm2Zb4TqS1nX0yLr7aHg.1811923200.4f0c…
         */
        DeviceCookie: string;
        /**
         * @description Mobile and desktop clients: the `deviceToken` of a session this
         *     device opened before, for the same account. The same meaning as the
         *     web clients' `device_id` cookie: its own email budget and its own
         *     sign-in back-off for that account's address. Optional: a missing,
         *     forged, expired or other account's token is simply not a known
         *     device (the answers do not change).
         * @example d1.q8Wm2Zb4TqS1nX0yLr7aHg.1811923200.4f0c…
         */
        DeviceToken: string;
        /**
         * @description The refresh token of a web client, set by the service as an HttpOnly
         *     cookie scoped to `/api/auth`. Browsers send it automatically; it is not
         *     readable by page scripts. A browser may send several `refresh_token`
         *     cookies (one planted by another host of the site on a longer path,
         *     such as `/api/auth/refresh`, comes first): refresh and logout look at
         *     each one sent (at most 8), in order, and use the first whose session
         *     matches the client type and the `X-CSRF-Token` header, so a planted
         *     cookie cannot block the session. Every answer that sets or clears the
         *     cookie also expires its variants on `/api/auth/`,
         *     `/api/auth/refresh` and `/api/auth/logout`.
         * @example pzRr3YP0PxKdC6W0P3u_r5AnV17-IeYpnDKdYN6nD94
         */
        RefreshCookie: string;
        /**
         * @description The binding of a web client's sign-up (HttpOnly, host-only,
         *     `Path=/`, as long as a verification link lives), sent back by the
         *     browser with the verification; see `POST /api/auth/users`. When the
         *     service's cookies are Secure (the default, and always in production)
         *     its name is `__Host-sign_up_binding`, which browsers accept only from
         *     the service's own host, and a `sign_up_binding` cookie is ignored. A
         *     value that is not this sign-up's binding (of any form) proves
         *     nothing and is never refused.
         */
        SignUpBindingCookie: string;
    };
    requestBodies: never;
    headers: {
        /**
         * @description Web clients only: the sign-up's binding in the cookie
         *     `__Host-sign_up_binding` (`sign_up_binding` when cookies are not
         *     Secure): `HttpOnly; Path=/`, no `Domain`, `Secure` and `SameSite` as
         *     for the refresh cookie, `Max-Age` the link lifetime.
         * @example __Host-sign_up_binding=4cQ1nT7cZx0oVQhYk1b0wUeP6E9rKmQ2sJ8dLfA3gHc; Max-Age=86400; Path=/; HttpOnly; Secure; SameSite=Lax
         */
        SetSignUpBindingCookie: string;
        /**
         * @description Web clients only: sets the rotated refresh token in the cookie
         *     `refresh_token` with `HttpOnly; Secure; SameSite=Lax; Path=/api/auth`
         *     (the server's `COOKIE_SAMESITE` and `COOKIE_DOMAIN` change `SameSite`
         *     and `Domain`; `SameSite=None` comes with `Partitioned`) and the
         *     session's remaining lifetime (30 days at most). Further
         *     `refresh_token` lines, before it, expire the cookie's variants under
         *     other settings and on the longer paths under `/api/auth` that refresh
         *     and logout requests carry (`Max-Age=0`); the last `refresh_token` line
         *     is the cookie itself. When a session opens (sign-up, sign-in,
         *     verification, OAuth; not on refresh), a `device_id` line follows: the
         *     known-device cookie (see the `device_id` cookie parameter), with the
         *     same attributes and `Max-Age=31536000` (a year). Absent for mobile and
         *     desktop clients.
         * @example refresh_token=pzRr3YP0PxKdC6W0P3u_r5AnV17-IeYpnDKdYN6nD94; Max-Age=2592000; Path=/api/auth; HttpOnly; Secure; SameSite=Lax
         */
        SetRefreshCookie: string;
        /**
         * @description Web clients only, clears the cookie `refresh_token` (empty value, `Max-Age=0`), and its variants under other settings and on the longer paths under `/api/auth` that refresh and logout requests carry.
         * @example refresh_token=; Max-Age=0; Path=/api/auth; HttpOnly; Secure; SameSite=Lax
         */
        ClearRefreshCookie: string;
        /**
         * @description An opaque tag of this configuration; it changes whenever the configuration does. Send it back in `If-None-Match`.
         * @example "k3Xq9mB2vT0c"
         */
        PublicConfigETag: string;
        /**
         * @description `public, max-age=300`: verifiers may keep the answer for 5 minutes (and fetch it again at once on meeting an unknown `kid`).
         * @example public, max-age=300
         */
        JwksCacheControl: string;
        /**
         * @description `public, no-cache`: caches may keep the answer but must revalidate it (with `If-None-Match`) before using it.
         * @example public, no-cache
         */
        PublicConfigCacheControl: string;
        /**
         * @description Number of seconds to wait before retrying.
         * @example 60
         */
        RetryAfter: number;
    };
    pathItems: never;
}
export type $defs = Record<string, never>;
export interface operations {
    getHealth: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The service and its database are up. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "status": "ok",
                     *       "database": "up",
                     *       "redis": "up",
                     *       "embeddingsBreaker": "closed",
                     *       "version": "0.14.0",
                     *       "uptimeSeconds": 3612.4
                     *     }
                     */
                    "application/json": components["schemas"]["Health"];
                };
            };
            400: components["responses"]["BadRequest"];
            429: components["responses"]["TooManyRequests"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    getMetrics: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The metrics, as Prometheus scrapes them. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example # HELP auth_sign_ins_total Password sign-ins, by result
                     *     # TYPE auth_sign_ins_total counter
                     *     auth_sign_ins_total{result="ok"} 12
                     *     auth_sign_ins_total{result="failed"} 3
                     *     # HELP db_pool_connections Database connections open in the pool
                     *     # TYPE db_pool_connections gauge
                     *     db_pool_connections 4
                     */
                    "text/plain; version=0.0.4": string;
                };
            };
            400: components["responses"]["BadRequest"];
            /** @description `UNAUTHORIZED`: `METRICS_TOKEN` is set, and the request does not carry it as a Bearer token. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "error": "UNAUTHORIZED",
                     *       "message": "A valid metrics token is required: Authorization: Bearer <METRICS_TOKEN>",
                     *       "statusCode": 401
                     *     }
                     */
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description `NOT_FOUND`: metrics are not served on this port (`METRICS_TOKEN` is not set). */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "error": "NOT_FOUND",
                     *       "message": "No route for GET /metrics",
                     *       "statusCode": 404
                     *     }
                     */
                    "application/json": components["schemas"]["Error"];
                };
            };
            500: components["responses"]["InternalError"];
        };
    };
    getJwks: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The key set. */
            200: {
                headers: {
                    "Cache-Control": components["headers"]["JwksCacheControl"];
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "keys": [
                     *         {
                     *           "kty": "EC",
                     *           "crv": "P-256",
                     *           "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
                     *           "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0",
                     *           "kid": "8pQm2T0cYwXbRZ4oKqJv1A",
                     *           "alg": "ES256",
                     *           "use": "sig"
                     *         }
                     *       ]
                     *     }
                     */
                    "application/json": components["schemas"]["Jwks"];
                };
            };
            400: components["responses"]["BadRequest"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    getOpenIdConfiguration: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The discovery document. */
            200: {
                headers: {
                    "Cache-Control": components["headers"]["JwksCacheControl"];
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "issuer": "https://accounts.example.com",
                     *       "jwks_uri": "https://accounts.example.com/.well-known/jwks.json",
                     *       "id_token_signing_alg_values_supported": [
                     *         "ES256"
                     *       ],
                     *       "subject_types_supported": [
                     *         "public"
                     *       ],
                     *       "claims_supported": [
                     *         "sub",
                     *         "email",
                     *         "role",
                     *         "sid",
                     *         "token_use",
                     *         "iss",
                     *         "aud",
                     *         "iat",
                     *         "exp",
                     *         "jti"
                     *       ]
                     *     }
                     */
                    "application/json": components["schemas"]["OpenIdConfiguration"];
                };
            };
            400: components["responses"]["BadRequest"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    listUsers: {
        parameters: {
            query?: {
                /**
                 * @description Number of records to skip (an integer from 0 to 999999999999999, without leading zeros)
                 * @example 0
                 */
                offset?: components["parameters"]["Offset"];
                /**
                 * @description Maximum number of records to return (an integer from 0 to 1000, without leading zeros; 0 returns only the total)
                 * @example 10
                 */
                limit?: components["parameters"]["Limit"];
                /**
                 * @description Case-insensitive substring match on the email address or the profile
                 *     name. `%`, `_` and `\` match themselves (they are not wildcards). A
                 *     blank value (empty or only whitespace) means no filter.
                 * @example ada
                 */
                search?: components["parameters"]["Search"];
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description One page of users and the pagination figures. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "data": [
                     *         {
                     *           "id": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
                     *           "email": "grace@example.com",
                     *           "profile": {
                     *             "name": "Grace Hopper",
                     *             "avatar_url": "https://cdn.example.com/avatars/grace.png"
                     *           },
                     *           "metadata": {},
                     *           "emailVerified": true,
                     *           "providers": [
                     *             "email"
                     *           ],
                     *           "createdAt": "2025-03-15T11:02:17.104Z",
                     *           "updatedAt": "2025-03-15T11:05:40.862Z",
                     *           "role": "admin",
                     *           "disabled": false,
                     *           "disabledAt": null
                     *         },
                     *         {
                     *           "id": "3f1c9a2e-7b4d-4e8a-9c21-5d6e7f8a9b0c",
                     *           "email": "ada@example.com",
                     *           "profile": {
                     *             "name": "Ada Lovelace",
                     *             "avatar_url": null
                     *           },
                     *           "metadata": {},
                     *           "emailVerified": false,
                     *           "providers": [
                     *             "email"
                     *           ],
                     *           "createdAt": "2025-03-14T09:26:53.589Z",
                     *           "updatedAt": "2025-03-14T09:26:53.589Z",
                     *           "role": "user",
                     *           "disabled": false,
                     *           "disabledAt": null
                     *         }
                     *       ],
                     *       "pagination": {
                     *         "offset": 0,
                     *         "limit": 10,
                     *         "total": 2
                     *       }
                     *     }
                     */
                    "application/json": components["schemas"]["UserList"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["Forbidden"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    createUser: {
        parameters: {
            query?: {
                /**
                 * @description The kind of client, which decides how the refresh token travels.
                 *
                 *     - `web` (default): the refresh token is set in the HttpOnly cookie
                 *       `refresh_token` (scoped to `Path=/api/auth`) and never appears in the
                 *       body (`refreshToken: null`). The body carries a `csrfToken`, which
                 *       the client sends back in the `X-CSRF-Token` header when it refreshes
                 *       or logs out.
                 *     - `mobile`, `desktop`: no cookie is set; the refresh token is returned
                 *       in the body as `refreshToken` (`csrfToken: null`) and sent back in
                 *       the body when refreshing or logging out.
                 * @example web
                 */
                client_type?: components["parameters"]["ClientType"];
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                /**
                 * @example {
                 *       "email": "ada@example.com",
                 *       "password": "correct horse battery staple",
                 *       "name": "Ada Lovelace",
                 *       "redirectTo": "https://app.example.com/welcome"
                 *     }
                 */
                "application/json": components["schemas"]["SignUpRequest"];
            };
        };
        responses: {
            /**
             * @description Account created and signed in (email verification is not required).
             *     Web clients also receive the refresh-token cookie.
             */
            201: {
                headers: {
                    "Set-Cookie": components["headers"]["SetRefreshCookie"];
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SessionResult"];
                };
            };
            /**
             * @description Verification required: if the address is new, the account was
             *     created and a verification email sent. The same answer is given
             *     for an address that is already registered.
             */
            202: {
                headers: {
                    "Set-Cookie": components["headers"]["SetSignUpBindingCookie"];
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "requireEmailVerification": true,
                     *       "accessToken": null,
                     *       "signUpBinding": "4cQ1nT7cZx0oVQhYk1b0wUeP6E9rKmQ2sJ8dLfA3gHc"
                     *     }
                     */
                    "application/json": components["schemas"]["SignUpAccepted"];
                };
            };
            400: components["responses"]["BadRequest"];
            /**
             * @description `SIGN_UP_DISABLED`: the service does not allow sign-ups
             *     (`ALLOW_SIGN_UP=false`). The same answer for every address; no
             *     account is created and no email is sent.
             */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "error": "SIGN_UP_DISABLED",
                     *       "message": "Sign-ups are disabled on this service",
                     *       "statusCode": 403
                     *     }
                     */
                    "application/json": components["schemas"]["Error"];
                };
            };
            /**
             * @description `USER_ALREADY_EXISTS`: an account with this email address already
             *     exists. Only given when email verification is not required.
             */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "error": "USER_ALREADY_EXISTS",
                     *       "message": "An account with this email address already exists",
                     *       "statusCode": 409
                     *     }
                     */
                    "application/json": components["schemas"]["Error"];
                };
            };
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            429: components["responses"]["TooManyRequests"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["PasswordHashingUnavailable"];
        };
    };
    deleteUsers: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                /**
                 * @example {
                 *       "userIds": [
                 *         "3f1c9a2e-7b4d-4e8a-9c21-5d6e7f8a9b0c",
                 *         "7c9e6679-7425-40de-944b-e07fc1f90ae7"
                 *       ]
                 *     }
                 */
                "application/json": components["schemas"]["DeleteUsersRequest"];
            };
        };
        responses: {
            /** @description The accounts that existed are deleted. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "message": "2 users deleted",
                     *       "deletedCount": 2
                     *     }
                     */
                    "application/json": components["schemas"]["DeleteUsersResult"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["Forbidden"];
            409: components["responses"]["LastAdmin"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    getUser: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The user's id. */
                userId: components["parameters"]["UserId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The account. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "id": "3f1c9a2e-7b4d-4e8a-9c21-5d6e7f8a9b0c",
                     *       "email": "ada@example.com",
                     *       "profile": {
                     *         "name": "Ada Lovelace",
                     *         "avatar_url": "https://cdn.example.com/avatars/ada.png",
                     *         "bio": "Analyst"
                     *       },
                     *       "metadata": {},
                     *       "emailVerified": true,
                     *       "providers": [
                     *         "email"
                     *       ],
                     *       "createdAt": "2025-03-14T09:26:53.589Z",
                     *       "updatedAt": "2025-03-14T09:31:07.220Z",
                     *       "role": "user",
                     *       "disabled": false,
                     *       "disabledAt": null
                     *     }
                     */
                    "application/json": components["schemas"]["AdminUser"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["Forbidden"];
            404: components["responses"]["UserNotFound"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    updateUser: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The user's id. */
                userId: components["parameters"]["UserId"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["UpdateUserRequest"];
            };
        };
        responses: {
            /** @description The account as updated. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "id": "3f1c9a2e-7b4d-4e8a-9c21-5d6e7f8a9b0c",
                     *       "email": "ada@example.com",
                     *       "profile": {
                     *         "name": "Ada Lovelace",
                     *         "avatar_url": null
                     *       },
                     *       "metadata": {},
                     *       "emailVerified": true,
                     *       "providers": [
                     *         "email"
                     *       ],
                     *       "createdAt": "2025-03-14T09:26:53.589Z",
                     *       "updatedAt": "2025-03-16T08:00:00.000Z",
                     *       "role": "user",
                     *       "disabled": true,
                     *       "disabledAt": "2025-03-16T08:00:00.000Z"
                     *     }
                     */
                    "application/json": components["schemas"]["AdminUser"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["Forbidden"];
            404: components["responses"]["UserNotFound"];
            409: components["responses"]["LastAdmin"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    deleteUserFactors: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The user's id. */
                userId: components["parameters"]["UserId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Removed; the account's sessions have ended. */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["Forbidden"];
            404: components["responses"]["UserNotFound"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    listUserSessions: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The user's id. */
                userId: components["parameters"]["UserId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The account's sessions. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "sessions": [
                     *         {
                     *           "id": "0b6f2c1e-8d3a-4f5b-9c7e-1a2b3c4d5e6f",
                     *           "clientType": "mobile",
                     *           "createdAt": "2026-11-28T08:00:00.000Z",
                     *           "lastRefreshedAt": "2026-11-28T09:45:00.000Z",
                     *           "expiresAt": "2026-12-28T08:00:00.000Z",
                     *           "ip": "203.0.113.7",
                     *           "userAgent": "ExampleApp/3.2 (iOS 19)",
                     *           "aal": "aal2",
                     *           "current": false
                     *         }
                     *       ]
                     *     }
                     */
                    "application/json": components["schemas"]["SessionList"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["Forbidden"];
            404: components["responses"]["UserNotFound"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    endUserSessions: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The user's id. */
                userId: components["parameters"]["UserId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Ended. */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["Forbidden"];
            404: components["responses"]["UserNotFound"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    listSessions: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The caller's sessions. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "sessions": [
                     *         {
                     *           "id": "0b6f2c1e-8d3a-4f5b-9c7e-1a2b3c4d5e6f",
                     *           "clientType": "web",
                     *           "createdAt": "2026-11-28T08:00:00.000Z",
                     *           "lastRefreshedAt": "2026-11-28T09:45:00.000Z",
                     *           "expiresAt": "2026-12-28T08:00:00.000Z",
                     *           "ip": "203.0.113.7",
                     *           "userAgent": "Mozilla/5.0 (X11; Linux x86_64)",
                     *           "aal": "aal1",
                     *           "current": true
                     *         }
                     *       ]
                     *     }
                     */
                    "application/json": components["schemas"]["SessionList"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["MfaRequired"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    createSession: {
        parameters: {
            query?: {
                /**
                 * @description The kind of client, which decides how the refresh token travels.
                 *
                 *     - `web` (default): the refresh token is set in the HttpOnly cookie
                 *       `refresh_token` (scoped to `Path=/api/auth`) and never appears in the
                 *       body (`refreshToken: null`). The body carries a `csrfToken`, which
                 *       the client sends back in the `X-CSRF-Token` header when it refreshes
                 *       or logs out.
                 *     - `mobile`, `desktop`: no cookie is set; the refresh token is returned
                 *       in the body as `refreshToken` (`csrfToken: null`) and sent back in
                 *       the body when refreshing or logging out.
                 * @example web
                 */
                client_type?: components["parameters"]["ClientType"];
            };
            header?: {
                /**
                 * @description Mobile and desktop clients: the `deviceToken` of a session this
                 *     device opened before, for the same account. The same meaning as the
                 *     web clients' `device_id` cookie: its own email budget and its own
                 *     sign-in back-off for that account's address. Optional: a missing,
                 *     forged, expired or other account's token is simply not a known
                 *     device (the answers do not change).
                 * @example d1.q8Wm2Zb4TqS1nX0yLr7aHg.1811923200.4f0c…
                 */
                "X-Device-Token"?: components["parameters"]["DeviceToken"];
            };
            path?: never;
            cookie?: {
                /**
                 * @description Web clients: the known-device cookie the service set when a session
                 *     opened on this browser (HttpOnly, `Path=/api/auth`, a year). It says
                 *     that this device has signed in to the account before, signed by the
                 *     service and bound to that account, so it counts only for that
                 *     account's address. A known device has its own budget of emails
                 *     (send-otp, reset) that others cannot use up, and its own sign-in
                 *     back-off, which others' failed sign-ins do not hold back. Browsers
                 *     send it by themselves; a missing, forged, expired or other account's
                 *     cookie is simply not a known device (the answers do not change): a
                 *     value of any form is taken and ignored, never refused.
                 * @example d1.q8Wm2Zb4TqS1nX0yLr7aHg.1811923200.4f0c…
                 */
                device_id?: components["parameters"]["DeviceCookie"];
            };
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["CreateSessionRequest"];
            };
        };
        responses: {
            /** @description Signed in. Web clients also receive the refresh-token cookie. */
            200: {
                headers: {
                    "Set-Cookie": components["headers"]["SetRefreshCookie"];
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SessionResult"];
                };
            };
            /**
             * @description `INVALID_INPUT`: the body is malformed. `INVALID_OTP` (email code
             *     sign-in): the code is wrong, expired, used or voided, the address
             *     has no code, or the account is disabled.
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description `INVALID_CREDENTIALS`: the email address or the password is wrong. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "error": "INVALID_CREDENTIALS",
                     *       "message": "Invalid email or password",
                     *       "statusCode": 401
                     *     }
                     */
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description `EMAIL_NOT_VERIFIED`: the password is right, but the address of this account (created while verification was not required) has not been verified yet. */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "error": "EMAIL_NOT_VERIFIED",
                     *       "message": "Verify your email address before signing in",
                     *       "statusCode": 403
                     *     }
                     */
                    "application/json": components["schemas"]["Error"];
                };
            };
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            429: components["responses"]["TooManyRequests"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["PasswordHashingUnavailable"];
        };
    };
    endSessions: {
        parameters: {
            query: {
                /** @description `others`: every session but the current; `all`: every session. */
                scope: "others" | "all";
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Ended. */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["MfaRequired"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    getOAuthAuthorizationUrl: {
        parameters: {
            query: {
                /**
                 * @description Where the browser returns to the app at the end, with
                 *     `insforge_code` or `error` set in its query (values of those two
                 *     already there are replaced). Must match `AUTH_REDIRECT_ALLOWLIST`
                 *     (see `RedirectTo`) and have no fragment (`#`).
                 * @example https://app.example.com/auth/callback
                 */
                redirect_uri: components["parameters"]["OAuthRedirectUri"];
                /**
                 * @description The app's PKCE challenge: the base64url SHA-256 of a random
                 *     `code_verifier` (43 to 128 characters) that the app keeps and later
                 *     sends to `POST /api/auth/oauth/exchange`.
                 * @example E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM
                 */
                code_challenge: components["parameters"]["OAuthCodeChallenge"];
            };
            header?: never;
            path: {
                /**
                 * @description A built-in provider name the service is configured for (`OAUTH_PROVIDERS`).
                 * @example google
                 */
                provider: components["parameters"]["BuiltInOAuthProvider"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: components["responses"]["OAuthAuthorizationUrl"];
            400: components["responses"]["BadRequest"];
            404: components["responses"]["OAuthProviderNotFound"];
            429: components["responses"]["TooManyRequests"];
            500: components["responses"]["InternalError"];
            502: components["responses"]["OAuthProviderUnavailable"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    getCustomOAuthAuthorizationUrl: {
        parameters: {
            query: {
                /**
                 * @description Where the browser returns to the app at the end, with
                 *     `insforge_code` or `error` set in its query (values of those two
                 *     already there are replaced). Must match `AUTH_REDIRECT_ALLOWLIST`
                 *     (see `RedirectTo`) and have no fragment (`#`).
                 * @example https://app.example.com/auth/callback
                 */
                redirect_uri: components["parameters"]["OAuthRedirectUri"];
                /**
                 * @description The app's PKCE challenge: the base64url SHA-256 of a random
                 *     `code_verifier` (43 to 128 characters) that the app keeps and later
                 *     sends to `POST /api/auth/oauth/exchange`.
                 * @example E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM
                 */
                code_challenge: components["parameters"]["OAuthCodeChallenge"];
            };
            header?: never;
            path: {
                /**
                 * @description The name of a configured OpenID Connect provider that is not a built-in name (`OAUTH_PROVIDERS`).
                 * @example corp-sso
                 */
                provider: components["parameters"]["CustomOAuthProvider"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: components["responses"]["OAuthAuthorizationUrl"];
            400: components["responses"]["BadRequest"];
            404: components["responses"]["OAuthProviderNotFound"];
            429: components["responses"]["TooManyRequests"];
            500: components["responses"]["InternalError"];
            502: components["responses"]["OAuthProviderUnavailable"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    handleOAuthCallback: {
        parameters: {
            query?: {
                /** @description The state the service gave the provider. */
                state?: string;
                /** @description The provider's authorization code. */
                code?: string;
                /** @description The provider's error code (`access_denied` when the person refused). */
                error?: string;
                /** @description The provider's explanation of its error (not passed on). */
                error_description?: string;
                /** @description The issuer, for providers that send it (RFC 9207); checked when present. */
                iss?: string;
            };
            header?: never;
            path: {
                /**
                 * @description The name of a configured provider, built-in or not.
                 * @example google
                 */
                provider: components["parameters"]["AnyOAuthProvider"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Back to the app's `redirect_uri`, with `insforge_code`, `linked` or `error`. */
            302: {
                headers: {
                    /** @description The app's `redirect_uri` with `insforge_code=<one-time code>` (a sign-in), `linked=<provider>` (a link) or `error=<code>`. */
                    Location?: string;
                    [name: string]: unknown;
                };
                content?: never;
            };
            /**
             * @description `OAUTH_STATE_INVALID`: the state is missing, unknown, expired or
             *     already used. `INVALID_INPUT`: a malformed query.
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "error": "OAUTH_STATE_INVALID",
                     *       "message": "This sign-in is unknown or has expired; start again",
                     *       "statusCode": 400
                     *     }
                     */
                    "application/json": components["schemas"]["Error"];
                };
            };
            404: components["responses"]["OAuthProviderNotFound"];
            429: components["responses"]["TooManyRequests"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    exchangeOAuthCode: {
        parameters: {
            query?: {
                /**
                 * @description The kind of client, which decides how the refresh token travels.
                 *
                 *     - `web` (default): the refresh token is set in the HttpOnly cookie
                 *       `refresh_token` (scoped to `Path=/api/auth`) and never appears in the
                 *       body (`refreshToken: null`). The body carries a `csrfToken`, which
                 *       the client sends back in the `X-CSRF-Token` header when it refreshes
                 *       or logs out.
                 *     - `mobile`, `desktop`: no cookie is set; the refresh token is returned
                 *       in the body as `refreshToken` (`csrfToken: null`) and sent back in
                 *       the body when refreshing or logging out.
                 * @example web
                 */
                client_type?: components["parameters"]["ClientType"];
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                /**
                 * @example {
                 *       "code": "9pG2v0yq3LrT8mXc1bN4kQ7wZ5aD6eF0hJ2sU8iO1lE",
                 *       "code_verifier": "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
                 *     }
                 */
                "application/json": components["schemas"]["OAuthCodeExchangeRequest"];
            };
        };
        responses: {
            /** @description Signed in. Web clients also receive the refresh-token cookie. */
            200: {
                headers: {
                    "Set-Cookie": components["headers"]["SetRefreshCookie"];
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SessionResult"];
                };
            };
            /**
             * @description `INVALID_INPUT`: the body is malformed. `OAUTH_CODE_INVALID`: the
             *     code is unknown, used or expired, or the verifier does not match
             *     its challenge.
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "error": "OAUTH_CODE_INVALID",
                     *       "message": "The sign-in code is invalid or has expired; sign in again",
                     *       "statusCode": 400
                     *     }
                     */
                    "application/json": components["schemas"]["Error"];
                };
            };
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            429: components["responses"]["TooManyRequests"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    signInWithIdToken: {
        parameters: {
            query?: {
                /**
                 * @description The kind of client, which decides how the refresh token travels.
                 *
                 *     - `web` (default): the refresh token is set in the HttpOnly cookie
                 *       `refresh_token` (scoped to `Path=/api/auth`) and never appears in the
                 *       body (`refreshToken: null`). The body carries a `csrfToken`, which
                 *       the client sends back in the `X-CSRF-Token` header when it refreshes
                 *       or logs out.
                 *     - `mobile`, `desktop`: no cookie is set; the refresh token is returned
                 *       in the body as `refreshToken` (`csrfToken: null`) and sent back in
                 *       the body when refreshing or logging out.
                 * @example web
                 */
                client_type?: components["parameters"]["ClientType"];
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                /**
                 * @example {
                 *       "provider": "google",
                 *       "token": "eyJhbGciOiJSUzI1NiIsImtpZCI6IjE2In0.eyJpc3MiOiJodHRwczovL2FjY291bnRzLmdvb2dsZS5jb20iLCJhdWQiOiIxMjM0LmFwcHMuZ29vZ2xldXNlcmNvbnRlbnQuY29tIiwic3ViIjoiMTEwMjM0NTY3ODkiLCJlbWFpbCI6ImFkYUBleGFtcGxlLmNvbSIsImVtYWlsX3ZlcmlmaWVkIjp0cnVlLCJleHAiOjE3OTQ4MzA0MDAsImlhdCI6MTc5NDgyNjgwMH0.c2lnbmF0dXJl"
                 *     }
                 */
                "application/json": components["schemas"]["IdTokenSignInRequest"];
            };
        };
        responses: {
            /** @description Signed in. Web clients also receive the refresh-token cookie. */
            200: {
                headers: {
                    "Set-Cookie": components["headers"]["SetRefreshCookie"];
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SessionResult"];
                };
            };
            /**
             * @description `INVALID_INPUT`: the body is malformed, or the provider has no ID
             *     tokens (GitHub).
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "error": "INVALID_INPUT",
                     *       "message": "body.provider names no OpenID Connect provider of this service",
                     *       "statusCode": 400
                     *     }
                     */
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description `ID_TOKEN_INVALID`: the token's signature, issuer, audience, expiry or nonce is wrong, or the token was already used. */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "error": "ID_TOKEN_INVALID",
                     *       "message": "The ID token is not valid for this service",
                     *       "statusCode": 401
                     *     }
                     */
                    "application/json": components["schemas"]["Error"];
                };
            };
            403: components["responses"]["OAuthAccountRefused"];
            409: components["responses"]["OAuthAccountUnverified"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            429: components["responses"]["TooManyRequests"];
            500: components["responses"]["InternalError"];
            502: components["responses"]["OAuthProviderUnavailable"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    listIdentities: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The identities. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "identities": [
                     *         {
                     *           "id": "0f4c6a8e-2b1d-4e3f-9a7b-5c6d7e8f9a0b",
                     *           "provider": "google",
                     *           "subject": "110248495921238986420",
                     *           "email": "ada@example.com",
                     *           "linkedAt": "2026-11-28T09:00:00.000Z"
                     *         }
                     *       ]
                     *     }
                     */
                    "application/json": components["schemas"]["IdentityList"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["MfaRequired"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    startIdentityLink: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                /**
                 * @example {
                 *       "provider": "google",
                 *       "redirect_uri": "https://app.example.com/settings/identities"
                 *     }
                 */
                "application/json": components["schemas"]["IdentityLinkRequest"];
            };
        };
        responses: {
            200: components["responses"]["OAuthAuthorizationUrl"];
            /**
             * @description `INVALID_INPUT`: the body is malformed, `provider` names no
             *     provider of this service, or `redirect_uri` is not on
             *     `AUTH_REDIRECT_ALLOWLIST`.
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "error": "INVALID_INPUT",
                     *       "message": "body.provider names no OAuth provider of this service",
                     *       "statusCode": 400
                     *     }
                     */
                    "application/json": components["schemas"]["Error"];
                };
            };
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["IdentityChangeForbidden"];
            /** @description `IDENTITY_ALREADY_LINKED`: the account already has an identity of this provider; unlink it first. */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "error": "IDENTITY_ALREADY_LINKED",
                     *       "message": "This account already has a google identity; unlink it first",
                     *       "statusCode": 409
                     *     }
                     */
                    "application/json": components["schemas"]["Error"];
                };
            };
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            429: components["responses"]["TooManyRequests"];
            500: components["responses"]["InternalError"];
            502: components["responses"]["OAuthProviderUnavailable"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    unlinkIdentity: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The identity's id (a UUID; anything else is answered `404 NOT_FOUND`). */
                identityId: components["parameters"]["IdentityId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Unlinked. */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["IdentityChangeForbidden"];
            404: components["responses"]["NotFound"];
            /** @description `LAST_SIGN_IN_METHOD`: the identity is the account's last way to sign in (no password, no other identity of a configured provider, no passkey). */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "error": "LAST_SIGN_IN_METHOD",
                     *       "message": "This identity is the account's last way to sign in; set a password, add a passkey or link another identity first",
                     *       "statusCode": 409
                     *     }
                     */
                    "application/json": components["schemas"]["Error"];
                };
            };
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    sendVerificationEmail: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                /**
                 * @example {
                 *       "email": "ada@example.com",
                 *       "redirectTo": "https://app.example.com/welcome"
                 *     }
                 */
                "application/json": components["schemas"]["SendVerificationRequest"];
            };
        };
        responses: {
            /** @description Accepted. An email is sent only when the address needs verification. */
            202: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "success": true,
                     *       "message": "If the address belongs to an account that still needs verification, an email is on its way."
                     *     }
                     */
                    "application/json": components["schemas"]["VerificationEmailAccepted"];
                };
            };
            400: components["responses"]["BadRequest"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            429: components["responses"]["TooManyRequests"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    verifyEmail: {
        parameters: {
            query?: {
                /**
                 * @description The kind of client, which decides how the refresh token travels.
                 *
                 *     - `web` (default): the refresh token is set in the HttpOnly cookie
                 *       `refresh_token` (scoped to `Path=/api/auth`) and never appears in the
                 *       body (`refreshToken: null`). The body carries a `csrfToken`, which
                 *       the client sends back in the `X-CSRF-Token` header when it refreshes
                 *       or logs out.
                 *     - `mobile`, `desktop`: no cookie is set; the refresh token is returned
                 *       in the body as `refreshToken` (`csrfToken: null`) and sent back in
                 *       the body when refreshing or logging out.
                 * @example web
                 */
                client_type?: components["parameters"]["ClientType"];
            };
            header?: never;
            path?: never;
            cookie?: {
                /**
                 * @description The binding of a web client's sign-up (HttpOnly, host-only,
                 *     `Path=/`, as long as a verification link lives), sent back by the
                 *     browser with the verification; see `POST /api/auth/users`. When the
                 *     service's cookies are Secure (the default, and always in production)
                 *     its name is `__Host-sign_up_binding`, which browsers accept only from
                 *     the service's own host, and a `sign_up_binding` cookie is ignored. A
                 *     value that is not this sign-up's binding (of any form) proves
                 *     nothing and is never refused.
                 */
                sign_up_binding?: components["parameters"]["SignUpBindingCookie"];
            };
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["VerifyEmailRequest"];
            };
        };
        responses: {
            /** @description The address is verified and a session was created. Web clients also receive the refresh-token cookie. */
            200: {
                headers: {
                    "Set-Cookie": components["headers"]["SetRefreshCookie"];
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SessionResult"];
                };
            };
            /**
             * @description `INVALID_INPUT`: the body is malformed, or the code and email are
             *     combined the wrong way. `INVALID_OTP`: the code or token is wrong,
             *     expired, already used or unknown.
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            429: components["responses"]["TooManyRequests"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    sendOtpEmail: {
        parameters: {
            query?: never;
            header?: {
                /**
                 * @description Mobile and desktop clients: the `deviceToken` of a session this
                 *     device opened before, for the same account. The same meaning as the
                 *     web clients' `device_id` cookie: its own email budget and its own
                 *     sign-in back-off for that account's address. Optional: a missing,
                 *     forged, expired or other account's token is simply not a known
                 *     device (the answers do not change).
                 * @example d1.q8Wm2Zb4TqS1nX0yLr7aHg.1811923200.4f0c…
                 */
                "X-Device-Token"?: components["parameters"]["DeviceToken"];
            };
            path?: never;
            cookie?: {
                /**
                 * @description Web clients: the known-device cookie the service set when a session
                 *     opened on this browser (HttpOnly, `Path=/api/auth`, a year). It says
                 *     that this device has signed in to the account before, signed by the
                 *     service and bound to that account, so it counts only for that
                 *     account's address. A known device has its own budget of emails
                 *     (send-otp, reset) that others cannot use up, and its own sign-in
                 *     back-off, which others' failed sign-ins do not hold back. Browsers
                 *     send it by themselves; a missing, forged, expired or other account's
                 *     cookie is simply not a known device (the answers do not change): a
                 *     value of any form is taken and ignored, never refused.
                 * @example d1.q8Wm2Zb4TqS1nX0yLr7aHg.1811923200.4f0c…
                 */
                device_id?: components["parameters"]["DeviceCookie"];
            };
        };
        requestBody: {
            content: {
                /**
                 * @example {
                 *       "email": "ada@example.com"
                 *     }
                 */
                "application/json": components["schemas"]["SendOtpRequest"];
            };
        };
        responses: {
            /** @description Accepted. A code is emailed only when the address may sign in (see above). */
            202: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "success": true,
                     *       "message": "If sign-in by email code is available for this address, a code is on its way."
                     *     }
                     */
                    "application/json": components["schemas"]["CodeEmailAccepted"];
                };
            };
            400: components["responses"]["BadRequest"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            429: components["responses"]["TooManyRequests"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    sendResetPasswordEmail: {
        parameters: {
            query?: never;
            header?: {
                /**
                 * @description Mobile and desktop clients: the `deviceToken` of a session this
                 *     device opened before, for the same account. The same meaning as the
                 *     web clients' `device_id` cookie: its own email budget and its own
                 *     sign-in back-off for that account's address. Optional: a missing,
                 *     forged, expired or other account's token is simply not a known
                 *     device (the answers do not change).
                 * @example d1.q8Wm2Zb4TqS1nX0yLr7aHg.1811923200.4f0c…
                 */
                "X-Device-Token"?: components["parameters"]["DeviceToken"];
            };
            path?: never;
            cookie?: {
                /**
                 * @description Web clients: the known-device cookie the service set when a session
                 *     opened on this browser (HttpOnly, `Path=/api/auth`, a year). It says
                 *     that this device has signed in to the account before, signed by the
                 *     service and bound to that account, so it counts only for that
                 *     account's address. A known device has its own budget of emails
                 *     (send-otp, reset) that others cannot use up, and its own sign-in
                 *     back-off, which others' failed sign-ins do not hold back. Browsers
                 *     send it by themselves; a missing, forged, expired or other account's
                 *     cookie is simply not a known device (the answers do not change): a
                 *     value of any form is taken and ignored, never refused.
                 * @example d1.q8Wm2Zb4TqS1nX0yLr7aHg.1811923200.4f0c…
                 */
                device_id?: components["parameters"]["DeviceCookie"];
            };
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["SendResetPasswordRequest"];
            };
        };
        responses: {
            /** @description Accepted. An email is sent only when the address belongs to an account that is not disabled. */
            202: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "success": true,
                     *       "message": "If the address belongs to an account, an email with a reset code and link is on its way."
                     *     }
                     */
                    "application/json": components["schemas"]["CodeEmailAccepted"];
                };
            };
            400: components["responses"]["BadRequest"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            429: components["responses"]["TooManyRequests"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    exchangeResetPasswordToken: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                /**
                 * @example {
                 *       "email": "ada@example.com",
                 *       "code": "482913"
                 *     }
                 */
                "application/json": components["schemas"]["ExchangeResetPasswordTokenRequest"];
            };
        };
        responses: {
            /** @description The code was right; it is spent. The reset token is valid until `expiresAt`. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "token": "9f2c4e1a7b3d5f60182a4c6e8b0d2f4169c3e5a7b9d1f30527496b8dacef1032",
                     *       "expiresAt": "2025-03-14T09:36:53.589Z"
                     *     }
                     */
                    "application/json": components["schemas"]["ResetPasswordToken"];
                };
            };
            400: components["responses"]["InvalidOtp"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            429: components["responses"]["TooManyRequests"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    resetPassword: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                /**
                 * @example {
                 *       "newPassword": "a new and longer passphrase",
                 *       "otp": "9f2c4e1a7b3d5f60182a4c6e8b0d2f4169c3e5a7b9d1f30527496b8dacef1032"
                 *     }
                 */
                "application/json": components["schemas"]["ResetPasswordRequest"];
            };
        };
        responses: {
            /** @description The password is set; every session of the account has ended. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "message": "Your password has been reset. Sign in with the new password."
                     *     }
                     */
                    "application/json": components["schemas"]["PasswordResetDone"];
                };
            };
            400: components["responses"]["InvalidOtp"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            429: components["responses"]["TooManyRequests"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["PasswordHashingUnavailable"];
        };
    };
    refreshSession: {
        parameters: {
            query?: {
                /**
                 * @description The kind of client, which decides how the refresh token travels.
                 *
                 *     - `web` (default): the refresh token is set in the HttpOnly cookie
                 *       `refresh_token` (scoped to `Path=/api/auth`) and never appears in the
                 *       body (`refreshToken: null`). The body carries a `csrfToken`, which
                 *       the client sends back in the `X-CSRF-Token` header when it refreshes
                 *       or logs out.
                 *     - `mobile`, `desktop`: no cookie is set; the refresh token is returned
                 *       in the body as `refreshToken` (`csrfToken: null`) and sent back in
                 *       the body when refreshing or logging out.
                 * @example web
                 */
                client_type?: components["parameters"]["ClientType"];
            };
            header?: {
                /**
                 * @description The `csrfToken` returned with the session. Required for web clients
                 *     (whose refresh token travels in the cookie); ignored for mobile and
                 *     desktop clients.
                 * @example BMQ0--RAd6oi3JYwYqk1d980v6d_lbdwbAYK-0G8UPQ
                 */
                "X-CSRF-Token"?: components["parameters"]["CsrfToken"];
            };
            path?: never;
            cookie?: {
                /**
                 * @description The refresh token of a web client, set by the service as an HttpOnly
                 *     cookie scoped to `/api/auth`. Browsers send it automatically; it is not
                 *     readable by page scripts. A browser may send several `refresh_token`
                 *     cookies (one planted by another host of the site on a longer path,
                 *     such as `/api/auth/refresh`, comes first): refresh and logout look at
                 *     each one sent (at most 8), in order, and use the first whose session
                 *     matches the client type and the `X-CSRF-Token` header, so a planted
                 *     cookie cannot block the session. Every answer that sets or clears the
                 *     cookie also expires its variants on `/api/auth/`,
                 *     `/api/auth/refresh` and `/api/auth/logout`.
                 * @example pzRr3YP0PxKdC6W0P3u_r5AnV17-IeYpnDKdYN6nD94
                 */
                refresh_token?: components["parameters"]["RefreshCookie"];
            };
        };
        requestBody?: {
            content: {
                "application/json": components["schemas"]["RefreshRequest"];
            };
        };
        responses: {
            /** @description A new access token and a rotated refresh token. Web clients receive the new refresh token in the cookie. */
            200: {
                headers: {
                    "Set-Cookie": components["headers"]["SetRefreshCookie"];
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SessionResult"];
                };
            };
            400: components["responses"]["BadRequest"];
            /**
             * @description `REFRESH_TOKEN_INVALID`: the refresh token is missing, unknown,
             *     expired or revoked. `REFRESH_TOKEN_REUSED`: the refresh token was
             *     already exchanged; the session has been revoked.
             */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description `CSRF_INVALID`: a web client sent no `X-CSRF-Token` header, or one that does not match the session. */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "error": "CSRF_INVALID",
                     *       "message": "The X-CSRF-Token header is missing or does not match the session",
                     *       "statusCode": 403
                     *     }
                     */
                    "application/json": components["schemas"]["Error"];
                };
            };
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            429: components["responses"]["TooManyRequests"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    logout: {
        parameters: {
            query?: {
                /**
                 * @description The kind of client, which decides how the refresh token travels.
                 *
                 *     - `web` (default): the refresh token is set in the HttpOnly cookie
                 *       `refresh_token` (scoped to `Path=/api/auth`) and never appears in the
                 *       body (`refreshToken: null`). The body carries a `csrfToken`, which
                 *       the client sends back in the `X-CSRF-Token` header when it refreshes
                 *       or logs out.
                 *     - `mobile`, `desktop`: no cookie is set; the refresh token is returned
                 *       in the body as `refreshToken` (`csrfToken: null`) and sent back in
                 *       the body when refreshing or logging out.
                 * @example web
                 */
                client_type?: components["parameters"]["ClientType"];
            };
            header?: {
                /**
                 * @description The `csrfToken` returned with the session. Required for web clients
                 *     (whose refresh token travels in the cookie); ignored for mobile and
                 *     desktop clients.
                 * @example BMQ0--RAd6oi3JYwYqk1d980v6d_lbdwbAYK-0G8UPQ
                 */
                "X-CSRF-Token"?: components["parameters"]["CsrfToken"];
            };
            path?: never;
            cookie?: {
                /**
                 * @description The refresh token of a web client, set by the service as an HttpOnly
                 *     cookie scoped to `/api/auth`. Browsers send it automatically; it is not
                 *     readable by page scripts. A browser may send several `refresh_token`
                 *     cookies (one planted by another host of the site on a longer path,
                 *     such as `/api/auth/refresh`, comes first): refresh and logout look at
                 *     each one sent (at most 8), in order, and use the first whose session
                 *     matches the client type and the `X-CSRF-Token` header, so a planted
                 *     cookie cannot block the session. Every answer that sets or clears the
                 *     cookie also expires its variants on `/api/auth/`,
                 *     `/api/auth/refresh` and `/api/auth/logout`.
                 * @example pzRr3YP0PxKdC6W0P3u_r5AnV17-IeYpnDKdYN6nD94
                 */
                refresh_token?: components["parameters"]["RefreshCookie"];
            };
        };
        requestBody?: {
            content: {
                "application/json": components["schemas"]["RefreshRequest"];
            };
        };
        responses: {
            /** @description The session is revoked. Web clients receive a cookie that clears `refresh_token`. */
            204: {
                headers: {
                    "Set-Cookie": components["headers"]["ClearRefreshCookie"];
                    [name: string]: unknown;
                };
                content?: never;
            };
            400: components["responses"]["BadRequest"];
            /**
             * @description `REFRESH_TOKEN_INVALID`: no refresh token and no access token was
             *     presented, or the refresh token names no session (unknown, or a
             *     web token presented as mobile and the reverse). Logging out by access token: `AUTH_UNAUTHORIZED` (the
             *     token has expired or is not valid), or `SESSION_REVOKED` (its
             *     session has already ended).
             */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Error"];
                };
            };
            /** @description `CSRF_INVALID`: a web client sent no `X-CSRF-Token` header, or one that does not match the session. */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "error": "CSRF_INVALID",
                     *       "message": "The X-CSRF-Token header is missing or does not match the session",
                     *       "statusCode": 403
                     *     }
                     */
                    "application/json": components["schemas"]["Error"];
                };
            };
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            429: components["responses"]["TooManyRequests"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    changePassword: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["ChangePasswordRequest"];
            };
        };
        responses: {
            /** @description The password is set; the account's other sessions have ended. */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            /** @description `PASSWORD_INCORRECT`: the account has a password and `currentPassword` is missing or wrong. */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "error": "PASSWORD_INCORRECT",
                     *       "message": "The current password is missing or wrong",
                     *       "statusCode": 403
                     *     }
                     */
                    "application/json": components["schemas"]["Error"];
                };
            };
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            429: components["responses"]["TooManyRequests"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["PasswordHashingUnavailable"];
        };
    };
    endSession: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The session's id (`sid` in its access tokens). */
                sessionId: components["parameters"]["SessionId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Ended. */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["MfaRequired"];
            404: components["responses"]["SessionNotFound"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    getCurrentSession: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The signed-in user. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "user": {
                     *         "id": "3f1c9a2e-7b4d-4e8a-9c21-5d6e7f8a9b0c",
                     *         "email": "ada@example.com",
                     *         "profile": {
                     *           "name": "Ada Lovelace",
                     *           "avatar_url": null
                     *         },
                     *         "metadata": {},
                     *         "emailVerified": true,
                     *         "providers": [
                     *           "email"
                     *         ],
                     *         "createdAt": "2025-03-14T09:26:53.589Z",
                     *         "updatedAt": "2025-03-14T09:31:07.220Z"
                     *       },
                     *       "aal": "aal1",
                     *       "nextLevel": null
                     *     }
                     */
                    "application/json": components["schemas"]["CurrentSession"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    listFactors: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The factors. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "factors": [
                     *         {
                     *           "id": "0b6f4c1e-2d3a-4f5b-8c7d-9e0f1a2b3c4d",
                     *           "type": "totp",
                     *           "friendlyName": "Phone",
                     *           "status": "verified",
                     *           "createdAt": "2026-11-28T09:00:00.000Z",
                     *           "lastUsedAt": "2026-11-28T09:01:00.000Z"
                     *         }
                     *       ]
                     *     }
                     */
                    "application/json": components["schemas"]["FactorList"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    createFactor: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                /**
                 * @example {
                 *       "type": "totp",
                 *       "friendlyName": "Phone"
                 *     }
                 */
                "application/json": components["schemas"]["CreateFactorRequest"];
            };
        };
        responses: {
            /** @description The new, unverified factor and its secret. */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "id": "0b6f4c1e-2d3a-4f5b-8c7d-9e0f1a2b3c4d",
                     *       "type": "totp",
                     *       "friendlyName": "Phone",
                     *       "status": "unverified",
                     *       "createdAt": "2026-11-28T09:00:00.000Z",
                     *       "lastUsedAt": null,
                     *       "totp": {
                     *         "secret": "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP",
                     *         "uri": "otpauth://totp/Accounts:ada%40example.com?issuer=Accounts&secret=JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP&algorithm=SHA1&digits=6&period=30",
                     *         "qrCode": "data:image/svg+xml;base64,PHN2Zz48L3N2Zz4="
                     *       }
                     *     }
                     */
                    "application/json": components["schemas"]["EnrolledFactor"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["MfaRequired"];
            409: components["responses"]["FactorState"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    regenerateRecoveryCodes: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The new codes. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "codes": [
                     *         "k7d2-9xqm-4hfp",
                     *         "3nb8-q2wz-x6ka",
                     *         "p0c4-7rte-m9yd",
                     *         "a1s2-d3f4-g5h6",
                     *         "z9x8-c7v6-b5n4",
                     *         "q1w2-e3r4-t5y6",
                     *         "m7n8-b9v0-c1x2",
                     *         "l3k4-j5h6-g7f8",
                     *         "u9i8-o7p6-a5s4",
                     *         "r2t3-y4u5-i6o7"
                     *       ]
                     *     }
                     */
                    "application/json": components["schemas"]["RecoveryCodes"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["MfaRequired"];
            409: components["responses"]["FactorState"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    deleteFactor: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The factor's id (a UUID; anything else is answered `404 NOT_FOUND`). */
                factorId: components["parameters"]["FactorId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Removed. */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["MfaRequired"];
            404: components["responses"]["NotFound"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    verifyMfa: {
        parameters: {
            query?: {
                /**
                 * @description The kind of client, which decides how the refresh token travels.
                 *
                 *     - `web` (default): the refresh token is set in the HttpOnly cookie
                 *       `refresh_token` (scoped to `Path=/api/auth`) and never appears in the
                 *       body (`refreshToken: null`). The body carries a `csrfToken`, which
                 *       the client sends back in the `X-CSRF-Token` header when it refreshes
                 *       or logs out.
                 *     - `mobile`, `desktop`: no cookie is set; the refresh token is returned
                 *       in the body as `refreshToken` (`csrfToken: null`) and sent back in
                 *       the body when refreshing or logging out.
                 * @example web
                 */
                client_type?: components["parameters"]["ClientType"];
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["MfaVerifyRequest"];
            };
        };
        responses: {
            /** @description The session at `aal2`. */
            200: {
                headers: {
                    "Set-Cookie": components["headers"]["SetRefreshCookie"];
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SessionResult"];
                };
            };
            400: components["responses"]["InvalidOtp"];
            401: components["responses"]["Unauthorized"];
            404: components["responses"]["NotFound"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            429: components["responses"]["TooManyRequests"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    listPasskeys: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The passkeys. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "passkeys": [
                     *         {
                     *           "id": "5d7f1e3a-8b2c-4d6e-9f10-2a3b4c5d6e7f",
                     *           "friendlyName": "Work laptop",
                     *           "createdAt": "2026-11-28T09:00:00.000Z",
                     *           "lastUsedAt": "2026-11-28T09:05:00.000Z",
                     *           "backedUp": true,
                     *           "transports": [
                     *             "hybrid",
                     *             "internal"
                     *           ]
                     *         }
                     *       ]
                     *     }
                     */
                    "application/json": components["schemas"]["PasskeyList"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["MfaRequired"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    createPasskeyRegistrationOptions: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The creation options. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "rp": {
                     *         "name": "Accounts",
                     *         "id": "example.com"
                     *       },
                     *       "user": {
                     *         "id": "PxypLntNTomcIV1ufoqbDA",
                     *         "name": "ada@example.com",
                     *         "displayName": "ada@example.com"
                     *       },
                     *       "challenge": "3q2-7wq4Vn0m2sXr5b1k8hQ6xJ9cT4yL0pA7uE2nW5g",
                     *       "pubKeyCredParams": [
                     *         {
                     *           "type": "public-key",
                     *           "alg": -8
                     *         },
                     *         {
                     *           "type": "public-key",
                     *           "alg": -7
                     *         },
                     *         {
                     *           "type": "public-key",
                     *           "alg": -257
                     *         }
                     *       ],
                     *       "timeout": 300000,
                     *       "attestation": "none",
                     *       "excludeCredentials": [],
                     *       "authenticatorSelection": {
                     *         "residentKey": "required",
                     *         "requireResidentKey": true,
                     *         "userVerification": "required"
                     *       },
                     *       "extensions": {
                     *         "credProps": true
                     *       }
                     *     }
                     */
                    "application/json": components["schemas"]["PasskeyCreationOptions"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["MfaRequired"];
            409: components["responses"]["FactorState"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    verifyPasskeyRegistration: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                /**
                 * @example {
                 *       "friendlyName": "Work laptop",
                 *       "response": {
                 *         "id": "kTq0Hc2xS3e5mJ8vB1nL7w",
                 *         "rawId": "kTq0Hc2xS3e5mJ8vB1nL7w",
                 *         "type": "public-key",
                 *         "authenticatorAttachment": "platform",
                 *         "clientExtensionResults": {
                 *           "credProps": {
                 *             "rk": true
                 *           }
                 *         },
                 *         "response": {
                 *           "clientDataJSON": "eyJ0eXBlIjoid2ViYXV0aG4uY3JlYXRlIn0",
                 *           "attestationObject": "o2NmbXRkbm9uZWdhdHRTdG10oGhhdXRoRGF0YVjF",
                 *           "transports": [
                 *             "hybrid",
                 *             "internal"
                 *           ]
                 *         }
                 *       }
                 *     }
                 */
                "application/json": components["schemas"]["PasskeyRegistrationRequest"];
            };
        };
        responses: {
            /** @description The new passkey. */
            201: {
                headers: {
                    "Set-Cookie": components["headers"]["SetRefreshCookie"];
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "id": "5d7f1e3a-8b2c-4d6e-9f10-2a3b4c5d6e7f",
                     *       "friendlyName": "Work laptop",
                     *       "createdAt": "2026-11-28T09:00:00.000Z",
                     *       "lastUsedAt": null,
                     *       "backedUp": true,
                     *       "transports": [
                     *         "hybrid",
                     *         "internal"
                     *       ],
                     *       "recoveryCodes": [
                     *         "k7d2-9xqm-4hfp",
                     *         "3nb8-q2wz-x6ka",
                     *         "p0c4-7rte-m9yd",
                     *         "a1s2-d3f4-g5h6",
                     *         "z9x8-c7v6-b5n4",
                     *         "q1w2-e3r4-t5y6",
                     *         "m7n8-b9v0-c1x2",
                     *         "l3k4-j5h6-g7f8",
                     *         "u9i8-o7p6-a5s4",
                     *         "r2t3-y4u5-i6o7"
                     *       ]
                     *     }
                     */
                    "application/json": components["schemas"]["RegisteredPasskey"];
                };
            };
            400: components["responses"]["PasskeyRegistrationInvalid"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["MfaRequired"];
            409: components["responses"]["FactorState"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    createPasskeyAuthenticationOptions: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": components["schemas"]["PasskeyAuthenticationOptionsRequest"];
            };
        };
        responses: {
            /** @description The request options and the challenge's id. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "challengeId": "Zx8c4Vq2mN7pL1kR5tY9wB3dF6hJ0sA2gE4uI8oQ1nM",
                     *       "options": {
                     *         "challenge": "b2Nl-9kQ3xV7mP1zL5rT8wY2cF6hJ0sA4gE7uI1oN3q",
                     *         "timeout": 300000,
                     *         "rpId": "example.com",
                     *         "allowCredentials": [],
                     *         "userVerification": "required"
                     *       }
                     *     }
                     */
                    "application/json": components["schemas"]["PasskeyAuthenticationOptions"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            429: components["responses"]["TooManyRequests"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    verifyPasskeyAuthentication: {
        parameters: {
            query?: {
                /**
                 * @description The kind of client, which decides how the refresh token travels.
                 *
                 *     - `web` (default): the refresh token is set in the HttpOnly cookie
                 *       `refresh_token` (scoped to `Path=/api/auth`) and never appears in the
                 *       body (`refreshToken: null`). The body carries a `csrfToken`, which
                 *       the client sends back in the `X-CSRF-Token` header when it refreshes
                 *       or logs out.
                 *     - `mobile`, `desktop`: no cookie is set; the refresh token is returned
                 *       in the body as `refreshToken` (`csrfToken: null`) and sent back in
                 *       the body when refreshing or logging out.
                 * @example web
                 */
                client_type?: components["parameters"]["ClientType"];
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                /**
                 * @example {
                 *       "challengeId": "Zx8c4Vq2mN7pL1kR5tY9wB3dF6hJ0sA2gE4uI8oQ1nM",
                 *       "response": {
                 *         "id": "kTq0Hc2xS3e5mJ8vB1nL7w",
                 *         "rawId": "kTq0Hc2xS3e5mJ8vB1nL7w",
                 *         "type": "public-key",
                 *         "authenticatorAttachment": "platform",
                 *         "clientExtensionResults": {},
                 *         "response": {
                 *           "clientDataJSON": "eyJ0eXBlIjoid2ViYXV0aG4uZ2V0In0",
                 *           "authenticatorData": "SZYN5YgOjGh0NBcPZHZgW4_krrmihjLHmVzzuoMdl2MFAAAAAQ",
                 *           "signature": "MEUCIQDx3n0aVb9sZk",
                 *           "userHandle": "PxypLntNTomcIV1ufoqbDA"
                 *         }
                 *       }
                 *     }
                 */
                "application/json": components["schemas"]["PasskeyAuthenticationRequest"];
            };
        };
        responses: {
            /** @description The session at `aal2`. */
            200: {
                headers: {
                    "Set-Cookie": components["headers"]["SetRefreshCookie"];
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SessionResult"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["PasskeyRefused"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            429: components["responses"]["TooManyRequests"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    deletePasskey: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The passkey's id (a UUID; anything else is answered `404 NOT_FOUND`). */
                passkeyId: components["parameters"]["PasskeyId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Removed. */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["MfaRequired"];
            404: components["responses"]["NotFound"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    updatePasskey: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The passkey's id (a UUID; anything else is answered `404 NOT_FOUND`). */
                passkeyId: components["parameters"]["PasskeyId"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                /**
                 * @example {
                 *       "friendlyName": "Work laptop"
                 *     }
                 */
                "application/json": components["schemas"]["UpdatePasskeyRequest"];
            };
        };
        responses: {
            /** @description The passkey. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "id": "5d7f1e3a-8b2c-4d6e-9f10-2a3b4c5d6e7f",
                     *       "friendlyName": "Work laptop",
                     *       "createdAt": "2026-11-28T09:00:00.000Z",
                     *       "lastUsedAt": "2026-11-28T09:05:00.000Z",
                     *       "backedUp": true,
                     *       "transports": [
                     *         "hybrid",
                     *         "internal"
                     *       ]
                     *     }
                     */
                    "application/json": components["schemas"]["Passkey"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["MfaRequired"];
            404: components["responses"]["NotFound"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    getProfile: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The user's id (a UUID; anything else is answered `404 NOT_FOUND`). */
                userId: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The user's id and public profile. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "id": "3f1c9a2e-7b4d-4e8a-9c21-5d6e7f8a9b0c",
                     *       "profile": {
                     *         "name": "Ada Lovelace",
                     *         "avatar_url": "https://cdn.example.com/avatars/ada.png",
                     *         "bio": "Analyst",
                     *         "birth_year": 1815
                     *       }
                     *     }
                     */
                    "application/json": components["schemas"]["UserProfile"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["MfaRequired"];
            404: components["responses"]["UserNotFound"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    updateCurrentProfile: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["UpdateProfileRequest"];
            };
        };
        responses: {
            /** @description The user's id and the profile as stored after the merge. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "id": "3f1c9a2e-7b4d-4e8a-9c21-5d6e7f8a9b0c",
                     *       "profile": {
                     *         "name": "Ada Lovelace",
                     *         "avatar_url": "https://cdn.example.com/avatars/ada.png",
                     *         "bio": "Analyst"
                     *       }
                     *     }
                     */
                    "application/json": components["schemas"]["UserProfile"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["MfaRequired"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    getPublicAuthConfig: {
        parameters: {
            query?: never;
            header?: {
                /**
                 * @description The `ETag` of an answer the client keeps (a list of them, or `*`); at most 1024 characters.
                 * @example "3q2-7w"
                 */
                "If-None-Match"?: string;
            };
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The public configuration. */
            200: {
                headers: {
                    ETag: components["headers"]["PublicConfigETag"];
                    "Cache-Control": components["headers"]["PublicConfigCacheControl"];
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "oAuthProviders": [],
                     *       "customOAuthProviders": [],
                     *       "requireEmailVerification": true,
                     *       "passwordMinLength": 8,
                     *       "passwordMaxLength": 256,
                     *       "requireNumber": false,
                     *       "requireLowercase": false,
                     *       "requireUppercase": false,
                     *       "requireSpecialChar": false,
                     *       "verifyEmailMethod": "code",
                     *       "resetPasswordMethod": "code",
                     *       "disableSignup": false,
                     *       "redirectUrl": "https://app.example.com/welcome",
                     *       "verifyEmailUrl": "https://accounts.example.com/auth/verify-email",
                     *       "resetPasswordUrl": "https://accounts.example.com/auth/reset-password",
                     *       "mfaFactorTypes": [
                     *         "totp",
                     *         "passkey"
                     *       ],
                     *       "mfaRequiredForAdmins": false
                     *     }
                     */
                    "application/json": components["schemas"]["PublicAuthConfig"];
                };
            };
            /** @description The configuration has not changed since the answer whose `ETag` the request named. */
            304: {
                headers: {
                    ETag: components["headers"]["PublicConfigETag"];
                    "Cache-Control": components["headers"]["PublicConfigCacheControl"];
                    [name: string]: unknown;
                };
                content?: never;
            };
            400: components["responses"]["BadRequest"];
            500: components["responses"]["InternalError"];
        };
    };
    listAuditEvents: {
        parameters: {
            query?: {
                /**
                 * @description Only the events about this account (its `userId`; the account may since have been deleted).
                 * @example 7c9e6679-7425-40de-944b-e07fc1f90ae7
                 */
                userId?: string;
                /**
                 * @description Only events of these types, comma-separated (`sign_in,logout`).
                 * @example sign_in,logout
                 */
                type?: components["schemas"]["AuditEventTypeList"];
                /**
                 * @description Only events that occurred at or after this instant (RFC 3339).
                 * @example 2026-11-01T00:00:00Z
                 */
                since?: components["parameters"]["AuditSince"];
                /**
                 * @description Only events that occurred before this instant (RFC 3339).
                 * @example 2026-12-01T00:00:00Z
                 */
                until?: components["parameters"]["AuditUntil"];
                /**
                 * @description The `nextCursor` of the previous page: this page continues after
                 *     it. Opaque: pass it back as it came.
                 * @example AAAAAAAABBI
                 */
                cursor?: components["parameters"]["AuditCursor"];
                /**
                 * @description Maximum number of events to return (an integer from 1 to 200, without leading zeros).
                 * @example 50
                 */
                limit?: components["parameters"]["AuditLimit"];
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description One page of audit events, newest first. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "events": [
                     *         {
                     *           "id": "1042",
                     *           "occurredAt": "2026-11-27T09:14:03.512Z",
                     *           "type": "sign_in",
                     *           "outcome": "success",
                     *           "method": "password",
                     *           "actorId": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
                     *           "userId": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
                     *           "sessionId": "0f3c2b1a-9d8e-4f7a-8b6c-5d4e3f2a1b0c",
                     *           "ip": "203.0.113.7",
                     *           "userAgent": "Mozilla/5.0 (X11; Linux x86_64)",
                     *           "details": {
                     *             "clientType": "web",
                     *             "aal": "aal1"
                     *           }
                     *         }
                     *       ],
                     *       "nextCursor": "AAAAAAAABBI"
                     *     }
                     */
                    "application/json": components["schemas"]["AuditEventList"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["Forbidden"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    listOwnAuditEvents: {
        parameters: {
            query?: {
                /**
                 * @description Only events of these types, comma-separated (`sign_in,session_ended`).
                 * @example sign_in
                 */
                type?: components["schemas"]["OwnAuditEventTypeList"];
                /**
                 * @description Only events that occurred at or after this instant (RFC 3339).
                 * @example 2026-11-01T00:00:00Z
                 */
                since?: components["parameters"]["AuditSince"];
                /**
                 * @description Only events that occurred before this instant (RFC 3339).
                 * @example 2026-12-01T00:00:00Z
                 */
                until?: components["parameters"]["AuditUntil"];
                /**
                 * @description The `nextCursor` of the previous page: this page continues after
                 *     it. Opaque: pass it back as it came.
                 * @example AAAAAAAABBI
                 */
                cursor?: components["parameters"]["AuditCursor"];
                /**
                 * @description Maximum number of events to return (an integer from 1 to 200, without leading zeros).
                 * @example 50
                 */
                limit?: components["parameters"]["AuditLimit"];
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description One page of the caller's sign-ins and session ends, newest first. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "events": [
                     *         {
                     *           "id": "1042",
                     *           "occurredAt": "2026-11-27T09:14:03.512Z",
                     *           "type": "sign_in",
                     *           "outcome": "success",
                     *           "method": "password",
                     *           "actorId": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
                     *           "userId": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
                     *           "sessionId": "0f3c2b1a-9d8e-4f7a-8b6c-5d4e3f2a1b0c",
                     *           "ip": "203.0.113.7",
                     *           "userAgent": "Mozilla/5.0 (X11; Linux x86_64)",
                     *           "details": {
                     *             "clientType": "web",
                     *             "aal": "aal1"
                     *           }
                     *         }
                     *       ],
                     *       "nextCursor": null
                     *     }
                     */
                    "application/json": components["schemas"]["AuditEventList"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["MfaRequired"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    listWebhookDeliveries: {
        parameters: {
            query?: {
                /**
                 * @description Only the events in this state.
                 * @example failed
                 */
                status?: components["schemas"]["WebhookDeliveryStatus"];
                /**
                 * @description The `nextCursor` of the previous page: this page continues after
                 *     it. Opaque: pass it back as it came.
                 * @example AAABmsSXVXgLXjwdjypMa559Gis8TV5v
                 */
                cursor?: string;
                /**
                 * @description Maximum number of events to return (an integer from 1 to 100, without leading zeros).
                 * @example 50
                 */
                limit?: string;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description One page of webhook events, newest first. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "deliveries": [
                     *         {
                     *           "id": "0b5e3c1d-8f2a-4c6b-9e7d-1a2b3c4d5e6f",
                     *           "eventType": "user.created",
                     *           "status": "failed",
                     *           "attempts": 35,
                     *           "createdAt": "2026-11-27T09:14:03.512Z",
                     *           "lastAttemptAt": "2026-11-28T08:51:40.027Z",
                     *           "nextAttemptAt": null,
                     *           "lastStatus": 503,
                     *           "lastError": "answered HTTP 503",
                     *           "deliveredAt": null,
                     *           "payload": {
                     *             "type": "user.created",
                     *             "timestamp": "2026-11-27T09:14:03.512Z",
                     *             "data": {
                     *               "userId": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
                     *               "email": "ada@example.com",
                     *               "actorId": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
                     *               "auditEvent": "sign_up"
                     *             }
                     *           }
                     *         }
                     *       ],
                     *       "nextCursor": null
                     *     }
                     */
                    "application/json": components["schemas"]["WebhookDeliveryList"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["Forbidden"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    listSigningKeys: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The keys. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "keys": [
                     *         {
                     *           "kid": "8pQm2T0cYwXbRZ4oKqJv1A",
                     *           "alg": "ES256",
                     *           "status": "current",
                     *           "createdAt": "2026-11-27T09:00:00.000Z",
                     *           "activatedAt": "2026-11-27T09:00:00.000Z",
                     *           "retiredAt": null,
                     *           "revokedAt": null
                     *         }
                     *       ]
                     *     }
                     */
                    "application/json": components["schemas"]["SigningKeyList"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["Forbidden"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    createSigningKey: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: {
            content: {
                /**
                 * @example {
                 *       "alg": "ES256"
                 *     }
                 */
                "application/json": components["schemas"]["CreateSigningKeyRequest"];
            };
        };
        responses: {
            /** @description The new standby key. */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "kid": "8pQm2T0cYwXbRZ4oKqJv1A",
                     *       "alg": "ES256",
                     *       "status": "standby",
                     *       "createdAt": "2026-11-27T09:00:00.000Z",
                     *       "activatedAt": null,
                     *       "retiredAt": null,
                     *       "revokedAt": null
                     *     }
                     */
                    "application/json": components["schemas"]["SigningKey"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["Forbidden"];
            409: components["responses"]["SigningKeyState"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    rotateSigningKeys: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The keys after the rotation. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "keys": [
                     *         {
                     *           "kid": "2bX9qWc1mNfT7rLs0Hk4Yg",
                     *           "alg": "ES256",
                     *           "status": "current",
                     *           "createdAt": "2026-11-27T09:00:00.000Z",
                     *           "activatedAt": "2026-12-27T09:00:00.000Z",
                     *           "retiredAt": null,
                     *           "revokedAt": null
                     *         },
                     *         {
                     *           "kid": "8pQm2T0cYwXbRZ4oKqJv1A",
                     *           "alg": "ES256",
                     *           "status": "previous",
                     *           "createdAt": "2026-10-27T09:00:00.000Z",
                     *           "activatedAt": "2026-10-27T09:00:00.000Z",
                     *           "retiredAt": "2026-12-27T09:00:00.000Z",
                     *           "revokedAt": null
                     *         }
                     *       ]
                     *     }
                     */
                    "application/json": components["schemas"]["SigningKeyList"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["Forbidden"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    revokeSigningKey: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The key's id (the `kid` of its tokens and of its JWK). */
                kid: components["schemas"]["KeyId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The revoked key. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "kid": "8pQm2T0cYwXbRZ4oKqJv1A",
                     *       "alg": "ES256",
                     *       "status": "revoked",
                     *       "createdAt": "2026-10-27T09:00:00.000Z",
                     *       "activatedAt": "2026-10-27T09:00:00.000Z",
                     *       "retiredAt": "2026-11-27T09:00:00.000Z",
                     *       "revokedAt": "2026-11-28T09:00:00.000Z"
                     *     }
                     */
                    "application/json": components["schemas"]["SigningKey"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["Forbidden"];
            404: components["responses"]["NotFound"];
            409: components["responses"]["SigningKeyState"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    createEmbeddings: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["EmbeddingsRequest"];
            };
        };
        responses: {
            /** @description The embeddings, one per input, in input order. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["EmbeddingsResponse"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["MfaRequired"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            429: components["responses"]["TooManyRequests"];
            500: components["responses"]["InternalError"];
            502: components["responses"]["BadGateway"];
            503: components["responses"]["ServiceUnavailable"];
            504: components["responses"]["GatewayTimeout"];
        };
    };
    getRealtimePermissions: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The subscribe and publish policies. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "subscribe": {
                     *         "policies": [
                     *           {
                     *             "policyName": "authenticated_can_subscribe_enabled_channels",
                     *             "tableName": "channels",
                     *             "command": "SELECT",
                     *             "roles": [
                     *               "authenticated"
                     *             ],
                     *             "using": "(enabled AND (realtime.channel_name() ~~ pattern))",
                     *             "withCheck": null
                     *           }
                     *         ]
                     *       },
                     *       "publish": {
                     *         "policies": [
                     *           {
                     *             "policyName": "authenticated_can_publish_as_self",
                     *             "tableName": "messages",
                     *             "command": "INSERT",
                     *             "roles": [
                     *               "authenticated"
                     *             ],
                     *             "using": null,
                     *             "withCheck": "((sender_id = auth.uid()) AND (channel_name = realtime.channel_name()) AND (EXISTS ( SELECT 1\n   FROM realtime.channels c\n  WHERE (c.enabled AND (realtime.channel_name() ~~ c.pattern) AND ((messages.channel_id IS NULL) OR (c.id = messages.channel_id))))))"
                     *           },
                     *           {
                     *             "policyName": "authenticated_can_read_subscribable_channels",
                     *             "tableName": "messages",
                     *             "command": "SELECT",
                     *             "roles": [
                     *               "authenticated"
                     *             ],
                     *             "using": "((channel_name = realtime.channel_name()) AND (EXISTS ( SELECT 1\n   FROM realtime.channels c\n  WHERE (c.enabled AND (realtime.channel_name() ~~ c.pattern)))))",
                     *             "withCheck": null
                     *           }
                     *         ]
                     *       }
                     *     }
                     */
                    "application/json": components["schemas"]["RealtimePermissions"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["MfaRequired"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    listRealtimeChannels: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description All channels. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "channels": [
                     *         {
                     *           "id": "0b4f3b8e-4c0e-4f4e-9a57-1d2c3b4a5f60",
                     *           "pattern": "order:%",
                     *           "description": "Order-specific events (order:123)",
                     *           "enabled": true,
                     *           "createdAt": "2026-11-21T09:30:00.000Z",
                     *           "updatedAt": "2026-11-21T09:30:00.000Z"
                     *         }
                     *       ]
                     *     }
                     */
                    "application/json": components["schemas"]["ChannelList"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["Forbidden"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    createRealtimeChannel: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                /**
                 * @example {
                 *       "pattern": "order:%",
                 *       "description": "Order-specific events (order:123)"
                 *     }
                 */
                "application/json": components["schemas"]["CreateChannelRequest"];
            };
        };
        responses: {
            /** @description The channel was created. */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "id": "0b4f3b8e-4c0e-4f4e-9a57-1d2c3b4a5f60",
                     *       "pattern": "order:%",
                     *       "description": "Order-specific events (order:123)",
                     *       "enabled": true,
                     *       "createdAt": "2026-11-21T09:30:00.000Z",
                     *       "updatedAt": "2026-11-21T09:30:00.000Z"
                     *     }
                     */
                    "application/json": components["schemas"]["Channel"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["Forbidden"];
            409: components["responses"]["Conflict"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    deleteRealtimeChannel: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The channel's id. */
                channelId: components["parameters"]["ChannelId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The channel was deleted. */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["Forbidden"];
            404: components["responses"]["NotFound"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    updateRealtimeChannel: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The channel's id. */
                channelId: components["parameters"]["ChannelId"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                /**
                 * @example {
                 *       "enabled": false
                 *     }
                 */
                "application/json": components["schemas"]["UpdateChannelRequest"];
            };
        };
        responses: {
            /** @description The channel as updated. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "id": "0b4f3b8e-4c0e-4f4e-9a57-1d2c3b4a5f60",
                     *       "pattern": "order:%",
                     *       "description": "Order-specific events (order:123)",
                     *       "enabled": false,
                     *       "createdAt": "2026-11-21T09:30:00.000Z",
                     *       "updatedAt": "2026-11-21T10:05:00.000Z"
                     *     }
                     */
                    "application/json": components["schemas"]["Channel"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["Forbidden"];
            404: components["responses"]["NotFound"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    listRealtimeMessages: {
        parameters: {
            query: {
                /** @description The channel, as subscribed to. */
                channel: components["schemas"]["ChannelName"];
                /** @description Return only messages after this one (its `messageId`). */
                after?: string;
                /** @description Maximum number of messages to return (an integer from 1 to 1000, without leading zeros). */
                limit?: string;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description One page of the channel's history. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "messages": [
                     *         {
                     *           "messageId": "5d0a4c9e-2f7b-4e61-8c3a-9b1e2d3f4a5b",
                     *           "channel": "order:123",
                     *           "event": "status_changed",
                     *           "payload": {
                     *             "status": "shipped"
                     *           },
                     *           "senderType": "user",
                     *           "senderId": "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a",
                     *           "timestamp": "2026-11-21T10:06:00.123Z"
                     *         }
                     *       ],
                     *       "hasMore": false
                     *     }
                     */
                    "application/json": components["schemas"]["RealtimeMessageList"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["MfaRequired"];
            404: components["responses"]["NotFound"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
    publishRealtimeMessage: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                /**
                 * @example {
                 *       "channel": "order:123",
                 *       "event": "status_changed",
                 *       "payload": {
                 *         "status": "shipped"
                 *       }
                 *     }
                 */
                "application/json": components["schemas"]["PublishMessageRequest"];
            };
        };
        responses: {
            /** @description The message was accepted and is being delivered. */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    /**
                     * @example {
                     *       "messageId": "5d0a4c9e-2f7b-4e61-8c3a-9b1e2d3f4a5b",
                     *       "channel": "order:123",
                     *       "event": "status_changed",
                     *       "payload": {
                     *         "status": "shipped"
                     *       },
                     *       "senderType": "user",
                     *       "senderId": "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a",
                     *       "timestamp": "2026-11-21T10:06:00.123Z"
                     *     }
                     */
                    "application/json": components["schemas"]["RealtimeMessage"];
                };
            };
            400: components["responses"]["BadRequest"];
            401: components["responses"]["Unauthorized"];
            403: components["responses"]["Forbidden"];
            413: components["responses"]["PayloadTooLarge"];
            415: components["responses"]["UnsupportedMediaType"];
            429: components["responses"]["TooManyRequests"];
            500: components["responses"]["InternalError"];
            503: components["responses"]["ServiceUnavailable"];
        };
    };
}
