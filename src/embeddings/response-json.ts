import type { EmbeddingsOutput, EmbeddingsResult } from './embeddings-service.ts';
import { float32ToBase64, type Vector } from './vectors.ts';

// The JSON body of an embeddings answer (EmbeddingsResponse), written by hand because its numbers
// are nearly all of the cost: JSON.stringify spends about 80 ns on each non-integer double, and
// there are 1536 per vector. Float32 values are written with 9 significant digits, the fewest that
// always read back as the same float32 (a double's 17 would only add noise), from their integer
// digits, straight into bytes. The strings around them are left to JSON.stringify.

const POWERS_OF_TEN = Float64Array.from({ length: 23 }, (_, i) => 10 ** i); // exact up to 10^22
const MAX_NUMBER_BYTES = 26; // ',-0.0000012345678901234567' (String() of a 17-digit double near 1e-6)
const DIGIT_PAIRS = Uint8Array.from(
  { length: 200 },
  (_, i) => 0x30 + (i % 2 === 0 ? Math.floor(i / 20) : (i >> 1) % 10),
);

// Reused for every answer that fits (the text is copied out); a larger answer gets a buffer of its
// own, so that one huge request does not pin its size for the life of the process.
const scratch = Buffer.allocUnsafe(64 * 1024);

/** Writes `digits` (a positive int32 with `count` digits) so that it ends just before `end`. */
function writeDigits(out: Buffer, digits: number, end: number): void {
  let d = digits;
  let w = end;
  while (d >= 100) {
    const q = (d / 100) | 0;
    const pair = (d - q * 100) * 2;
    out[--w] = DIGIT_PAIRS[pair + 1] as number;
    out[--w] = DIGIT_PAIRS[pair] as number;
    d = q;
  }
  if (d >= 10) {
    out[--w] = DIGIT_PAIRS[d * 2 + 1] as number;
    out[--w] = DIGIT_PAIRS[d * 2] as number;
  } else {
    out[--w] = 0x30 + d;
  }
}

/**
 * Writes the vector as a JSON array at `at` and returns the position after it. A value whose 9
 * significant digits give it back (as a float32 for a Float32Array, exactly for plain numbers) is
 * written from those digits; any other value as String() writes it.
 */
function writeVector(out: Buffer, at: number, values: Vector): number {
  const single = values instanceof Float32Array;
  out[at++] = 0x5b; // [
  for (let i = 0; i < values.length; i++) {
    if (i > 0) out[at++] = 0x2c; // ,
    const x = values[i] as number;
    const magnitude = x < 0 ? -x : x;
    // magnitude = scaled × 10^-shift, scaled with exactly 9 digits (when log10 is not off by one).
    const shift = magnitude > 0 && magnitude < Infinity ? 8 - Math.floor(Math.log10(magnitude)) : -1;
    const scale = shift >= 0 && shift <= 22 ? (POWERS_OF_TEN[shift] as number) : 0;
    const scaled = scale === 0 ? 0 : Math.round(magnitude * scale);
    const back = scaled / scale;
    if (scaled < 1e8 || scaled >= 1e9 || (single ? Math.fround(back) : back) !== magnitude) {
      const text = Number.isFinite(x) ? String(single ? Number(x.toPrecision(9)) : x) : 'null';
      at += out.write(text, at, 'latin1');
      continue;
    }
    let digits = scaled | 0; // below 2^31: int32 arithmetic from here on
    let fraction = shift; // digits after the point
    let count = 9;
    while (fraction > 0 && digits % 10 === 0) {
      digits = (digits / 10) | 0;
      fraction--;
      count--;
    }
    if (x < 0) out[at++] = 0x2d; // -
    const integerDigits = count - fraction;
    if (integerDigits <= 0) {
      out[at++] = 0x30; // 0
      out[at++] = 0x2e; // .
      for (let z = integerDigits; z < 0; z++) out[at++] = 0x30;
      writeDigits(out, digits, at + count);
      at += count;
    } else if (fraction === 0) {
      writeDigits(out, digits, at + count);
      at += count;
    } else {
      const unit = POWERS_OF_TEN[fraction] as number;
      const low = digits % unit;
      writeDigits(out, (digits - low) / unit, at + integerDigits);
      at += integerDigits;
      out[at++] = 0x2e; // .
      // The fraction keeps its leading zeros: write them, then its digits right-aligned.
      for (let z = 0; z < fraction; z++) out[at + z] = 0x30;
      if (low > 0) writeDigits(out, low, at + fraction);
      at += fraction;
    }
  }
  out[at++] = 0x5d; // ]
  return at;
}

/** The EmbeddingsResponse for a result, as the bytes of its JSON text. */
export function embeddingsResponseJson(result: EmbeddingsResult): Buffer {
  const { model, usage } = result.metadata;
  // OpenAI's top-level model and usage, then InsForge's metadata: the same figures in both forms.
  const head: Omit<EmbeddingsOutput, 'data'> = {
    object: 'list',
    model,
    usage: { prompt_tokens: usage.promptTokens, total_tokens: usage.totalTokens },
    metadata: result.metadata,
  };
  const item: Omit<EmbeddingsOutput['data'][number], 'embedding' | 'index'> = { object: 'embedding' };
  const start = `{"object":${JSON.stringify(head.object)},"data":[`;
  const end = `],"model":${JSON.stringify(head.model)},"usage":${JSON.stringify(head.usage)},"metadata":${JSON.stringify(head.metadata)}}`;
  const itemStart = `{"object":${JSON.stringify(item.object)},"embedding":`;
  const encoded = result.encoding === 'base64' ? result.vectors.map(float32ToBase64) : undefined;
  let needed = Buffer.byteLength(start) + Buffer.byteLength(end);
  result.vectors.forEach((v, i) => {
    needed += itemStart.length + 32 + (encoded ? (encoded[i] as string).length + 2 : v.length * MAX_NUMBER_BYTES + 2);
  });
  const out = needed <= scratch.length ? scratch : Buffer.allocUnsafe(needed);
  let at = out.write(start, 0, 'utf8');
  result.vectors.forEach((v, index) => {
    if (index > 0) out[at++] = 0x2c; // ,
    at += out.write(itemStart, at, 'latin1');
    at = encoded ? at + out.write(`"${encoded[index]}"`, at, 'latin1') : writeVector(out, at, v);
    at += out.write(`,"index":${index}}`, at, 'latin1');
  });
  at += out.write(end, at, 'utf8');
  return out === scratch ? Buffer.from(out.subarray(0, at)) : out.subarray(0, at);
}
