/**
 * What the realtime benchmark's processes share: the clock, the hashes that check order and completeness, and the messages between the main process and its subscriber
 * processes (bench/lib/realtime-worker.ts).
 */

import type { SerializedHistogram } from './latency.ts';

/**
 * Milliseconds (with sub-microsecond precision) of CLOCK_MONOTONIC, the clock process.hrtime reads
 * on Linux: one clock for the whole machine, so a time taken in one process (the publisher's
 * `sentAt`) and one taken in another (a subscriber's receipt) are comparable, and wall-clock
 * adjustments during the run do not move it.
 */
export function monotonicMs(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

/** The channel every scenario uses and the pattern of the channel row that admits it. */
export const CHANNEL = 'bench:room';
export const CHANNEL_PATTERN = 'bench:%';
export const EVENT = 'tick';

/** The payload of a published message. */
export interface TickPayload {
  /** monotonicMs() when the publish was emitted. */
  sentAt: number;
  /** Per publisher, from 0, one per publish attempt (refused ones leave gaps). */
  seq: number;
  /** The publisher's id, unique within the run. */
  publisher: number;
}

// ---- hashes ---------------------------------------------------------------------------------

/** FNV-1a of a string's UTF-16 code units (message ids are ASCII). */
export function hashString(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

function mix32(x: number): number {
  let h = x | 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/**
 * The hash of one delivered message: its id, publisher and seq together. Summed (mod 2^32) over a
 * subscriber's deliveries it is compared with the same sum over the publishers' acknowledgements:
 * equal sums mean the subscriber got exactly the acknowledged messages, each with the id its ack named.
 */
export function deliveryHash(messageIdHash: number, publisher: number, seq: number): number {
  return mix32(messageIdHash ^ Math.imul(seq + 1, 0x9e3779b1) ^ Math.imul(publisher + 1, 0x27d4eb2f));
}

/** An order-sensitive fingerprint of a sequence of message ids (two 32-bit lanes). */
export class OrderFingerprint {
  a = 0x811c9dc5;
  b = 17;
  add(messageIdHash: number): void {
    this.a = Math.imul(this.a ^ messageIdHash, 0x01000193);
    this.b = (Math.imul(this.b, 31) + messageIdHash) | 0;
  }
  toString(): string {
    return `${(this.a >>> 0).toString(16).padStart(8, '0')}${(this.b >>> 0).toString(16).padStart(8, '0')}`;
  }
}

/** A growable bit set of sequence numbers. */
export class SeqSet {
  bits = new Uint8Array(1024);
  /** Sets `seq`; returns false when it was already set. */
  add(seq: number): boolean {
    const byte = seq >>> 3;
    if (byte >= this.bits.length) {
      const grown = new Uint8Array(Math.max(this.bits.length * 2, byte + 1));
      grown.set(this.bits);
      this.bits = grown;
    }
    const mask = 1 << (seq & 7);
    if ((this.bits[byte] as number) & mask) return false;
    this.bits[byte] = (this.bits[byte] as number) | mask;
    return true;
  }
  has(seq: number): boolean {
    const byte = seq >>> 3;
    return byte < this.bits.length && ((this.bits[byte] as number) & (1 << (seq & 7))) !== 0;
  }
  /** Bits set here and not in `other`. */
  countMissingFrom(other: SeqSet): number {
    let n = 0;
    for (let i = 0; i < this.bits.length; i++) {
      let x = (this.bits[i] as number) & ~(i < other.bits.length ? (other.bits[i] as number) : 0);
      while (x) {
        n += x & 1;
        x >>>= 1;
      }
    }
    return n;
  }
  toBase64(): string {
    let end = this.bits.length;
    while (end > 0 && this.bits[end - 1] === 0) end--;
    return Buffer.from(this.bits.subarray(0, end)).toString('base64');
  }
  static fromBase64(s: string): SeqSet {
    const set = new SeqSet();
    const bytes = Buffer.from(s, 'base64');
    if (bytes.length > set.bits.length) set.bits = new Uint8Array(bytes.length);
    set.bits.set(bytes);
    return set;
  }
}

// ---- main process <-> subscriber process -----------------------------------------------------

export interface SubscriberSpec {
  /** Index among the scenario's subscribers. */
  index: number;
  /** 0 or 1: which service instance. */
  instance: number;
  url: string;
  token: string;
}

export type WorkerRequest =
  | { type: 'connect'; subscribers: SubscriberSpec[]; concurrency: number }
  | { type: 'measure'; fromMs: number; toMs: number; publishers: number[] }
  | { type: 'status' }
  | { type: 'collect'; acked: Record<string, string> }
  | { type: 'close' };

/** A request with its id, as sent over IPC; the answer carries the same id. */
export type WorkerEnvelope = WorkerRequest & { id: number };

export interface ConnectFailure {
  index: number;
  instance: number;
  stage: 'connect' | 'subscribe';
  reason: string;
}

export interface WorkerStatus {
  connected: number;
  received: number;
  /** monotonicMs() of the last presence event any of its sockets received (0: none). */
  lastPresenceAt: number;
  disconnects: number;
  realtimeErrors: number;
}

export interface SubscriberResult {
  index: number;
  instance: number;
  received: number;
  /** Deliveries of messages sent within the measured window. */
  inWindow: number;
  /** A publisher's seq not above the last one seen from it (includes duplicates). */
  orderViolations: number;
  duplicates: number;
  /** Acknowledged messages it did not get. */
  missing: number;
  /** Messages it got that no publisher saw acknowledged (or from no known publisher). */
  unexpected: number;
  malformed: number;
  /** Sum of deliveryHash over its deliveries (mod 2^32). */
  checksum: number;
  /** Order fingerprint of the message ids it received. */
  order: string;
  disconnectReasons: string[];
  realtimeErrors: Record<string, number>;
}

export interface WorkerResult {
  subscribers: SubscriberResult[];
  latency: SerializedHistogram;
}

export type WorkerAnswer =
  | { id: number; type: 'connected'; failures: ConnectFailure[]; seconds: number }
  | { id: number; type: 'ok' }
  | ({ id: number; type: 'status' } & WorkerStatus)
  | ({ id: number; type: 'result' } & WorkerResult)
  | { id: number; type: 'error'; message: string };

/** Sent by a subscriber process without a request: connection progress. */
export interface WorkerProgress {
  type: 'progress';
  connected: number;
}
