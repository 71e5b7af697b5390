import os from 'node:os';

/** A vector as a provider produced it: numbers from a JSON array, or float32 values. */
export type Vector = number[] | Float32Array;

const littleEndianHost = os.endianness() === 'LE';

/** The float32 values of `v`, in order. */
export function toFloat32(v: Vector): Float32Array {
  return v instanceof Float32Array ? v : Float32Array.from(v);
}

/** Base64 of the vector's float32 values in little-endian byte order (what the OpenAI SDKs decode). */
export function float32ToBase64(v: Vector): string {
  const values = toFloat32(v);
  if (littleEndianHost) return Buffer.from(values.buffer, values.byteOffset, values.byteLength).toString('base64');
  const bytes = Buffer.alloc(values.length * 4);
  for (let i = 0; i < values.length; i++) bytes.writeFloatLE(values[i] as number, i * 4);
  return bytes.toString('base64');
}

/** The inverse of float32ToBase64; undefined when the text is not a whole number of float32 values. */
export function base64ToFloat32(text: string): Float32Array | undefined {
  const bytes = Buffer.from(text, 'base64');
  if (bytes.length === 0 || bytes.length % 4 !== 0) return undefined;
  // A copy into a buffer of its own: Buffer.from may hand out a slice of a shared pool.
  if (littleEndianHost) return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
  const values = new Float32Array(bytes.length / 4);
  for (let i = 0; i < values.length; i++) values[i] = bytes.readFloatLE(i * 4);
  return values;
}
