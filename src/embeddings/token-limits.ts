/**
 * The input limits of embeddings and the counting behind them (OpenAI's cl100k_base tokenizer).
 * Pure functions over a tokenizer: they run in the token-counting worker threads
 * (token-count-worker.ts), never on the event loop.
 */

/** The functions of gpt-tokenizer's cl100k_base encoding that the counting uses. */
export interface Tokenizer {
  isWithinTokenLimit(text: string, limit: number, options: { disallowedSpecial: Set<string> }): number | false;
}

export const MAX_INPUTS = 2048;
export const MAX_TOKENS_PER_INPUT = 8192;
export const MAX_TOKENS_PER_REQUEST = 300_000;

// Text such as "<|endoftext|>" is ordinary input to an embedding model, not a control token.
const asPlainText = { disallowedSpecial: new Set<string>() };

// BPE merging is quadratic in the length of one pre-token piece: 100,000 letters with no space,
// or 100,000 spaces, take seconds to count, which would let one request stall the service. Runs of
// MAX_RUN or more characters of one kind (white space, or not) are counted in slices instead:
// exact for ordinary text, which never has them; within a slice or two of exact for the rest.
const MAX_RUN = 256;
const SLICE = 128;

/** White space as the tokenizer's pattern (and \s) sees it. */
function isSpace(c: number): boolean {
  return (
    c === 32 ||
    (c >= 9 && c <= 13) ||
    c === 0xa0 ||
    c === 0x1680 ||
    (c >= 0x2000 && c <= 0x200a) ||
    c === 0x2028 ||
    c === 0x2029 ||
    c === 0x202f ||
    c === 0x205f ||
    c === 0x3000 ||
    c === 0xfeff
  );
}

/** End of a slice starting at `from`: SLICE code units on, not splitting a surrogate pair. */
function sliceEnd(text: string, from: number, limit: number): number {
  const end = Math.min(from + SLICE, limit);
  const last = text.charCodeAt(end - 1);
  return end < limit && last >= 0xd800 && last <= 0xdbff ? end + 1 : end;
}

/** `text` in the pieces to count: ordinary stretches whole, long runs of one kind in slices. */
export function* countingPieces(text: string): Generator<string> {
  let pieceStart = 0;
  let runStart = 0;
  let runIsSpace = text.length > 0 && isSpace(text.charCodeAt(0));
  for (let i = 1; i <= text.length; i++) {
    const space = i < text.length && isSpace(text.charCodeAt(i));
    if (i < text.length && space === runIsSpace) continue;
    if (i - runStart >= MAX_RUN) {
      if (runStart > pieceStart) yield text.slice(pieceStart, runStart);
      for (let j = runStart; j < i; j = sliceEnd(text, j, i)) yield text.slice(j, sliceEnd(text, j, i));
      pieceStart = i;
    }
    runStart = i;
    runIsSpace = space;
  }
  if (pieceStart < text.length) yield text.slice(pieceStart);
}

/** Tokens of `text` (cl100k_base) if at most `limit`, else false; stops counting past the limit. */
function tokensWithin({ isWithinTokenLimit }: Tokenizer, text: string, limit: number): number | false {
  if (text.length < MAX_RUN) return isWithinTokenLimit(text, limit, asPlainText);
  let total = 0;
  for (const piece of countingPieces(text)) {
    const n = isWithinTokenLimit(piece, limit - total, asPlainText);
    if (n === false) return false;
    total += n;
  }
  return total;
}

/** The token counts of a request's inputs, or why the request is refused (a 400's message). */
export type InputCount = { counts: number[] } | { refused: string };

/**
 * Checks the request's inputs against the per-input and per-request limits and returns their token
 * counts. Counting stops early on an input over a limit. (MAX_INPUTS is checked before, by the caller.)
 */
export function countInputTokens(tokenizer: Tokenizer, inputs: readonly string[], single: boolean): InputCount {
  const counts: number[] = [];
  let total = 0;
  for (const [i, text] of inputs.entries()) {
    const name = single ? 'body.input' : `body.input[${i}]`;
    if (text.length === 0) return { refused: `${name} must not be empty` };
    const n = tokensWithin(tokenizer, text, MAX_TOKENS_PER_INPUT);
    if (n === false) return { refused: `${name} is longer than ${MAX_TOKENS_PER_INPUT} tokens` };
    total += n;
    if (total > MAX_TOKENS_PER_REQUEST) {
      return { refused: `body.input has more than ${MAX_TOKENS_PER_REQUEST.toLocaleString('en-US')} tokens in all` };
    }
    counts.push(n);
  }
  return { counts };
}
