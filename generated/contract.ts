// Generated from openapi.yaml by `npm run generate`. Do not edit.

/** Every operation of the contract, by operationId. */
export const operations = {
  "getHealth": {
    "method": "GET",
    "path": "/api/health",
    "tag": "health",
    "secured": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false
  },
  "getMetrics": {
    "method": "GET",
    "path": "/metrics",
    "tag": "metrics",
    "secured": true,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false
  },
  "listUsers": {
    "method": "GET",
    "path": "/api/auth/users",
    "tag": "users",
    "secured": true,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false
  },
  "createUser": {
    "method": "POST",
    "path": "/api/auth/users",
    "tag": "auth",
    "secured": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false
  },
  "deleteUsers": {
    "method": "DELETE",
    "path": "/api/auth/users",
    "tag": "users",
    "secured": true,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false
  },
  "getUser": {
    "method": "GET",
    "path": "/api/auth/users/{userId}",
    "tag": "users",
    "secured": true,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false
  },
  "updateUser": {
    "method": "PATCH",
    "path": "/api/auth/users/{userId}",
    "tag": "users",
    "secured": true,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false
  },
  "createSession": {
    "method": "POST",
    "path": "/api/auth/sessions",
    "tag": "auth",
    "secured": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false
  },
  "getOAuthAuthorizationUrl": {
    "method": "GET",
    "path": "/api/auth/oauth/{provider}",
    "tag": "oauth",
    "secured": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false
  },
  "getCustomOAuthAuthorizationUrl": {
    "method": "GET",
    "path": "/api/auth/oauth/custom/{provider}",
    "tag": "oauth",
    "secured": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false
  },
  "handleOAuthCallback": {
    "method": "GET",
    "path": "/api/auth/oauth/{provider}/callback",
    "tag": "oauth",
    "secured": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": true
  },
  "exchangeOAuthCode": {
    "method": "POST",
    "path": "/api/auth/oauth/exchange",
    "tag": "oauth",
    "secured": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false
  },
  "signInWithIdToken": {
    "method": "POST",
    "path": "/api/auth/id-token",
    "tag": "oauth",
    "secured": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false
  },
  "sendVerificationEmail": {
    "method": "POST",
    "path": "/api/auth/email/send-verification",
    "tag": "auth",
    "secured": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false
  },
  "verifyEmail": {
    "method": "POST",
    "path": "/api/auth/email/verify",
    "tag": "auth",
    "secured": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false
  },
  "sendOtpEmail": {
    "method": "POST",
    "path": "/api/auth/email/send-otp",
    "tag": "auth",
    "secured": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false
  },
  "sendResetPasswordEmail": {
    "method": "POST",
    "path": "/api/auth/email/send-reset-password",
    "tag": "auth",
    "secured": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false
  },
  "exchangeResetPasswordToken": {
    "method": "POST",
    "path": "/api/auth/email/exchange-reset-password-token",
    "tag": "auth",
    "secured": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false
  },
  "resetPassword": {
    "method": "POST",
    "path": "/api/auth/email/reset-password",
    "tag": "auth",
    "secured": false,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false
  },
  "refreshSession": {
    "method": "POST",
    "path": "/api/auth/refresh",
    "tag": "auth",
    "secured": false,
    "bodyRequired": false,
    "bodyLimit": 16384,
    "openQuery": false
  },
  "logout": {
    "method": "POST",
    "path": "/api/auth/logout",
    "tag": "auth",
    "secured": false,
    "bodyRequired": false,
    "bodyLimit": 16384,
    "openQuery": false
  },
  "changePassword": {
    "method": "POST",
    "path": "/api/auth/password",
    "tag": "auth",
    "secured": true,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false
  },
  "getCurrentSession": {
    "method": "GET",
    "path": "/api/auth/sessions/current",
    "tag": "auth",
    "secured": true,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false
  },
  "getProfile": {
    "method": "GET",
    "path": "/api/auth/profiles/{userId}",
    "tag": "profiles",
    "secured": true,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false
  },
  "updateCurrentProfile": {
    "method": "PATCH",
    "path": "/api/auth/profiles/current",
    "tag": "profiles",
    "secured": true,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false
  },
  "getPublicAuthConfig": {
    "method": "GET",
    "path": "/api/auth/public-config",
    "tag": "auth",
    "secured": false,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false
  },
  "createEmbeddings": {
    "method": "POST",
    "path": "/api/ai/embeddings",
    "tag": "embeddings",
    "secured": true,
    "bodyRequired": true,
    "bodyLimit": 8388608,
    "openQuery": false
  },
  "getRealtimePermissions": {
    "method": "GET",
    "path": "/api/realtime/permissions",
    "tag": "realtime",
    "secured": true,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false
  },
  "listRealtimeChannels": {
    "method": "GET",
    "path": "/api/realtime/channels",
    "tag": "realtime",
    "secured": true,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false
  },
  "createRealtimeChannel": {
    "method": "POST",
    "path": "/api/realtime/channels",
    "tag": "realtime",
    "secured": true,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false
  },
  "updateRealtimeChannel": {
    "method": "PATCH",
    "path": "/api/realtime/channels/{channelId}",
    "tag": "realtime",
    "secured": true,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false
  },
  "deleteRealtimeChannel": {
    "method": "DELETE",
    "path": "/api/realtime/channels/{channelId}",
    "tag": "realtime",
    "secured": true,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false
  },
  "publishRealtimeMessage": {
    "method": "POST",
    "path": "/api/realtime/messages",
    "tag": "realtime",
    "secured": true,
    "bodyRequired": true,
    "bodyLimit": 16384,
    "openQuery": false
  },
  "listRealtimeMessages": {
    "method": "GET",
    "path": "/api/realtime/messages",
    "tag": "realtime",
    "secured": true,
    "bodyRequired": false,
    "bodyLimit": null,
    "openQuery": false
  }
} as const;

export type OperationId = keyof typeof operations;

export const operationIds = Object.keys(operations) as OperationId[];

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
  "CSRF_INVALID",
  "REFRESH_TOKEN_INVALID",
  "REFRESH_TOKEN_REUSED",
  "ACCOUNT_DISABLED",
  "OAUTH_CODE_INVALID",
  "OAUTH_STATE_INVALID",
  "OAUTH_EMAIL_UNVERIFIED",
  "OAUTH_ACCOUNT_UNVERIFIED",
  "OAUTH_PROVIDER_ERROR",
  "ACCESS_DENIED",
  "ID_TOKEN_INVALID",
  "NOT_FOUND",
  "CHANNEL_ALREADY_EXISTS",
  "LAST_ADMIN",
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
