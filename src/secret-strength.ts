// How strong a signing secret looks. A secret's real entropy cannot be measured from one sample;
// these are estimates meant to refuse what people write by hand (placeholders, sentences, phrases,
// keyboard runs, parts repeated) while always accepting what `openssl rand -base64 48` or
// `openssl rand -hex 32` prints.

import { deflateRawSync } from 'node:zlib';

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
 * Structure counts only where a random value of the same alphabet and length would show it by chance
 * less than once in 2^30 values: `openssl rand -hex 32` carries exactly 256 bits and 32 random bytes
 * as base64url 258, so any credit taken from a random key by mistake would refuse it.
 */
const CHANCE_BITS = 30;

/**
 * Bits credited to each letter of a run that reads as English: Shannon's experiments put English
 * at about one bit a letter, and a phrase chosen for a key is a little less predictable.
 */
const LANGUAGE_BITS_PER_LETTER = 2;

/** What deflate adds around its data: block header, end-of-block code and padding to a whole byte. */
const DEFLATE_FRAMING_BITS = 16;

/** Earlier occurrences tried for each repeat, the latest first (deflate bounds its search the same way). */
const MAX_REPEAT_CANDIDATES = 64;

/**
 * What people type in order: the alphabet, digits, the keyboard's rows from the top left (as typed
 * across the keyboard, row after row) and the shifted digit row; each is also read backwards. No
 * character occurs twice in one of them, so a character has at most 4 successors among them all.
 */
const SEQUENCES = [
  'abcdefghijklmnopqrstuvwxyz',
  'ABCDEFGHIJKLMNOPQRSTUVWXYZ',
  '0123456789',
  '1234567890qwertyuiopasdfghjklzxcvbnm',
  '1234567890QWERTYUIOPASDFGHJKLZXCVBNM',
  '!@#$%^&*()_+',
].flatMap((sequence) => [sequence, [...sequence].reverse().join('')]);
const SEQUENCE_SUCCESSORS = 4;

/**
 * English letter statistics, as costs in quarter bits written with the base64 alphabet (A = 0,
 * B = 1, ... / = 63): the first line for a first letter, then one line for each letter a-z giving
 * the cost of each letter a-z after it. Counted over about 128,000 letters of English prose
 * (software licences and the project's README) with everything but letters removed (words joined,
 * as in "itwasthebest"), every pair counted at least half a time, each cost rounded up: every line
 * sums to at most one (a sub-probability), which the bound in `languageSegments` relies on.
 */
const ENGLISH_COSTS = [
  'QZTTNXYTPodUWQPWlQQOVbaiYr',
  'rUQTtaVtToaOUKpToOQLXbcmWw',
  'PiflKiqwQWqKdqQewTTeMwkwOw',
  'PrVrKmwNTtTRptIirVcOTrr2g2',
  'OUWSKYedKkhYYbPX1WSRUYUqZv',
  'QdQOWVbgVqqUUNWVcLNRcYYYb2',
  'PmafSTpjMppZfjKayNWJVmdySy',
  'OcZeJbaPQnxWaQSXxMRRWgYnjx',
  'KpZhFjqmNp2iedPgvXZQcjjvf2',
  'WUOVTTUspwlTTKNbwWNNnWwnjf',
  'PhbhHhhhYhhhhhOYhhJhNbShhh',
  'PaZjGYdhNsmbXSVcsZOTZmZsds',
  'PebULbhdI1pPcaPWvcTRUcc1R1',
  'KRbcIitlNztaWgNRzZRVWjkqkz',
  'RbSMPaPiUkfacWPYucMLXadzVu',
  'ZbUTdOZmdxYVTJbS6KUQPVVljr',
  'MihfMoceQqlPXmNSzLXRPkjzRz',
  'ekekkkkkkkkKkkkkkkVkCkkkkk',
  'OdTWJbbiNuUZSbOYuVQRXYaqUz',
  'PbUbKYeTPqiVaYOUfXPLTiWmb5',
  'PeYeNddIMuqYbdOZtSRTblYvW7',
  'VPRUUdXfU0tTPMdU0NNLj0h0tm',
  'OuooDuuoLuuuuoVouollououou',
  'MpcjQihMJvvZjRJevUYXvfbvmv',
  'OXNnNcnYPnnncnXLgegJnneYSn',
  'NYTXVXfeQjgVXVJQoRPOafWrbi',
  'JfffGfffOfffYfVffYVYfffffR',
].map((line) =>
  [...line].map((c) => 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'.indexOf(c) / 4),
);

/** The kinds of structure that lower the estimate, as named in the refusal. */
type Structure = 'repeats' | 'sequence' | 'language';

/** A part of the value that costs `bits` to describe, fewer than its characters one by one. */
interface Segment {
  start: number;
  end: number;
  bits: number;
  kind: Structure;
}

/**
 * Parts that repeat an earlier part (overlapping it or not), found left to right as LZ77 does; a
 * repeat costs where its earlier copy starts and how long it is. Only repeats long enough that a
 * random value would show one by chance less than once in 2^CHANCE_BITS count.
 */
function repeatSegments(chars: string[], bitsPerChar: number): Segment[] {
  const n = chars.length;
  const pairs = Math.max(1, (n * (n - 1)) / 2);
  const minLength = Math.ceil((CHANCE_BITS + log2(pairs)) / bitsPerChar);
  if (minLength >= n) return [];
  const key = (at: number) => chars.slice(at, at + minLength).join('\u0000');
  const seen = new Map<string, number[]>();
  const remember = (at: number) => {
    const k = key(at);
    const list = seen.get(k);
    if (list === undefined) seen.set(k, [at]);
    else list.push(at);
  };
  const segments: Segment[] = [];
  let i = 0;
  while (i + minLength <= n) {
    let best = 0;
    const earlier = seen.get(key(i)) ?? [];
    for (const from of earlier.slice(-MAX_REPEAT_CANDIDATES)) {
      let length = 0;
      while (i + length < n && chars[from + length] === chars[i + length]) length++;
      best = Math.max(best, length);
    }
    if (best >= minLength) {
      segments.push({ start: i, end: i + best, bits: 2 * log2(n), kind: 'repeats' });
      for (let at = i; at < i + best && at + minLength <= n; at++) remember(at);
      i += best;
    } else {
      remember(i);
      i++;
    }
  }
  return segments;
}

/**
 * Runs along one of SEQUENCES ("abcdef", "zyxw", "987654", "qwerty…"); a run costs its first
 * character, which of the successors it follows, and its length. Only runs long enough that a
 * random value would show one by chance less than once in 2^CHANCE_BITS count.
 */
function sequenceSegments(chars: string[], bitsPerChar: number): Segment[] {
  const n = chars.length;
  const stepBits = bitsPerChar - log2(SEQUENCE_SUCCESSORS);
  if (stepBits <= 0) return [];
  const minLength = 1 + Math.ceil((CHANCE_BITS + log2(n)) / stepBits);
  const segments: Segment[] = [];
  for (const sequence of SEQUENCES) {
    let i = 0;
    while (i < n) {
      let end = i + 1;
      let at = sequence.indexOf(chars[i] ?? '');
      while (at >= 0 && end < n && sequence[at + 1] === chars[end]) {
        at++;
        end++;
      }
      if (end - i >= minLength) {
        segments.push({
          start: i,
          end,
          bits: bitsPerChar + log2(SEQUENCE_SUCCESSORS) + log2(n),
          kind: 'sequence',
        });
      }
      i = end;
    }
  }
  return segments;
}

/**
 * For each letter of `run`, how much better ENGLISH_COSTS explain it (after the letter before it)
 * than a letter drawn at random: log2 of the ratio of the two probabilities, in bits.
 */
function englishLikelihoods(run: string[]): number[] {
  let previous = -1;
  return run.map((c) => {
    const letter = c.toLowerCase().charCodeAt(0) - 97;
    const cost = ENGLISH_COSTS[previous + 1]?.[letter] ?? 0;
    previous = letter;
    return log2(26) - cost;
  });
}

/** The letters of a run read as English: LANGUAGE_BITS_PER_LETTER a letter, and a bit a change of case. */
function languageSegment(chars: string[], start: number, end: number): Segment {
  let caseChanges = 0;
  for (let k = start + 1; k < end; k++) {
    if (/[A-Z]/.test(chars[k] ?? '') !== /[A-Z]/.test(chars[k - 1] ?? '')) caseChanges++;
  }
  return { start, end, bits: (end - start) * LANGUAGE_BITS_PER_LETTER + caseChanges, kind: 'language' };
}

/**
 * The runs of letters that read as English words. The likelihood ratio of a sub-probability has an
 * expected value of at most one, so letters drawn at random are 2^k times likelier under ENGLISH_COSTS
 * with a probability below 2^-k, whatever their number. Two tests, each at that bound:
 * - all the value's letters together reach 2^CHANCE_BITS: then every run that leans English counts
 *   ("ItWasTheBestOfTimes…", "productionjwtkeyfor…");
 * - else any stretch of one run that reaches it on its own, with log2 of the number of stretches
 *   added, counts (a phrase next to random characters).
 * Each counts LANGUAGE_BITS_PER_LETTER a letter and a bit for each change of case ("ItWasThe"
 * changes 5 times). Hexadecimal is left out: its letters are only a-f, not drawn from all 26.
 */
function languageSegments(chars: string[]): Segment[] {
  if (chars.every((c) => /[0-9a-f]/i.test(c))) return [];
  const runs: Array<{ start: number; likelihoods: number[] }> = [];
  for (let i = 0; i < chars.length; ) {
    let end = i;
    while (end < chars.length && /[A-Za-z]/.test(chars[end] ?? '')) end++;
    if (end > i) runs.push({ start: i, likelihoods: englishLikelihoods(chars.slice(i, end)) });
    i = Math.max(end, i + 1);
  }
  const sum = (values: number[]) => values.reduce((total, value) => total + value, 0);
  if (sum(runs.map((run) => sum(run.likelihoods))) >= CHANCE_BITS) {
    return runs
      .filter((run) => sum(run.likelihoods) > 0)
      .map((run) => languageSegment(chars, run.start, run.start + run.likelihoods.length));
  }
  const stretches = (chars.length * (chars.length + 1)) / 2;
  const segments: Segment[] = [];
  for (const run of runs) {
    // The stretch of the run with the largest sum (Kadane's algorithm).
    let best = { sum: 0, start: 0, end: 0 };
    let current = { sum: 0, start: 0 };
    run.likelihoods.forEach((likelihood, k) => {
      if (current.sum <= 0) current = { sum: 0, start: k };
      current.sum += likelihood;
      if (current.sum > best.sum) best = { sum: current.sum, start: current.start, end: k + 1 };
    });
    if (best.sum >= CHANCE_BITS + log2(stretches)) {
      segments.push(languageSegment(chars, run.start + best.start, run.start + best.end));
    }
  }
  return segments;
}

/** Bits of `secret` as deflate (zlib, level 9) stores it, less its framing: any repeated part shrinks it. */
function compressedBits(secret: string): number {
  return 8 * deflateRawSync(Buffer.from(secret), { level: 9 }).length - DEFLATE_FRAMING_BITS;
}

/** An estimate and, when structure lowered it, the structure that lowered it most. */
interface Assessment {
  bits: number;
  structure: Structure | undefined;
}

/**
 * Estimated entropy of a secret, in bits, the smallest of these descriptions:
 * - each character as much as the smallest alphabet it fits (hexadecimal 4 bits, base64 or
 *   base64url 6, else the sum of its character classes), but no more than the alphabet its number
 *   of distinct characters suggests (with DIVERSITY_SLACK): "abab…" or "0000…1111" count for little;
 *   where parts of it repeat earlier parts, run along the alphabet or the keyboard, or read as
 *   English words, those parts cost what describing them takes instead (see the *Segments functions);
 * - words of a passphrase 13 bits each (digits 3.3 per digit);
 * - its size compressed by deflate, in bits (which catches any part repeated, however short).
 */
function assess(secret: string): Assessment {
  // Base64 padding carries nothing, nor do the separators of grouped hexadecimal (UUIDs, MAC-like).
  const text = /^[0-9a-f]+([-:][0-9a-f]+)+$/i.test(secret) ? secret.replace(/[-:]/g, '') : secret.replace(/=+$/, '');
  const chars = [...text];
  if (chars.length === 0) return { bits: 0, structure: undefined };
  const distinct = new Set(chars).size;
  const perChar = Math.min(alphabetBits(text), log2(DIVERSITY_SLACK * alphabetShowing(distinct, chars.length)));
  // The parts that save most are taken first; a character belongs to one part at most.
  const candidates = [
    ...repeatSegments(chars, perChar),
    ...sequenceSegments(chars, perChar),
    ...languageSegments(chars),
  ]
    .map((segment) => ({ ...segment, saves: (segment.end - segment.start) * perChar - segment.bits }))
    .filter((segment) => segment.saves > 0)
    .sort((a, b) => b.saves - a.saves);
  const taken = new Array<boolean>(chars.length).fill(false);
  const saved: Record<Structure, number> = { repeats: 0, sequence: 0, language: 0 };
  for (const segment of candidates) {
    if (taken.slice(segment.start, segment.end).some(Boolean)) continue;
    taken.fill(true, segment.start, segment.end);
    saved[segment.kind] += segment.saves;
  }
  const totalSaved = saved.repeats + saved.sequence + saved.language;
  let bits = chars.length * perChar - totalSaved;
  let structure =
    totalSaved > 0 ? (Object.keys(saved) as Structure[]).reduce((a, b) => (saved[b] > saved[a] ? b : a)) : undefined;
  const words = passphraseTokens(secret);
  if (words !== undefined) {
    const passphraseBits = words.reduce(
      (sum, token) =>
        sum + (/^[0-9]+$/.test(token) ? token.length * log2(10) : Math.min(BITS_PER_WORD, token.length * log2(26))),
      0,
    );
    if (passphraseBits < bits) {
      bits = passphraseBits;
      structure = undefined;
    }
  }
  const compressed = compressedBits(secret);
  if (compressed < bits) {
    bits = compressed;
    structure = 'repeats';
  }
  return { bits: Math.max(0, bits), structure };
}

/** Estimated entropy of a secret, in bits (see `assess`). */
export function estimateEntropyBits(secret: string): number {
  return assess(secret).bits;
}

/** How the refusal explains a low estimate that structure caused. */
const STRUCTURE_REASONS: Record<Structure, string> = {
  repeats: 'as parts of it repeat',
  sequence: 'as it runs along the alphabet or the keyboard',
  language: 'as it reads as words',
};

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
  const { bits, structure } = assess(secret);
  if (bits < MIN_SECRET_BITS) {
    const reason = structure === undefined ? '' : `, ${STRUCTURE_REASONS[structure]}`;
    return `has about ${Math.floor(bits)} bits of estimated entropy, fewer than ${MIN_SECRET_BITS}${reason}`;
  }
  return undefined;
}
