// How strong a signing secret looks. A secret's real entropy cannot be measured from one sample;
// these are estimates meant to refuse what people write by hand (placeholders, sentences, keyboard
// runs) while always accepting what `openssl rand -base64 48` or `openssl rand -hex 32` prints.

/** The estimated entropy a production signing secret must reach: 32 bytes, as much as HS256's key. */
export const MIN_SECRET_BITS = 256;

/** The value docker-compose.yml used to fall back to: public, so anyone could sign tokens with it. */
const OLD_COMPOSE_DEFAULT = 'change-me-to-a-long-random-secret-of-32-or-more-chars';

// Compared with the value lower-cased and stripped of everything but letters and digits, so that
// "Change_Me" and "change-me" both match. Six characters or more: a given 4-letter word turns up by
// chance in about 1 of 17,000 values of `openssl rand -base64 48`; all of these together in fewer
// than 1 of 10 million.
const PLACEHOLDERS = [
  'changeme',
  'changethis',
  'replaceme',
  'replacethis',
  'placeholder',
  'yoursecret',
  'yourjwtsecret',
  'mysecret',
  'supersecret',
  'topsecret',
  'secretkey',
  'jwtsecret',
  'example',
  'default',
  'insecure',
  'notsecure',
  'dontuse',
  'donotuse',
  'password',
  'passw0rd',
  'letmein',
  'qwerty',
  'loremipsum',
  'abcdefgh',
  '12345678',
];

/** Bits credited to one word of a passphrase: a word drawn at random from a list of 8,192. */
const BITS_PER_WORD = 13;

/**
 * How much larger than the alphabet its distinct characters suggest a value's alphabet may be. A
 * random value shows fewer distinct characters than its alphabet holds: 43 base64 characters (a
 * 32-byte key) show about 31 of 64, and would lose credit here only below 19.
 */
const DIVERSITY_SLACK = 3;

const log2 = Math.log2;

/**
 * Bits per character of the smallest usual alphabet the text fits: hexadecimal 4; base64 or
 * base64url 6 (when both letter cases occur, as they do in any random base64 of 32 bytes or more);
 * otherwise the sum of the classes that occur (26 lower-case, 26 upper-case, 10 digits, the two
 * symbols of base64 or base64url, or else 33 for ASCII punctuation and space, 128 for the rest).
 */
function alphabetBits(text: string): number {
  if (/^[0-9a-f]+$/i.test(text)) return 4;
  const base64 = /^[A-Za-z0-9+/]+$/.test(text) || /^[A-Za-z0-9_-]+$/.test(text);
  if (base64 && /[a-z]/.test(text) && /[A-Z]/.test(text)) return 6;
  let size = 0;
  if (/[a-z]/.test(text)) size += 26;
  if (/[A-Z]/.test(text)) size += 26;
  if (/[0-9]/.test(text)) size += 10;
  if (/[^A-Za-z0-9]/.test(text)) size += base64 ? 2 : 33;
  if (/[^\x20-\x7e]/.test(text)) size += 128;
  return log2(size);
}

/**
 * The alphabet size that would typically show `distinct` different characters in `length` random
 * draws (solves A·(1 − (1 − 1/A)^length) = distinct); Infinity when every character differs.
 */
function alphabetShowing(distinct: number, length: number): number {
  if (distinct >= length) return Number.POSITIVE_INFINITY;
  const expected = (a: number) => a * (1 - (1 - 1 / a) ** length);
  let low = distinct;
  let high = distinct * 2;
  while (expected(high) < distinct) high *= 2;
  for (let i = 0; i < 40; i++) {
    const mid = (low + high) / 2;
    if (expected(mid) < distinct) low = mid;
    else high = mid;
  }
  return high;
}

/**
 * A passphrase's words (lower-case, Capitalised or upper-case letters, or digits) when the value is
 * at least three such tokens between separators; undefined otherwise. Random base64 splits into
 * mixed-case tokens, so it never reads as one.
 */
function passphraseTokens(secret: string): string[] | undefined {
  const tokens = secret.split(/[^A-Za-z0-9]+/).filter((token) => token !== '');
  if (tokens.length < 3) return undefined;
  const plain = tokens.every((token) => /^([a-z]+|[A-Z][a-z]*|[A-Z]+|[0-9]+)$/.test(token));
  return plain ? tokens : undefined;
}

/**
 * Estimated entropy of a secret, in bits. Words of a passphrase count 13 bits each (digits 3.3 per
 * digit). Otherwise each character counts as much as the smallest alphabet it fits (hexadecimal 4
 * bits, base64 or base64url 6, else the sum of its character classes), but no more than the
 * alphabet its number of distinct characters suggests (with DIVERSITY_SLACK): "abab…" or
 * "0000…1111" count for little.
 */
export function estimateEntropyBits(secret: string): number {
  const words = passphraseTokens(secret);
  if (words !== undefined) {
    return words.reduce(
      (bits, token) =>
        bits + (/^[0-9]+$/.test(token) ? token.length * log2(10) : Math.min(BITS_PER_WORD, token.length * log2(26))),
      0,
    );
  }
  // Base64 padding carries nothing, nor do the separators of grouped hexadecimal (UUIDs, MAC-like).
  const text = /^[0-9a-f]+([-:][0-9a-f]+)+$/i.test(secret) ? secret.replace(/[-:]/g, '') : secret.replace(/=+$/, '');
  const chars = [...text];
  if (chars.length === 0) return 0;
  const distinct = new Set(chars).size;
  const perChar = Math.min(alphabetBits(text), log2(DIVERSITY_SLACK * alphabetShowing(distinct, chars.length)));
  return chars.length * perChar;
}

/** `secret` is a shorter string repeated, such as "abcabcabc": the length of that string, else undefined. */
function repeatedUnit(secret: string): number | undefined {
  const chars = [...secret];
  for (let unit = 1; unit <= chars.length / 2; unit++) {
    if (chars.length % unit !== 0) continue;
    const head = chars.slice(0, unit).join('');
    if (head.repeat(chars.length / unit) === secret) return unit;
  }
  return undefined;
}

/**
 * Why `secret` must not sign tokens in production, as a phrase that completes "JWT_SECRET …"
 * (naming at most the placeholder word found, never the value); undefined when it looks random.
 */
export function secretWeakness(secret: string): string | undefined {
  const unit = repeatedUnit(secret);
  if (unit === 1) return 'is one character repeated';
  if (secret.toLowerCase() === OLD_COMPOSE_DEFAULT) return 'is the public example value of docker-compose.yml';
  const folded = secret.toLowerCase().replace(/[^a-z0-9]/g, '');
  const placeholder = PLACEHOLDERS.find((word) => folded.includes(word));
  if (placeholder !== undefined) return `looks like a placeholder, containing "${placeholder}"`;
  if (folded.split('secret').length > 2) return 'looks like a placeholder, repeating "secret"';
  if (unit !== undefined) return `is a sequence of ${unit} characters repeated`;
  const bits = estimateEntropyBits(secret);
  if (bits < MIN_SECRET_BITS) {
    return `has about ${Math.floor(bits)} bits of estimated entropy, fewer than ${MIN_SECRET_BITS}`;
  }
  return undefined;
}
