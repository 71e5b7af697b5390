import { ApiError } from '../errors.ts';

type Tokenizer = typeof import('gpt-tokenizer/encoding/cl100k_base');

// The cl100k ranks take about 35 MB and 100 ms to load: done on the first request that counts
// tokens, not at start (a service without embeddings traffic never pays for them).
let tokenizer: Promise<Tokenizer> | undefined;
const loadTokenizer = (): Promise<Tokenizer> => {
  tokenizer ??= import('gpt-tokenizer/encoding/cl100k_base');
  return tokenizer;
};

export const MAX_INPUTS = 2048;
export const MAX_TOKENS_PER_INPUT = 8192;
export const MAX_TOKENS_PER_REQUEST = 300_000;

// Text such as "<|endoftext|>" is ordinary input to an embedding model, not a control token.
const asPlainText = { disallowedSpecial: new Set<string>() };

// BPE merging is quadratic in the length of one pre-token piece: 100,000 letters with no space
// take seconds to count, which would let one request stall the service. Runs of this many
// non-space characters are counted in slices instead (exact for ordinary text, which never has
// them; within a slice or two of exact for the rest).
const HAS_LONG_RUN = /\S{256}/;
const LONG_RUN = /\S{256,}/g;
const SLICE = 128;

/** Tokens of `text` (cl100k_base) if at most `limit`, else false; stops counting past the limit. */
function tokensWithin({ isWithinTokenLimit }: Tokenizer, text: string, limit: number): number | false {
  if (!HAS_LONG_RUN.test(text)) return isWithinTokenLimit(text, limit, asPlainText);
  let total = 0;
  const add = (part: string): boolean => {
    if (part === '') return true;
    const n = isWithinTokenLimit(part, limit - total, asPlainText);
    if (n === false) return false;
    total += n;
    return true;
  };
  let last = 0;
  for (const run of text.matchAll(LONG_RUN)) {
    if (!add(text.slice(last, run.index))) return false;
    for (let i = 0; i < run[0].length; i += SLICE) if (!add(run[0].slice(i, i + SLICE))) return false;
    last = run.index + run[0].length;
  }
  return add(text.slice(last)) ? total : false;
}

/**
 * Checks the request's inputs against the limits before anything is sent anywhere and returns
 * their token counts. Counting stops early on an input over the per-input limit.
 */
export async function checkInputLimits(inputs: readonly string[], single: boolean): Promise<number[]> {
  if (inputs.length > MAX_INPUTS) {
    throw new ApiError(400, 'INVALID_INPUT', `body.input must have at most ${MAX_INPUTS} items`);
  }
  const tokens = await loadTokenizer();
  const counts: number[] = [];
  let total = 0;
  inputs.forEach((text, i) => {
    const name = single ? 'body.input' : `body.input[${i}]`;
    if (text.length === 0) throw new ApiError(400, 'INVALID_INPUT', `${name} must not be empty`);
    const n = tokensWithin(tokens, text, MAX_TOKENS_PER_INPUT);
    if (n === false) {
      throw new ApiError(400, 'INVALID_INPUT', `${name} is longer than ${MAX_TOKENS_PER_INPUT} tokens`);
    }
    total += n;
    if (total > MAX_TOKENS_PER_REQUEST) {
      throw new ApiError(
        400,
        'INVALID_INPUT',
        `body.input has more than ${MAX_TOKENS_PER_REQUEST.toLocaleString('en-US')} tokens in all`,
      );
    }
    counts.push(n);
  });
  return counts;
}
