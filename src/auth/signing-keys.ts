import { createPublicKey, generateKeyPair, type KeyObject, randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import type { FastifyBaseLogger } from 'fastify';
import type { components } from '../../generated/openapi.ts';
import type { NotificationListener } from '../db/notification-listener.ts';
import {
  applyRotationSchedule,
  insertFirstKey,
  insertStandbyKey,
  listSigningKeys,
  type NewSigningKey,
  type RecordChange,
  revokeKey,
  rotateKeys,
  SIGNING_KEYS_CHANNEL,
  type SigningKeyAlgorithm,
  type SigningKeyRow,
} from '../db/repositories/signing-keys.ts';
import type { Executor } from '../db/schema.ts';
import { ApiError } from '../errors.ts';
import { startPeriodicJob } from '../periodic-job.ts';
import { seal, unseal } from './crypto.ts';

const generate = promisify(generateKeyPair);
const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;

/** The public half of a key as published in the JWKS. */
export type PublicJwk = components['schemas']['Jwk'];

/** A key as administrators see it: its state and history, no key material. */
export type SigningKeyView = components['schemas']['SigningKey'];

/** The key that signs: its id, algorithm and private half (PEM). */
export interface SigningKey {
  kid: string;
  alg: SigningKeyAlgorithm;
  privatePem: string;
}

/** A key whose tokens verify (every state but revoked). */
export interface VerifyingKey {
  kid: string;
  alg: SigningKeyAlgorithm;
  publicPem: string;
  /** When a rotation made it previous (ms since the epoch): it signed nothing after. Undefined while it has not. */
  retiredAt: number | undefined;
}

/** The members a JWK's public half may have; anything else (d, p, q, dp, dq, qi, k) never leaves. */
const PUBLIC_MEMBERS = ['kty', 'crv', 'x', 'y', 'n', 'e'];

async function newKeyPair(alg: SigningKeyAlgorithm): Promise<{ publicKey: KeyObject; privateKey: KeyObject }> {
  switch (alg) {
    case 'ES256':
      return generate('ec', { namedCurve: 'P-256' });
    case 'RS256':
      return generate('rsa', { modulusLength: 2048 });
    case 'EdDSA':
      return generate('ed25519');
  }
}

/** A new key pair, its public half as a JWK, its private half sealed under `sealingKey` and bound to its kid. */
export async function createKeyMaterial(alg: SigningKeyAlgorithm, sealingKey: Buffer): Promise<NewSigningKey> {
  const { publicKey, privateKey } = await newKeyPair(alg);
  const kid = randomBytes(16).toString('base64url');
  const exported = publicKey.export({ format: 'jwk' }) as Record<string, string>;
  const publicJwk: Record<string, string> = {};
  for (const member of PUBLIC_MEMBERS) if (exported[member] !== undefined) publicJwk[member] = exported[member];
  const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
  return { kid, alg, publicJwk: { ...publicJwk, kid, alg, use: 'sig' }, privateKeySealed: seal(sealingKey, pem, kid) };
}

const iso = (d: Date | null) => (d === null ? null : d.toISOString());

function toView(row: SigningKeyRow): SigningKeyView {
  return {
    kid: row.kid,
    alg: row.alg,
    status: row.status,
    createdAt: row.created_at.toISOString(),
    activatedAt: iso(row.activated_at),
    retiredAt: iso(row.retired_at),
    revokedAt: iso(row.revoked_at),
  };
}

/** The current key's private half does not open with this JWT_SECRET (it was sealed under another). */
export class SealedKeyError extends Error {
  constructor(kid: string) {
    super(
      `the current signing key (kid ${kid}) cannot be opened with this JWT_SECRET: it was sealed under another. Start with the JWT_SECRET the deployment has used (the signing keys and the sessions depend on it)`,
    );
    this.name = 'SealedKeyError';
  }
}

export interface SigningKeysOptions {
  db: Executor;
  /** The `iss` of the tokens these keys sign: the service's public URL. */
  issuer: string;
  /** Seals and opens the private halves (DerivedKeys.signingKeys). */
  sealingKey: Buffer;
  /** The process's LISTEN connection; its owner starts it once every subscriber is in. */
  notifications: NotificationListener;
  log: FastifyBaseLogger;
  now: () => Date;
}

/**
 * The keys that sign and verify access tokens, kept in the database and in memory. Every instance
 * reads them at start, and again whenever one announces a change (NOTIFY on SIGNING_KEYS_CHANNEL,
 * sent by the changing transaction; polled every second while the listener is down), so that all
 * sign with the current key and refuse a revoked key's tokens within moments of the change. The
 * instance that makes a change reads the keys again before answering.
 */
export class SigningKeys {
  readonly #options: SigningKeysOptions;
  #rows: SigningKeyRow[] = [];
  #current: SigningKey | undefined;
  #verifying = new Map<string, VerifyingKey>();
  /** Private halves already opened, by kid (they never change). */
  readonly #opened = new Map<string, string>();
  readonly #listeners = new Set<() => void>();
  #loading: Promise<void> | undefined;
  /** Set while the last read failed: the listener then polls until one succeeds (no change is missed). */
  #stale = false;
  /** The administrators' changes on this instance, one at a time (no key is made for a change bound to be refused). */
  #changes: Promise<unknown> = Promise.resolve();
  readonly #unsubscribe: () => void;

  constructor(options: SigningKeysOptions) {
    this.#options = options;
    const reload = () => this.#reload();
    this.#unsubscribe = options.notifications.subscribe({
      name: 'signing keys',
      channels: [SIGNING_KEYS_CHANNEL],
      onNotification: () => {
        reload().catch((err: Error) => options.log.error({ err }, 'signing keys: reload failed'));
      },
      onConnected: reload,
      ...(options.notifications.connects ? { poll: reload, missesNotifications: () => this.#stale } : {}),
    });
  }

  /** Creates the first key of a fresh deployment (ES256), then reads them all. */
  async start(): Promise<void> {
    const rows = await listSigningKeys(this.#options.db);
    if (!rows.some((r) => r.status === 'current')) {
      const created = await insertFirstKey(
        this.#options.db,
        await createKeyMaterial('ES256', this.#options.sealingKey),
        this.#options.now(),
      );
      if (created) this.#options.log.info('signing keys: created the first signing key (ES256)');
    }
    await this.#reload();
  }

  close(): void {
    this.#unsubscribe();
    this.#listeners.clear();
  }

  get issuer(): string {
    return this.#options.issuer;
  }

  /** The key that signs new access tokens. */
  current(): SigningKey {
    if (this.#current === undefined) throw new Error('signing keys: not started');
    return this.#current;
  }

  /** The key named `kid`, when its tokens verify (it is not revoked). */
  verifying(kid: string): VerifyingKey | undefined {
    return this.#verifying.get(kid);
  }

  /** The JWKS: the public halves of every key not revoked, the current one first. */
  jwks(): { keys: PublicJwk[] } {
    const order = { current: 0, standby: 1, previous: 2, revoked: 3 };
    return {
      keys: this.#rows
        .filter((r) => r.status !== 'revoked')
        .sort((a, b) => order[a.status] - order[b.status])
        .map((r) => ({ ...r.public_jwk, kid: r.kid, alg: r.alg, use: 'sig' }) as PublicJwk),
    };
  }

  /** Calls `listener` after every change of the keys this instance learns of. Returns its removal. */
  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  async list(): Promise<SigningKeyView[]> {
    return (await listSigningKeys(this.#options.db)).map(toView);
  }

  /** `record` runs in the change's transaction (the audit log), once the change is made. */
  create(alg: SigningKeyAlgorithm, record?: RecordChange): Promise<SigningKeyView> {
    return this.#oneAtATime(() => this.#create(alg, record));
  }

  rotate(record?: RecordChange): Promise<SigningKeyView[]> {
    return this.#oneAtATime(() => this.#rotate(record));
  }

  revoke(kid: string, record?: RecordChange): Promise<SigningKeyView> {
    return this.#oneAtATime(() => this.#revoke(kid, record));
  }

  #oneAtATime<T>(change: () => Promise<T>): Promise<T> {
    const next = this.#changes.then(change, change);
    this.#changes = next.catch(() => {});
    return next;
  }

  async #create(alg: SigningKeyAlgorithm, record?: RecordChange): Promise<SigningKeyView> {
    const standbyExists = () =>
      new ApiError('SIGNING_KEY_STATE', 'There is a standby signing key already; rotate to it or revoke it first');
    // Checked before making a key (an RSA key takes a while), and again under the lock.
    if (await this.#hasStandby()) throw standbyExists();
    const material = await createKeyMaterial(alg, this.#options.sealingKey);
    const row = await insertStandbyKey(this.#options.db, material, this.#options.now(), record);
    if (row === undefined) throw standbyExists();
    await this.#reload();
    return toView(row);
  }

  async #rotate(record?: RecordChange): Promise<SigningKeyView[]> {
    const { db, now } = this.#options;
    // A key is made only when there is no standby to rotate to. When the standby seen is gone by
    // the time the lock is held, another instance rotated to it at the same moment: that rotation
    // is this one (rotating again would make current a key no verifier has seen published).
    if (await this.#hasStandby()) await rotateKeys(db, undefined, now(), record);
    else await rotateKeys(db, await createKeyMaterial('ES256', this.#options.sealingKey), now(), record);
    await this.#reload();
    return this.#rows.map(toView);
  }

  /**
   * Automatic rotation (SIGNING_KEY_ROTATION_DAYS): one step of the schedule (see
   * applyRotationSchedule): a key signs for `days`, its successor is published a day ahead, and a
   * previous key is revoked once its last tokens have expired (`tokenTtlSeconds`, and a minute).
   */
  async rotateWhenDue(days: number, tokenTtlSeconds: number): Promise<void> {
    const schedule = {
      now: this.#options.now(),
      signMs: days * DAY_MS,
      leadMs: DAY_MS,
      keepPreviousMs: (tokenTtlSeconds + 60) * 1000,
    };
    let outcome = await applyRotationSchedule(this.#options.db, schedule, undefined);
    if (outcome.needsKey) {
      const fresh = await createKeyMaterial('ES256', this.#options.sealingKey);
      outcome = await applyRotationSchedule(this.#options.db, schedule, fresh);
    }
    if (!outcome.changed) return;
    await this.#reload();
    this.#options.log.info(
      { keys: this.#rows.map((r) => ({ kid: r.kid, status: r.status })) },
      'signing keys: automatic rotation changed the keys',
    );
  }

  /** Runs rotateWhenDue every hour (and 5 s after start); returns the stop. */
  startAutomaticRotation(days: number, tokenTtlSeconds: number): () => Promise<void> {
    return startPeriodicJob(
      'signing keys: automatic rotation',
      () => this.rotateWhenDue(days, tokenTtlSeconds),
      HOUR_MS,
      this.#options.log,
    );
  }

  async #hasStandby(): Promise<boolean> {
    return (await listSigningKeys(this.#options.db)).some((r) => r.status === 'standby');
  }

  async #revoke(kid: string, record?: RecordChange): Promise<SigningKeyView> {
    const outcome = await revokeKey(this.#options.db, kid, this.#options.now(), record);
    if ('refused' in outcome) {
      if (outcome.refused === 'unknown') throw new ApiError('NOT_FOUND', 'No signing key has this kid');
      throw new ApiError('SIGNING_KEY_STATE', 'The current signing key cannot be revoked; rotate first');
    }
    await this.#reload();
    return toView(outcome.revoked);
  }

  /** One read at a time; a caller arriving while one runs waits for it, then reads again. */
  #reload(): Promise<void> {
    const next = (this.#loading ?? Promise.resolve())
      .then(() => this.#read())
      .then(
        () => {
          this.#stale = false;
        },
        (err: unknown) => {
          this.#stale = true;
          throw err;
        },
      );
    // What the next caller waits for: this read, failed or not (its caller handles the failure).
    const settled = next.catch(() => {});
    this.#loading = settled;
    void settled.then(() => {
      if (this.#loading === settled) this.#loading = undefined;
    });
    return next;
  }

  async #read(): Promise<void> {
    const rows = await listSigningKeys(this.#options.db);
    const verifying = new Map<string, VerifyingKey>();
    let current: SigningKey | undefined;
    for (const row of rows) {
      if (row.status === 'revoked') continue;
      const publicPem = createPublicKey({ key: row.public_jwk, format: 'jwk' }).export({
        type: 'spki',
        format: 'pem',
      }) as string;
      verifying.set(row.kid, { kid: row.kid, alg: row.alg, publicPem, retiredAt: row.retired_at?.getTime() });
      if (row.status === 'current') {
        let privatePem = this.#opened.get(row.kid);
        if (privatePem === undefined) {
          try {
            privatePem = unseal(this.#options.sealingKey, row.private_key_sealed, row.kid);
          } catch {
            throw new SealedKeyError(row.kid);
          }
          this.#opened.set(row.kid, privatePem);
        }
        current = { kid: row.kid, alg: row.alg, privatePem };
      }
    }
    // None before start() creates the first (a notification connection may read them earlier).
    if (current === undefined) {
      if (this.#current !== undefined) this.#options.log.error('signing keys: no current key in the database');
      return;
    }
    const changed =
      rows.length !== this.#rows.length ||
      rows.some((r, i) => r.kid !== this.#rows[i]?.kid || r.status !== this.#rows[i]?.status);
    this.#rows = rows;
    this.#verifying = verifying;
    this.#current = current;
    if (!changed) return;
    for (const listener of this.#listeners) {
      try {
        listener();
      } catch (err) {
        this.#options.log.error({ err }, 'signing keys: a listener failed');
      }
    }
  }
}
