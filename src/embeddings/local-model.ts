/**
 * The in-process embedding model `local/lexical-v1`: feature hashing of words, word pairs and
 * character trigrams into a signed vector, L2-normalised. Deterministic, no network, no weights.
 * Texts that share words or word pieces get a high cosine similarity; it knows nothing of meaning
 * (synonyms and paraphrases without shared words score near zero).
 */

// Feature weights: whole words carry most of the signal, word pairs add order, character
// trigrams make inflections and typos land near each other.
const WORD_WEIGHT = 1;
const PAIR_WEIGHT = 0.5;
const TRIGRAM_WEIGHT = 0.35;

/** FNV-1a over UTF-16 code units, then murmur3's finaliser for an even spread of bits. */
function hash32(text: string, seed: number): number {
  let h = (0x811c9dc5 ^ seed) >>> 0;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

function addFeature(acc: Float64Array, feature: string, weight: number): void {
  const h = hash32(feature, 0);
  // One bit of a second hash picks the sign, so that collisions cancel out on average.
  const sign = hash32(feature, 0x9e3779b9) & 1 ? -1 : 1;
  const index = h % acc.length;
  acc[index] = (acc[index] as number) + sign * weight;
}

const WORD = /[\p{L}\p{N}]+/gu;

/** The embedding of `text` with `dimensions` components (any size from 1 up). */
export function localEmbedding(text: string, dimensions: number): Float32Array {
  const normal = text.normalize('NFKC').toLowerCase();
  const acc = new Float64Array(dimensions);
  const words = normal.match(WORD) ?? [];
  let previous: string | undefined;
  for (const word of words) {
    addFeature(acc, `w:${word}`, WORD_WEIGHT);
    if (previous !== undefined) addFeature(acc, `p:${previous} ${word}`, PAIR_WEIGHT);
    previous = word;
  }
  // Character trigrams over the whole text (words padded with spaces), so that any non-empty
  // input, punctuation only included, has features.
  const padded = ` ${normal.replace(/\s+/g, ' ')} `;
  for (let i = 0; i + 3 <= padded.length; i++) addFeature(acc, `c:${padded.slice(i, i + 3)}`, TRIGRAM_WEIGHT);

  let norm = 0;
  for (const x of acc) norm += x * x;
  norm = Math.sqrt(norm);
  const out = new Float32Array(dimensions);
  if (norm === 0) {
    out[0] = 1; // every feature cancelled out: any unit vector beats a zero vector (cosine needs a length)
    return out;
  }
  for (let i = 0; i < dimensions; i++) out[i] = (acc[i] as number) / norm;
  return out;
}
