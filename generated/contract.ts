// Generated from openapi.yaml by `npm run generate`. Do not edit.

/** Every operation of the contract, by operationId. */
export const operations = {
  "getHealth": {
    "method": "GET",
    "path": "/api/health",
    "tag": "health",
    "secured": false,
    "bodyRequired": false,
    "bodyLimit": null
  },
  "getMetrics": {
    "method": "GET",
    "path": "/metrics",
    "tag": "metrics",
    "secured": true,
    "bodyRequired": false,
    "bodyLimit": null
  },
  "listUsers": {
    "method": "GET",
    "path": "/api/auth/users",
    "tag": "users",
    "secured": true,
    "bodyRequired": false,
    "bodyLimit": null
  },
  "createUser": {
    "method": "POST",
    "path": "/api/auth/users",
    "tag": "auth",
    "secured": false,
    "bodyRequired": true,
    "bodyLimit": 16384
  },
  "deleteUsers": {
    "method": "DELETE",
    "path": "/api/auth/users",
    "tag": "users",
    "secured": true,
    "bodyRequired": true,
    "bodyLimit": 16384
  },
  "getUser": {
    "method": "GET",
    "path": "/api/auth/users/{userId}",
    "tag": "users",
    "secured": true,
    "bodyRequired": false,
    "bodyLimit": null
  },
  "updateUser": {
    "method": "PATCH",
    "path": "/api/auth/users/{userId}",
    "tag": "users",
    "secured": true,
    "bodyRequired": true,
    "bodyLimit": 16384
  },
  "createSession": {
    "method": "POST",
    "path": "/api/auth/sessions",
    "tag": "auth",
    "secured": false,
    "bodyRequired": true,
    "bodyLimit": 16384
  },
  "getOAuthAuthorizationUrl": {
    "method": "GET",
    "path": "/api/auth/oauth/{provider}",
    "tag": "oauth",
    "secured": false,
    "bodyRequired": false,
    "bodyLimit": null
  },
  "getCustomOAuthAuthorizationUrl": {
    "method": "GET",
    "path": "/api/auth/oauth/custom/{provider}",
    "tag": "oauth",
    "secured": false,
    "bodyRequired": false,
    "bodyLimit": null
  },
  "handleOAuthCallback": {
    "method": "GET",
    "path": "/api/auth/oauth/{provider}/callback",
    "tag": "oauth",
    "secured": false,
    "bodyRequired": false,
    "bodyLimit": null
  },
  "exchangeOAuthCode": {
    "method": "POST",
    "path": "/api/auth/oauth/exchange",
    "tag": "oauth",
    "secured": false,
    "bodyRequired": true,
    "bodyLimit": 16384
  },
  "signInWithIdToken": {
    "method": "POST",
    "path": "/api/auth/id-token",
    "tag": "oauth",
    "secured": false,
    "bodyRequired": true,
    "bodyLimit": 16384
  },
  "sendVerificationEmail": {
    "method": "POST",
    "path": "/api/auth/email/send-verification",
    "tag": "auth",
    "secured": false,
    "bodyRequired": true,
    "bodyLimit": 16384
  },
  "verifyEmail": {
    "method": "POST",
    "path": "/api/auth/email/verify",
    "tag": "auth",
    "secured": false,
    "bodyRequired": true,
    "bodyLimit": 16384
  },
  "sendOtpEmail": {
    "method": "POST",
    "path": "/api/auth/email/send-otp",
    "tag": "auth",
    "secured": false,
    "bodyRequired": true,
    "bodyLimit": 16384
  },
  "sendResetPasswordEmail": {
    "method": "POST",
    "path": "/api/auth/email/send-reset-password",
    "tag": "auth",
    "secured": false,
    "bodyRequired": true,
    "bodyLimit": 16384
  },
  "exchangeResetPasswordToken": {
    "method": "POST",
    "path": "/api/auth/email/exchange-reset-password-token",
    "tag": "auth",
    "secured": false,
    "bodyRequired": true,
    "bodyLimit": 16384
  },
  "resetPassword": {
    "method": "POST",
    "path": "/api/auth/email/reset-password",
    "tag": "auth",
    "secured": false,
    "bodyRequired": true,
    "bodyLimit": 16384
  },
  "refreshSession": {
    "method": "POST",
    "path": "/api/auth/refresh",
    "tag": "auth",
    "secured": false,
    "bodyRequired": false,
    "bodyLimit": 16384
  },
  "logout": {
    "method": "POST",
    "path": "/api/auth/logout",
    "tag": "auth",
    "secured": false,
    "bodyRequired": false,
    "bodyLimit": 16384
  },
  "changePassword": {
    "method": "POST",
    "path": "/api/auth/password",
    "tag": "auth",
    "secured": true,
    "bodyRequired": true,
    "bodyLimit": 16384
  },
  "getCurrentSession": {
    "method": "GET",
    "path": "/api/auth/sessions/current",
    "tag": "auth",
    "secured": true,
    "bodyRequired": false,
    "bodyLimit": null
  },
  "getProfile": {
    "method": "GET",
    "path": "/api/auth/profiles/{userId}",
    "tag": "profiles",
    "secured": true,
    "bodyRequired": false,
    "bodyLimit": null
  },
  "updateCurrentProfile": {
    "method": "PATCH",
    "path": "/api/auth/profiles/current",
    "tag": "profiles",
    "secured": true,
    "bodyRequired": true,
    "bodyLimit": 16384
  },
  "getPublicAuthConfig": {
    "method": "GET",
    "path": "/api/auth/public-config",
    "tag": "auth",
    "secured": false,
    "bodyRequired": false,
    "bodyLimit": null
  },
  "createEmbeddings": {
    "method": "POST",
    "path": "/api/ai/embeddings",
    "tag": "embeddings",
    "secured": true,
    "bodyRequired": true,
    "bodyLimit": 8388608
  },
  "getRealtimePermissions": {
    "method": "GET",
    "path": "/api/realtime/permissions",
    "tag": "realtime",
    "secured": true,
    "bodyRequired": false,
    "bodyLimit": null
  },
  "listRealtimeChannels": {
    "method": "GET",
    "path": "/api/realtime/channels",
    "tag": "realtime",
    "secured": true,
    "bodyRequired": false,
    "bodyLimit": null
  },
  "createRealtimeChannel": {
    "method": "POST",
    "path": "/api/realtime/channels",
    "tag": "realtime",
    "secured": true,
    "bodyRequired": true,
    "bodyLimit": 16384
  },
  "updateRealtimeChannel": {
    "method": "PATCH",
    "path": "/api/realtime/channels/{channelId}",
    "tag": "realtime",
    "secured": true,
    "bodyRequired": true,
    "bodyLimit": 16384
  },
  "deleteRealtimeChannel": {
    "method": "DELETE",
    "path": "/api/realtime/channels/{channelId}",
    "tag": "realtime",
    "secured": true,
    "bodyRequired": false,
    "bodyLimit": null
  },
  "publishRealtimeMessage": {
    "method": "POST",
    "path": "/api/realtime/messages",
    "tag": "realtime",
    "secured": true,
    "bodyRequired": true,
    "bodyLimit": 16384
  },
  "listRealtimeMessages": {
    "method": "GET",
    "path": "/api/realtime/messages",
    "tag": "realtime",
    "secured": true,
    "bodyRequired": false,
    "bodyLimit": null
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
