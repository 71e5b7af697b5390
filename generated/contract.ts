// Generated from openapi.yaml by `npm run generate`. Do not edit.

/** Every operation of the contract, by operationId. */
export const operations = {
  "getHealth": {
    "method": "GET",
    "path": "/api/health",
    "tag": "health",
    "secured": false,
    "bearer": false,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  },
  "getMetrics": {
    "method": "GET",
    "path": "/metrics",
    "tag": "metrics",
    "secured": true,
    "bearer": false,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  },
  "getJwks": {
    "method": "GET",
    "path": "/.well-known/jwks.json",
    "tag": "signing-keys",
    "secured": false,
    "bearer": false,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  },
  "getOpenIdConfiguration": {
    "method": "GET",
    "path": "/.well-known/openid-configuration",
    "tag": "signing-keys",
    "secured": false,
    "bearer": false,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  },
  "listUsers": {
    "method": "GET",
    "path": "/api/auth/users",
    "tag": "users",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": [
      "admin"
    ],
    "rateLimits": [],
    "aal": "account"
  },
  "createUser": {
    "method": "POST",
    "path": "/api/auth/users",
    "tag": "auth",
    "secured": false,
    "bearer": false,
    "optionalBearer": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false,
    "roles": null,
    "rateLimits": [
      {
        "name": "signUp",
        "by": "ip"
      }
    ],
    "aal": "account"
  },
  "deleteUsers": {
    "method": "DELETE",
    "path": "/api/auth/users",
    "tag": "users",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false,
    "roles": [
      "admin"
    ],
    "rateLimits": [],
    "aal": "account"
  },
  "getUser": {
    "method": "GET",
    "path": "/api/auth/users/{userId}",
    "tag": "users",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": [
      "admin"
    ],
    "rateLimits": [],
    "aal": "account"
  },
  "updateUser": {
    "method": "PATCH",
    "path": "/api/auth/users/{userId}",
    "tag": "users",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false,
    "roles": [
      "admin"
    ],
    "rateLimits": [],
    "aal": "account"
  },
  "deleteUserFactors": {
    "method": "DELETE",
    "path": "/api/auth/users/{userId}/factors",
    "tag": "users",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": [
      "admin"
    ],
    "rateLimits": [],
    "aal": "account"
  },
  "listUserSessions": {
    "method": "GET",
    "path": "/api/auth/users/{userId}/sessions",
    "tag": "users",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": [
      "admin"
    ],
    "rateLimits": [],
    "aal": "account"
  },
  "endUserSessions": {
    "method": "DELETE",
    "path": "/api/auth/users/{userId}/sessions",
    "tag": "users",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": [
      "admin"
    ],
    "rateLimits": [],
    "aal": "account"
  },
  "listSessions": {
    "method": "GET",
    "path": "/api/auth/sessions",
    "tag": "auth",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  },
  "endSessions": {
    "method": "DELETE",
    "path": "/api/auth/sessions",
    "tag": "auth",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  },
  "createSession": {
    "method": "POST",
    "path": "/api/auth/sessions",
    "tag": "auth",
    "secured": false,
    "bearer": false,
    "optionalBearer": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false,
    "roles": null,
    "rateLimits": [
      {
        "name": "signIn",
        "by": "ip"
      }
    ],
    "aal": "account"
  },
  "getOAuthAuthorizationUrl": {
    "method": "GET",
    "path": "/api/auth/oauth/{provider}",
    "tag": "oauth",
    "secured": false,
    "bearer": false,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": null,
    "rateLimits": [
      {
        "name": "signIn",
        "by": "ip"
      }
    ],
    "aal": "account"
  },
  "getCustomOAuthAuthorizationUrl": {
    "method": "GET",
    "path": "/api/auth/oauth/custom/{provider}",
    "tag": "oauth",
    "secured": false,
    "bearer": false,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": null,
    "rateLimits": [
      {
        "name": "signIn",
        "by": "ip"
      }
    ],
    "aal": "account"
  },
  "handleOAuthCallback": {
    "method": "GET",
    "path": "/api/auth/oauth/{provider}/callback",
    "tag": "oauth",
    "secured": false,
    "bearer": false,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": true,
    "roles": null,
    "rateLimits": [
      {
        "name": "signIn",
        "by": "ip"
      }
    ],
    "aal": "account"
  },
  "exchangeOAuthCode": {
    "method": "POST",
    "path": "/api/auth/oauth/exchange",
    "tag": "oauth",
    "secured": false,
    "bearer": false,
    "optionalBearer": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false,
    "roles": null,
    "rateLimits": [
      {
        "name": "verify",
        "by": "ip"
      }
    ],
    "aal": "account"
  },
  "signInWithIdToken": {
    "method": "POST",
    "path": "/api/auth/id-token",
    "tag": "oauth",
    "secured": false,
    "bearer": false,
    "optionalBearer": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false,
    "roles": null,
    "rateLimits": [
      {
        "name": "signIn",
        "by": "ip"
      }
    ],
    "aal": "account"
  },
  "listIdentities": {
    "method": "GET",
    "path": "/api/auth/identities",
    "tag": "identities",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  },
  "startIdentityLink": {
    "method": "POST",
    "path": "/api/auth/identities",
    "tag": "identities",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": true,
    "bodyLimit": 4096,
    "openQuery": false,
    "roles": null,
    "rateLimits": [
      {
        "name": "signIn",
        "by": "ip"
      }
    ],
    "aal": "account"
  },
  "unlinkIdentity": {
    "method": "DELETE",
    "path": "/api/auth/identities/{identityId}",
    "tag": "identities",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  },
  "sendVerificationEmail": {
    "method": "POST",
    "path": "/api/auth/email/send-verification",
    "tag": "auth",
    "secured": false,
    "bearer": false,
    "optionalBearer": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false,
    "roles": null,
    "rateLimits": [
      {
        "name": "sendVerification",
        "by": "ip"
      }
    ],
    "aal": "account"
  },
  "verifyEmail": {
    "method": "POST",
    "path": "/api/auth/email/verify",
    "tag": "auth",
    "secured": false,
    "bearer": false,
    "optionalBearer": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false,
    "roles": null,
    "rateLimits": [
      {
        "name": "verify",
        "by": "ip"
      }
    ],
    "aal": "account"
  },
  "sendOtpEmail": {
    "method": "POST",
    "path": "/api/auth/email/send-otp",
    "tag": "auth",
    "secured": false,
    "bearer": false,
    "optionalBearer": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false,
    "roles": null,
    "rateLimits": [
      {
        "name": "sendVerification",
        "by": "ip"
      }
    ],
    "aal": "account"
  },
  "sendResetPasswordEmail": {
    "method": "POST",
    "path": "/api/auth/email/send-reset-password",
    "tag": "auth",
    "secured": false,
    "bearer": false,
    "optionalBearer": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false,
    "roles": null,
    "rateLimits": [
      {
        "name": "sendVerification",
        "by": "ip"
      }
    ],
    "aal": "account"
  },
  "exchangeResetPasswordToken": {
    "method": "POST",
    "path": "/api/auth/email/exchange-reset-password-token",
    "tag": "auth",
    "secured": false,
    "bearer": false,
    "optionalBearer": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false,
    "roles": null,
    "rateLimits": [
      {
        "name": "verify",
        "by": "ip"
      }
    ],
    "aal": "account"
  },
  "resetPassword": {
    "method": "POST",
    "path": "/api/auth/email/reset-password",
    "tag": "auth",
    "secured": false,
    "bearer": false,
    "optionalBearer": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false,
    "roles": null,
    "rateLimits": [
      {
        "name": "verify",
        "by": "ip"
      }
    ],
    "aal": "account"
  },
  "refreshSession": {
    "method": "POST",
    "path": "/api/auth/refresh",
    "tag": "auth",
    "secured": false,
    "bearer": false,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": 16384,
    "openQuery": false,
    "roles": null,
    "rateLimits": [
      {
        "name": "refresh",
        "by": "ip"
      }
    ],
    "aal": "account"
  },
  "logout": {
    "method": "POST",
    "path": "/api/auth/logout",
    "tag": "auth",
    "secured": false,
    "bearer": false,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": 16384,
    "openQuery": false,
    "roles": null,
    "rateLimits": [
      {
        "name": "refresh",
        "by": "ip"
      }
    ],
    "aal": "account"
  },
  "changePassword": {
    "method": "POST",
    "path": "/api/auth/password",
    "tag": "auth",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  },
  "endSession": {
    "method": "DELETE",
    "path": "/api/auth/sessions/{sessionId}",
    "tag": "auth",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  },
  "getCurrentSession": {
    "method": "GET",
    "path": "/api/auth/sessions/current",
    "tag": "auth",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "aal1"
  },
  "listFactors": {
    "method": "GET",
    "path": "/api/auth/factors",
    "tag": "mfa",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "aal1"
  },
  "createFactor": {
    "method": "POST",
    "path": "/api/auth/factors",
    "tag": "mfa",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": true,
    "bodyLimit": 1024,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  },
  "regenerateRecoveryCodes": {
    "method": "POST",
    "path": "/api/auth/factors/recovery-codes",
    "tag": "mfa",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  },
  "deleteFactor": {
    "method": "DELETE",
    "path": "/api/auth/factors/{factorId}",
    "tag": "mfa",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  },
  "verifyMfa": {
    "method": "POST",
    "path": "/api/auth/mfa/verify",
    "tag": "mfa",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": true,
    "bodyLimit": 1024,
    "openQuery": false,
    "roles": null,
    "rateLimits": [
      {
        "name": "verify",
        "by": "ip"
      }
    ],
    "aal": "aal1"
  },
  "listPasskeys": {
    "method": "GET",
    "path": "/api/auth/passkeys",
    "tag": "passkeys",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  },
  "createPasskeyRegistrationOptions": {
    "method": "POST",
    "path": "/api/auth/passkeys/registration/options",
    "tag": "passkeys",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  },
  "verifyPasskeyRegistration": {
    "method": "POST",
    "path": "/api/auth/passkeys/registration/verify",
    "tag": "passkeys",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": true,
    "bodyLimit": 32768,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  },
  "createPasskeyAuthenticationOptions": {
    "method": "POST",
    "path": "/api/auth/passkeys/authentication/options",
    "tag": "passkeys",
    "secured": false,
    "bearer": false,
    "optionalBearer": true,
    "bodyRequired": false,
    "bodyLimit": 1024,
    "openQuery": false,
    "roles": null,
    "rateLimits": [
      {
        "name": "signIn",
        "by": "ip"
      }
    ],
    "aal": "aal1"
  },
  "verifyPasskeyAuthentication": {
    "method": "POST",
    "path": "/api/auth/passkeys/authentication/verify",
    "tag": "passkeys",
    "secured": false,
    "bearer": false,
    "optionalBearer": true,
    "bodyRequired": true,
    "bodyLimit": 32768,
    "openQuery": false,
    "roles": null,
    "rateLimits": [
      {
        "name": "verify",
        "by": "ip"
      }
    ],
    "aal": "aal1"
  },
  "updatePasskey": {
    "method": "PATCH",
    "path": "/api/auth/passkeys/{passkeyId}",
    "tag": "passkeys",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": true,
    "bodyLimit": 1024,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  },
  "deletePasskey": {
    "method": "DELETE",
    "path": "/api/auth/passkeys/{passkeyId}",
    "tag": "passkeys",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  },
  "getProfile": {
    "method": "GET",
    "path": "/api/auth/profiles/{userId}",
    "tag": "profiles",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  },
  "updateCurrentProfile": {
    "method": "PATCH",
    "path": "/api/auth/profiles/current",
    "tag": "profiles",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  },
  "getPublicAuthConfig": {
    "method": "GET",
    "path": "/api/auth/public-config",
    "tag": "auth",
    "secured": false,
    "bearer": false,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  },
  "listAuditEvents": {
    "method": "GET",
    "path": "/api/auth/audit-log",
    "tag": "audit",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": [
      "admin"
    ],
    "rateLimits": [],
    "aal": "account"
  },
  "listOwnAuditEvents": {
    "method": "GET",
    "path": "/api/auth/audit-log/me",
    "tag": "audit",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  },
  "listWebhookDeliveries": {
    "method": "GET",
    "path": "/api/auth/webhook-deliveries",
    "tag": "webhooks",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": [
      "admin"
    ],
    "rateLimits": [],
    "aal": "account"
  },
  "listSigningKeys": {
    "method": "GET",
    "path": "/api/auth/signing-keys",
    "tag": "signing-keys",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": [
      "admin"
    ],
    "rateLimits": [],
    "aal": "account"
  },
  "createSigningKey": {
    "method": "POST",
    "path": "/api/auth/signing-keys",
    "tag": "signing-keys",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": 1024,
    "openQuery": false,
    "roles": [
      "admin"
    ],
    "rateLimits": [],
    "aal": "account"
  },
  "rotateSigningKeys": {
    "method": "POST",
    "path": "/api/auth/signing-keys/rotate",
    "tag": "signing-keys",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": [
      "admin"
    ],
    "rateLimits": [],
    "aal": "account"
  },
  "revokeSigningKey": {
    "method": "POST",
    "path": "/api/auth/signing-keys/{kid}/revoke",
    "tag": "signing-keys",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": [
      "admin"
    ],
    "rateLimits": [],
    "aal": "account"
  },
  "createEmbeddings": {
    "method": "POST",
    "path": "/api/ai/embeddings",
    "tag": "embeddings",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": true,
    "bodyLimit": 8388608,
    "openQuery": false,
    "roles": null,
    "rateLimits": [
      {
        "name": "embeddings",
        "by": "user"
      }
    ],
    "aal": "account"
  },
  "getRealtimePermissions": {
    "method": "GET",
    "path": "/api/realtime/permissions",
    "tag": "realtime",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  },
  "listRealtimeChannels": {
    "method": "GET",
    "path": "/api/realtime/channels",
    "tag": "realtime",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": [
      "admin"
    ],
    "rateLimits": [],
    "aal": "account"
  },
  "createRealtimeChannel": {
    "method": "POST",
    "path": "/api/realtime/channels",
    "tag": "realtime",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false,
    "roles": [
      "admin"
    ],
    "rateLimits": [],
    "aal": "account"
  },
  "updateRealtimeChannel": {
    "method": "PATCH",
    "path": "/api/realtime/channels/{channelId}",
    "tag": "realtime",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false,
    "roles": [
      "admin"
    ],
    "rateLimits": [],
    "aal": "account"
  },
  "deleteRealtimeChannel": {
    "method": "DELETE",
    "path": "/api/realtime/channels/{channelId}",
    "tag": "realtime",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": [
      "admin"
    ],
    "rateLimits": [],
    "aal": "account"
  },
  "publishRealtimeMessage": {
    "method": "POST",
    "path": "/api/realtime/messages",
    "tag": "realtime",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false,
    "roles": null,
    "rateLimits": [
      {
        "name": "realtimePublish",
        "by": "user"
      }
    ],
    "aal": "account"
  },
  "listRealtimeMessages": {
    "method": "GET",
    "path": "/api/realtime/messages",
    "tag": "realtime",
    "secured": true,
    "bearer": true,
    "optionalBearer": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false,
    "roles": null,
    "rateLimits": [],
    "aal": "account"
  }
} as const;

export type OperationId = keyof typeof operations;

export const operationIds = Object.keys(operations) as OperationId[];

/** The named rate limits that operations declare in x-rate-limit. */
export type RateLimitName = (typeof operations)[OperationId]['rateLimits'][number]['name'];

/** The roles operations may require in x-roles. */
export type Role = 'admin' | 'user';

/** The stable error codes of the Error schema (components.schemas.ErrorCode). */
export const errorCodes = [
  "INVALID_INPUT",
  "INVALID_OTP",
  "INVALID_CREDENTIALS",
  "EMAIL_NOT_VERIFIED",
  "USER_ALREADY_EXISTS",
  "SIGN_UP_DISABLED",
  "UNAUTHORIZED",
  "AUTH_UNAUTHORIZED",
  "SESSION_REVOKED",
  "PASSWORD_INCORRECT",
  "FORBIDDEN",
  "MFA_REQUIRED",
  "REAUTHENTICATION_REQUIRED",
  "CSRF_INVALID",
  "REFRESH_TOKEN_INVALID",
  "REFRESH_TOKEN_REUSED",
  "ACCOUNT_DISABLED",
  "OAUTH_CODE_INVALID",
  "OAUTH_STATE_INVALID",
  "OAUTH_EMAIL_UNVERIFIED",
  "OAUTH_ACCOUNT_UNVERIFIED",
  "OAUTH_LINK_REQUIRED",
  "IDENTITY_ALREADY_LINKED",
  "LAST_SIGN_IN_METHOD",
  "OAUTH_PROVIDER_ERROR",
  "ACCESS_DENIED",
  "ID_TOKEN_INVALID",
  "NOT_FOUND",
  "CHANNEL_ALREADY_EXISTS",
  "LAST_ADMIN",
  "SIGNING_KEY_STATE",
  "FACTOR_STATE",
  "PASSKEY_REGISTRATION_INVALID",
  "PASSKEY_REFUSED",
  "METHOD_NOT_ALLOWED",
  "PAYLOAD_TOO_LARGE",
  "UNSUPPORTED_MEDIA_TYPE",
  "RATE_LIMITED",
  "MODEL_NOT_ALLOWED",
  "PROVIDER_AUTH_FAILED",
  "PROVIDER_UNAVAILABLE",
  "PROVIDER_TIMEOUT",
  "INTERNAL_ERROR",
  "SERVICE_UNAVAILABLE",
  "REQUEST_TIMEOUT",
  "HEADERS_TOO_LARGE"
] as const;

export type ErrorCode = (typeof errorCodes)[number];

/** Each error code's HTTP status and default message, from the table in ErrorCode's description. */
export const errorCatalogue: Record<ErrorCode, { readonly status: number; readonly message: string }> = {
  "INVALID_INPUT": {
    "status": 400,
    "message": "The request does not match the contract: a missing, malformed or unknown field, or a parameter out of range."
  },
  "INVALID_OTP": {
    "status": 400,
    "message": "The verification, sign-in or password-reset code, magic-link token or reset token is wrong, expired, already used or unknown (or belongs to a disabled account)."
  },
  "INVALID_CREDENTIALS": {
    "status": 401,
    "message": "Sign-in failed: the email address or the password is wrong (the two are not told apart)."
  },
  "EMAIL_NOT_VERIFIED": {
    "status": 403,
    "message": "Sign-in with the right password of an account created while verification was not required, whose address is not verified yet."
  },
  "USER_ALREADY_EXISTS": {
    "status": 409,
    "message": "Sign-up without verification for an address that already has an account; OAuth: the account with the provider's address is linked to another identity of that provider."
  },
  "SIGN_UP_DISABLED": {
    "status": 403,
    "message": "Sign-up is refused: the service does not allow sign-ups (ALLOW_SIGN_UP=false)."
  },
  "UNAUTHORIZED": {
    "status": 401,
    "message": "No access token: the Authorization header is missing or is not Bearer <token>."
  },
  "AUTH_UNAUTHORIZED": {
    "status": 401,
    "message": "The access token has expired or is not valid; refresh the session and retry. The code InsForge's clients refresh on."
  },
  "SESSION_REVOKED": {
    "status": 401,
    "message": "The session the access token belongs to has ended (logout, refresh-token reuse, a password change, the account's role changed, disabled or deleted); sign in again."
  },
  "PASSWORD_INCORRECT": {
    "status": 403,
    "message": "Changing the password: currentPassword is missing or wrong."
  },
  "FORBIDDEN": {
    "status": 403,
    "message": "The caller is authenticated but lacks the role the operation needs."
  },
  "REAUTHENTICATION_REQUIRED": {
    "status": 403,
    "message": "The operation needs a recent proof: the session's last sign-in or second factor is more than 10 minutes old. Sign in again (or prove a factor with POST /api/auth/mfa/verify) and retry."
  },
  "MFA_REQUIRED": {
    "status": 403,
    "message": "The account has a second factor and this session has not proven it (aal1), or the operation needs aal2: complete POST /api/auth/mfa/verify first."
  },
  "CSRF_INVALID": {
    "status": 403,
    "message": "A web client's X-CSRF-Token header is missing or does not match the session."
  },
  "REFRESH_TOKEN_INVALID": {
    "status": 401,
    "message": "The refresh token is missing, unknown, expired or revoked."
  },
  "REFRESH_TOKEN_REUSED": {
    "status": 401,
    "message": "An already exchanged refresh token was presented again; the whole session has been revoked."
  },
  "ACCOUNT_DISABLED": {
    "status": 403,
    "message": "OAuth sign-in: the account of this identity is disabled."
  },
  "OAUTH_CODE_INVALID": {
    "status": 400,
    "message": "The one-time OAuth code is unknown, used or expired, or the code_verifier does not match its challenge."
  },
  "OAUTH_STATE_INVALID": {
    "status": 400,
    "message": "The provider's return carries a state that is missing, unknown, expired or already used."
  },
  "OAUTH_EMAIL_UNVERIFIED": {
    "status": 403,
    "message": "The provider gave no verified email address for an identity that has no account yet."
  },
  "OAUTH_ACCOUNT_UNVERIFIED": {
    "status": 409,
    "message": "An account with the provider's address exists but its address is not verified, so it is not linked."
  },
  "OAUTH_LINK_REQUIRED": {
    "status": 409,
    "message": "An account with the provider's address exists but is not linked by address: an administrator's account, a provider with OAUTH_<NAME>_LINK_BY_EMAIL=false, or an identity its owner unlinked. Sign in to the account and link the provider from the session (POST /api/auth/identities)."
  },
  "IDENTITY_ALREADY_LINKED": {
    "status": 409,
    "message": "Linking from a session: the provider identity is linked to another account, or the account already has an identity of this provider (unlink it first)."
  },
  "LAST_SIGN_IN_METHOD": {
    "status": 409,
    "message": "Unlinking the identity would leave the account no way to sign in (no password, no other identity of a configured provider, no passkey); nothing was changed."
  },
  "OAUTH_PROVIDER_ERROR": {
    "status": 302,
    "message": "Only in a callback's ?error=: the provider answered with an error, or its answer did not pass the checks."
  },
  "ACCESS_DENIED": {
    "status": 302,
    "message": "Only in a callback's ?error=: the person refused at the provider."
  },
  "ID_TOKEN_INVALID": {
    "status": 401,
    "message": "The ID token's signature, issuer, audience, expiry or nonce is wrong, or it was already used to sign in."
  },
  "NOT_FOUND": {
    "status": 404,
    "message": "No route or resource matches the request."
  },
  "CHANNEL_ALREADY_EXISTS": {
    "status": 409,
    "message": "A realtime channel with this pattern exists already."
  },
  "PASSKEY_REGISTRATION_INVALID": {
    "status": 400,
    "message": "The answer of navigator.credentials.create() does not verify: no live challenge of this session, another origin or RP ID, no user verification, or a credential registered already. Ask for new options."
  },
  "PASSKEY_REFUSED": {
    "status": 401,
    "message": "The passkey assertion does not sign in or raise the session: the challenge is unknown, used, expired or another session's, the passkey is unknown or another account's, or the signature, origin, RP ID, user verification or counter is wrong."
  },
  "FACTOR_STATE": {
    "status": 409,
    "message": "The account's factors do not allow the change: at most 10 factors, and recovery codes need a verified factor."
  },
  "SIGNING_KEY_STATE": {
    "status": 409,
    "message": "The signing key's state does not allow the change: the current key cannot be revoked, and there is at most one standby key."
  },
  "LAST_ADMIN": {
    "status": 409,
    "message": "Deleting, demoting or disabling accounts would leave no enabled administrator; nothing was changed."
  },
  "METHOD_NOT_ALLOWED": {
    "status": 405,
    "message": "The path exists but does not accept this HTTP method."
  },
  "PAYLOAD_TOO_LARGE": {
    "status": 413,
    "message": "The request body exceeds the size limit."
  },
  "UNSUPPORTED_MEDIA_TYPE": {
    "status": 415,
    "message": "The request body is not application/json."
  },
  "RATE_LIMITED": {
    "status": 429,
    "message": "Too many requests (from this client, or failed sign-ins for this account); wait for the seconds given in Retry-After."
  },
  "MODEL_NOT_ALLOWED": {
    "status": 400,
    "message": "The requested embedding model is not on the service's allow-list."
  },
  "PROVIDER_AUTH_FAILED": {
    "status": 502,
    "message": "The upstream provider rejected the service's credentials."
  },
  "PROVIDER_UNAVAILABLE": {
    "status": 502,
    "message": "The upstream provider failed or could not be reached."
  },
  "PROVIDER_TIMEOUT": {
    "status": 504,
    "message": "The upstream provider did not answer in time."
  },
  "INTERNAL_ERROR": {
    "status": 500,
    "message": "An unexpected failure; no details are revealed."
  },
  "SERVICE_UNAVAILABLE": {
    "status": 503,
    "message": "A dependency is not available: the database, the embedding provider (paused after repeated failures) or the embeddings configuration."
  },
  "REQUEST_TIMEOUT": {
    "status": 408,
    "message": "The request's headers or body did not arrive in time; the connection is closed. Sent by the HTTP layer, before any operation."
  },
  "HEADERS_TOO_LARGE": {
    "status": 431,
    "message": "The request's headers exceed 16 KiB or 1,000 lines; the connection is closed. Sent by the HTTP layer, before any operation."
  }
};
