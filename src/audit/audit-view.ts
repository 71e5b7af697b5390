// The audit log as the contract shows it (AuditEvent, AuditEventList in openapi.yaml): entries,
// the paging cursor, and the query's lists and instants.
import type { components } from '../../generated/openapi.ts';
import type { AuditEntry } from '../db/repositories/audit-log.ts';
import type { AuditEventType } from './event-types.ts';

export type ApiAuditEvent = components['schemas']['AuditEvent'];
export type ApiAuditEventList = components['schemas']['AuditEventList'];

type DetailValue = string | number | boolean | null;

const isScalar = (v: unknown): v is DetailValue =>
  v === null || typeof v === 'string' || typeof v === 'boolean' || typeof v === 'number';

/** An entry as the contract shows it. Details are scalars (the trail writes no other); anything else would be shown as its JSON text. */
export function toAuditEvent(entry: AuditEntry): ApiAuditEvent {
  const details: Record<string, DetailValue> = {};
  for (const [name, value] of Object.entries(entry.details)) {
    details[name] = isScalar(value) ? value : JSON.stringify(value);
  }
  return {
    id: entry.id,
    occurredAt: entry.occurredAt.toISOString(),
    type: entry.type as AuditEventType,
    outcome: entry.outcome,
    method: entry.method,
    actorId: entry.actorId,
    userId: entry.userId,
    sessionId: entry.sessionId,
    ip: entry.ip,
    userAgent: entry.userAgent,
    details,
  };
}

/**
 * The cursor after an entry: its id as 8 bytes (big-endian), in base64url: 11 characters, which
 * the contract's AuditCursor pattern admits exactly (the first one below `g`, as an int8 id is
 * below 2^63; the last one carrying 4 bits). So every cursor the contract admits decodes.
 */
export function encodeCursor(id: string): string {
  const bytes = Buffer.alloc(8);
  bytes.writeBigUInt64BE(BigInt(id));
  return bytes.toString('base64url');
}

/** The id a cursor names, or undefined when it is not one encodeCursor makes. */
export function decodeCursor(cursor: string): bigint | undefined {
  const bytes = Buffer.from(cursor, 'base64url');
  if (bytes.length !== 8 || bytes.toString('base64url') !== cursor) return undefined;
  const id = bytes.readBigUInt64BE();
  return id < 2n ** 63n ? id : undefined;
}

/** A comma-separated list of types (its pattern checked by the contract), each once. */
export function parseTypeList(list: string): AuditEventType[] {
  return [...new Set(list.split(','))] as AuditEventType[];
}

// RFC 3339 date-time, as the contract's `date-time` format admits it (white space or `t` between
// date and time, `z`, an offset with or without its colon or minutes, a leap second).
const INSTANT = /^(\d{4})-(\d\d)-(\d\d)[Tt\s](\d\d):(\d\d):(\d\d)(?:\.(\d+))?(?:[Zz]|([+-])(\d\d)(?::?(\d\d))?)$/;
// What both PostgreSQL and JavaScript dates hold: no entry lies outside, so clamping changes no answer.
const EARLIEST = Date.parse('0001-01-01T00:00:00.000Z');
const LATEST = Date.parse('9999-12-31T23:59:59.999Z');

/**
 * The instant a `date-time` query value names (a leap second counts as the next second's start),
 * kept within years 1 to 9999; undefined when it is not one.
 */
export function parseInstant(text: string): Date | undefined {
  const m = INSTANT.exec(text);
  if (m === null) return undefined;
  const [, year, month, day, hour, minute, second, fraction = '', sign, offsetHours = '0', offsetMinutes = '0'] = m;
  const utc = new Date(0);
  // setUTCFullYear, not Date.UTC: Date.UTC reads years 0 to 99 as 1900 to 1999.
  utc.setUTCFullYear(Number(year), Number(month) - 1, Number(day));
  utc.setUTCHours(Number(hour), Number(minute), Number(second), Number(fraction.padEnd(3, '0').slice(0, 3)));
  const offsetMs = (Number(offsetHours) * 60 + Number(offsetMinutes)) * 60_000 * (sign === '-' ? -1 : 1);
  const ms = utc.getTime() - offsetMs;
  return Number.isNaN(ms) ? undefined : new Date(Math.min(LATEST, Math.max(EARLIEST, ms)));
}
