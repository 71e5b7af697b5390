import type { ColumnType, Generated, Kysely } from 'kysely';

/** Key-value settings the service keeps for itself (for example a generated signing key in development). */
export interface AppSettingsTable {
  key: string;
  value: string;
  created_at: ColumnType<Date, never, never>;
  updated_at: ColumnType<Date, never, Date>;
}

export type Role = 'user' | 'admin';
export type ClientType = 'web' | 'mobile' | 'desktop';

/** users.profile: name and avatar_url, and the free-form fields the user set (scalars only). */
export interface Profile {
  name?: string | null;
  avatar_url?: string | null;
  [field: string]: string | number | boolean | null | undefined;
}

export interface UsersTable {
  id: Generated<string>;
  email: string;
  password_hash: string | null;
  profile: ColumnType<Profile, Profile | undefined, Profile>;
  metadata: ColumnType<Record<string, unknown>, Record<string, unknown> | undefined, Record<string, unknown>>;
  email_verified: ColumnType<boolean, boolean | undefined, boolean>;
  role: ColumnType<Role, Role | undefined, Role>;
  /** When an administrator disabled the account; null while it is enabled. */
  disabled_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  /**
   * When a verification activated a sign-up's password without that sign-up's binding (migration
   * 0015): the password may not be the mailbox owner's. Null for every other account.
   */
  password_unproven_since: ColumnType<Date | null, Date | null | undefined, Date | null>;
  /** Goes up when the password is removed, reset or changed: device signals issued before stop counting. */
  device_epoch: ColumnType<number, number | undefined, number>;
  /** Whether the account has a verified second factor (migration 0022). */
  mfa_enabled: ColumnType<boolean, boolean | undefined, boolean>;
  created_at: ColumnType<Date, Date | undefined, never>;
  updated_at: ColumnType<Date, Date | undefined, Date>;
}

export interface UserProvidersTable {
  user_id: string;
  provider: string;
  provider_account_id: string;
  created_at: ColumnType<Date, Date | undefined, never>;
  /** The identity's own id (migration 0024). */
  id: Generated<string>;
  /** The address the provider vouched for when the identity was linked; null for older links. */
  email: ColumnType<string | null, string | null | undefined, string | null>;
}

export interface OAuthAuthorizationsTable {
  state_hash: string;
  provider: string;
  redirect_uri: string;
  /** The app's PKCE challenge of a sign-in; null for a link (migration 0026). */
  code_challenge: string | null;
  nonce: string;
  provider_verifier: string;
  expires_at: Date;
  created_at: Date;
  /** A link started from a session: the account and the session (migration 0026); null for a sign-in. */
  link_user_id: ColumnType<string | null, string | null | undefined, never>;
  link_session_id: ColumnType<string | null, string | null | undefined, never>;
}

/** Identities their owner unlinked: not linked to that account again by address (migration 0026). */
export interface UnlinkedIdentitiesTable {
  user_id: string;
  provider: string;
  provider_account_id: string;
  unlinked_at: Date;
}

export interface OAuthCodesTable {
  code_hash: string;
  user_id: string;
  code_challenge: string;
  expires_at: Date;
  created_at: Date;
}

/** ID tokens that opened a session (signInWithIdToken), kept until they could no longer be taken. */
export interface OAuthIdTokenUsesTable {
  /** SHA-256 (hex) of the token's signed part (header and payload). */
  token_hash: string;
  provider: string;
  expires_at: Date;
  created_at: Date;
}

/**
 * A one-time secret (migration 0019): an emailed 6-digit code (stored as an HMAC), a link or reset
 * token (stored as SHA-256), or both on one row (a verification's code and link). One live row per
 * address for the emailed-code purposes; any number of token and recovery rows.
 */
export interface OneTimeCodesTable {
  id: Generated<string>;
  purpose: OneTimeCodePurpose;
  email: string;
  /** The account the secret was issued for; null for sign-in codes. */
  user_id: string | null;
  code_hmac: string | null;
  code_expires_at: Date | null;
  token_hash: string | null;
  token_expires_at: Date | null;
  failed_attempts: ColumnType<number, number | undefined, number>;
  consumed_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  created_at: Date;
  /** Verification rows only: the password of the sign-up waiting for the verification. */
  pending_password_hash: ColumnType<string | null, string | null | undefined, string | null>;
  /** Verification rows only: more than one sign-up was made for the address before it was verified. */
  contested: ColumnType<boolean, boolean | undefined, boolean>;
  /** Verification rows only: SHA-256 of the binding given to the client that made the pending sign-up. */
  binding_hash: ColumnType<string | null, string | null | undefined, string | null>;
  /** WebAuthn challenges only: the session the challenge is bound to (migration 0023). */
  session_id: ColumnType<string | null, string | null | undefined, string | null>;
}

/** The emailed 6-digit codes: one live code per address and purpose, checked with the same attempt rules. */
export type EmailCodePurpose = 'verification' | 'sign_in' | 'password_reset';
/** Every kind of one-time secret ('recovery' is reserved for multi-factor recovery codes). */
export type OneTimeCodePurpose =
  | EmailCodePurpose
  | 'password_reset_token'
  | 'recovery'
  | 'passkey_registration'
  | 'passkey_authentication';

export interface EmailSendLogTable {
  email: string;
  last_sent_at: Date;
  window_started_at: Date;
  sent_in_window: ColumnType<number, number | undefined, number>;
  code_attempts_in_window: ColumnType<number, number | undefined, number>;
  /** When the address last got a reset or sign-in email from the reserve (beyond the daily budget). */
  reserve_sent_at: ColumnType<Date, Date | undefined, Date>;
}

/** Emails to one address asked for from one known device (signed in to the account before). */
export interface EmailSendDevicesTable {
  email: string;
  device_id: string;
  window_started_at: Date;
  sent_in_window: ColumnType<number, number | undefined, number>;
  last_sent_at: Date;
}

/** Emails to one address caused by one requester (client IP) in the current daily window. */
export interface EmailSendRequestersTable {
  email: string;
  requester: string;
  window_started_at: Date;
  sent_in_window: ColumnType<number, number | undefined, number>;
}

export interface SessionsTable {
  id: Generated<string>;
  user_id: string;
  refresh_token_hash: string;
  client_type: ClientType;
  created_at: Date;
  last_used_at: Date;
  expires_at: Date;
  revoked_at: Date | null;
  user_agent: string | null;
  ip: string | null;
  /** The session's assurance level (migration 0022). */
  aal: ColumnType<Aal, Aal | undefined, Aal>;
  /** How its factors were proven, in order. */
  amr: ColumnType<AuthMethod[], string | undefined, string>;
  /** The account had a verified factor when the session opened, and the session has not proven one. */
  mfa_pending: ColumnType<boolean, boolean | undefined, boolean>;
}

export type Aal = 'aal1' | 'aal2';
/** One proven factor of a session (the `amr` claim's entries). */
export interface AuthMethod {
  method: 'password' | 'otp' | 'oauth' | 'id_token' | 'totp' | 'recovery_code' | 'passkey';
  /** Seconds since the epoch. */
  timestamp: number;
}

export interface MfaFactorsTable {
  id: Generated<string>;
  user_id: string;
  type: 'totp';
  friendly_name: string | null;
  secret_sealed: string;
  status: 'unverified' | 'verified';
  created_at: Date;
  verified_at: Date | null;
  last_used_at: Date | null;
  last_used_step: ColumnType<number | null, number | null | undefined, number | null>;
}

/** A passkey (WebAuthn credential): id and public key base64url, the last signature counter seen. */
/** One account event (migration 0024). */
export interface AuditLogTable {
  id: Generated<number>;
  occurred_at: Date;
  type: string;
  outcome: 'success' | 'failure';
  method: string | null;
  actor_id: string | null;
  user_id: string | null;
  session_id: string | null;
  ip: string | null;
  user_agent: string | null;
  details: ColumnType<Record<string, unknown>, string | undefined, never>;
}

/** A webhook event to deliver (migration 0024); its id is the webhook-id. */
export interface WebhookOutboxTable {
  id: Generated<string>;
  event_type: string;
  payload: ColumnType<Record<string, unknown>, string, never>;
  created_at: Date;
  status: ColumnType<'pending' | 'delivered' | 'failed', 'pending' | undefined, 'pending' | 'delivered' | 'failed'>;
  attempts: ColumnType<number, number | undefined, number>;
  next_attempt_at: Date;
  last_attempt_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  last_status: ColumnType<number | null, number | null | undefined, number | null>;
  last_error: ColumnType<string | null, string | null | undefined, string | null>;
  delivered_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
}

export interface PasskeysTable {
  id: Generated<string>;
  user_id: string;
  credential_id: string;
  public_key: string;
  counter: number;
  transports: ColumnType<string[], string, string>;
  device_type: 'singleDevice' | 'multiDevice';
  backed_up: boolean;
  friendly_name: string | null;
  created_at: Date;
  last_used_at: Date | null;
}

export interface MfaAttemptsTable {
  user_id: string;
  factor_key: string;
  window_started_at: Date;
  failures: number;
}

/** Revocations of the sessions of deleted accounts, kept while their access tokens may be unexpired. */
export interface DeletedAccountSessionsTable {
  session_id: string;
  revoked_at: Date;
}

/** Wrong-code attempts at an address without an unused code of the kind (written for equal work only). */
export interface CodeAttemptMissesTable {
  email: string;
  purpose: EmailCodePurpose;
  attempts: number;
  last_attempt_at: Date;
}

export interface RotatedRefreshTokensTable {
  token_hash: string;
  session_id: string;
  rotated_at: Date;
}

export interface UserCountTable {
  singleton: boolean;
  n: number;
}

/**
 * The directory's page bookmarks (migration 0027): a chunk of the (created_at desc, id desc) order
 * named by its start key, the newest key it may hold, with the number of users it holds.
 */
export interface UserDirectoryChunksTable {
  start_created_at: Date;
  start_id: string;
  n: number;
}

/** The tables Kysely knows about; one entry per table, named as in SQL. */
/** One successful embeddings call (written in batches by the usage recorder). */
export interface EmbeddingUsageTable {
  id: Generated<number>;
  user_id: string;
  model: string;
  inputs: number;
  prompt_tokens: number;
  total_tokens: number;
  /** The end-user identifier the caller sent (OpenAI's `user`), if any. */
  end_user: string | null;
  created_at: ColumnType<Date, Date | undefined, never>;
}

/** realtime.channels: what may be subscribed to (row-level security decides who). */
export interface RealtimeChannelsTable {
  id: Generated<string>;
  pattern: string;
  description: string | null;
  enabled: ColumnType<boolean, boolean | undefined, boolean>;
  created_at: ColumnType<Date, Date | undefined, never>;
  updated_at: ColumnType<Date, Date | undefined, Date>;
}

/** realtime.messages: what has been published (row-level security decides who may). */
export interface RealtimeMessagesTable {
  id: Generated<string>;
  /** Commit order within a channel (publishes on a channel are serialized). */
  seq: ColumnType<string, never, never>;
  channel_id: string | null;
  channel_name: string;
  event: string;
  payload: ColumnType<unknown, unknown, unknown>;
  sender_id: string | null;
  sender_type: ColumnType<'user' | 'system', never, never>;
  created_at: ColumnType<Date, Date | undefined, never>;
}

/** signing_keys: the keys that sign access tokens (src/auth/signing-keys.ts). */
export interface SigningKeysTable {
  kid: string;
  alg: 'ES256' | 'RS256' | 'EdDSA';
  status: 'standby' | 'current' | 'previous' | 'revoked';
  public_jwk: ColumnType<Record<string, string>, string, never>;
  private_key_sealed: ColumnType<string, string, never>;
  created_at: ColumnType<Date, Date, never>;
  activated_at: Date | null;
  retired_at: Date | null;
  revoked_at: Date | null;
}

export interface Database {
  signing_keys: SigningKeysTable;
  user_count: UserCountTable;
  user_directory_chunks: UserDirectoryChunksTable;
  app_settings: AppSettingsTable;
  users: UsersTable;
  mfa_factors: MfaFactorsTable;
  passkeys: PasskeysTable;
  audit_log: AuditLogTable;
  webhook_outbox: WebhookOutboxTable;
  mfa_attempts: MfaAttemptsTable;
  user_providers: UserProvidersTable;
  oauth_authorizations: OAuthAuthorizationsTable;
  unlinked_identities: UnlinkedIdentitiesTable;
  oauth_codes: OAuthCodesTable;
  oauth_id_token_uses: OAuthIdTokenUsesTable;
  email_send_log: EmailSendLogTable;
  one_time_codes: OneTimeCodesTable;
  email_send_requesters: EmailSendRequestersTable;
  email_send_devices: EmailSendDevicesTable;
  sessions: SessionsTable;
  rotated_refresh_tokens: RotatedRefreshTokensTable;
  code_attempt_misses: CodeAttemptMissesTable;
  deleted_account_sessions: DeletedAccountSessionsTable;
  embedding_usage: EmbeddingUsageTable;
  'realtime.channels': RealtimeChannelsTable;
  'realtime.messages': RealtimeMessagesTable;
}

/** What repositories run on: the database or an open transaction (a Transaction is a Kysely). */
export type Executor = Kysely<Database>;
