/**
 * A WebAuthn authenticator in software, for the tests that need a response a browser would not
 * make (a credential id over WebAuthn's bound, transports outside its names): a P-256 key,
 * attestation "none", every byte chosen by the test. The browser's own authenticator is in
 * test/browser-passkeys.test.ts; this one never stands in for it where a browser can do the job.
 */
import { createHash, generateKeyPairSync, type KeyObject, randomBytes, sign } from 'node:crypto';
import { isoCBOR } from '@simplewebauthn/server/helpers';

export interface SoftwareCredential {
  id: Buffer;
  privateKey: KeyObject;
  /** The public key, COSE (EC2, ES256), CBOR-encoded. */
  publicKey: Uint8Array;
  counter: number;
}

/** Where a ceremony happens: the page's origin and the relying party's id. */
export interface Ceremony {
  challenge: string;
  origin: string;
  rpId: string;
  /** The user-verified flag (default: set). */
  userVerified?: boolean;
}

const b64url = (bytes: Uint8Array) => Buffer.from(bytes).toString('base64url');

export function newSoftwareCredential(idBytes = 16): SoftwareCredential {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const jwk = publicKey.export({ format: 'jwk' });
  const cose = new Map<number, number | Uint8Array>([
    [1, 2], // kty: EC2
    [3, -7], // alg: ES256
    [-1, 1], // crv: P-256
    [-2, Buffer.from(jwk.x as string, 'base64url')],
    [-3, Buffer.from(jwk.y as string, 'base64url')],
  ]);
  return { id: randomBytes(idBytes), privateKey, publicKey: isoCBOR.encode(cose), counter: 0 };
}

/** authenticatorData: the RP ID's hash, the flags (user present, verified, attested data), the counter. */
function authenticatorData(ceremony: Ceremony, counter: number, attested?: Buffer): Buffer {
  const flags = 0x01 | (ceremony.userVerified === false ? 0 : 0x04) | (attested === undefined ? 0 : 0x40);
  const count = Buffer.alloc(4);
  count.writeUInt32BE(counter);
  return Buffer.concat([
    createHash('sha256').update(ceremony.rpId).digest(),
    Buffer.from([flags]),
    count,
    ...(attested === undefined ? [] : [attested]),
  ]);
}

const clientData = (type: string, ceremony: Ceremony) =>
  Buffer.from(JSON.stringify({ type, challenge: ceremony.challenge, origin: ceremony.origin, crossOrigin: false }));

/** What `navigator.credentials.create()` would answer (RegistrationResponseJSON). */
export function registrationResponse(credential: SoftwareCredential, ceremony: Ceremony, transports = ['internal']) {
  const length = Buffer.alloc(2);
  length.writeUInt16BE(credential.id.length);
  const attested = Buffer.concat([Buffer.alloc(16), length, credential.id, credential.publicKey]);
  const attestation = new Map<string, unknown>([
    ['fmt', 'none'],
    ['attStmt', new Map()],
    ['authData', authenticatorData(ceremony, credential.counter, attested)],
  ]);
  const attestationObject = isoCBOR.encode(attestation as Parameters<typeof isoCBOR.encode>[0]);
  return {
    id: b64url(credential.id),
    rawId: b64url(credential.id),
    type: 'public-key',
    clientExtensionResults: {},
    response: {
      clientDataJSON: b64url(clientData('webauthn.create', ceremony)),
      attestationObject: b64url(attestationObject),
      transports,
    },
  };
}

/** What `navigator.credentials.get()` would answer (AuthenticationResponseJSON); the counter moves on. */
export function authenticationResponse(credential: SoftwareCredential, ceremony: Ceremony) {
  credential.counter += 1;
  const data = authenticatorData(ceremony, credential.counter);
  const json = clientData('webauthn.get', ceremony);
  const signature = sign(
    'sha256',
    Buffer.concat([data, createHash('sha256').update(json).digest()]),
    credential.privateKey,
  );
  return {
    id: b64url(credential.id),
    rawId: b64url(credential.id),
    type: 'public-key',
    clientExtensionResults: {},
    response: { clientDataJSON: b64url(json), authenticatorData: b64url(data), signature: b64url(signature) },
  };
}
