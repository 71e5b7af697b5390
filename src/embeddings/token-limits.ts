import { countTokens, isWithinTokenLimit } from 'gpt-tokenizer/encoding/cl100k_base';
import { ApiError } from '../errors.ts';

export const MAX_INPUTS = 2048;
export const MAX_TOKENS_PER_INPUT = 8192;
export const MAX_TOKENS_PER_REQUEST = 300_000;

// Text such as "<|endoftext|>" is ordinary input to an embedding model, not a control token.
const asPlainText = { disallowedSpecial: new Set<string>() };

/** Tokens of `text` as OpenAI's embedding models count them (cl100k_base). */
export function tokenCount(text: string): number {
  return countTokens(text, asPlainText);
}

/**
 * Checks the request's inputs against the limits before anything is sent anywhere and returns
 * their token counts. Counting stops early on an input over the per-input limit.
 */
export function checkInputLimits(inputs: readonly string[], single: boolean): number[] {
  if (inputs.length > MAX_INPUTS) {
    throw new ApiError(400, 'INVALID_INPUT', `body.input must have at most ${MAX_INPUTS} items`);
  }
  const counts: number[] = [];
  let total = 0;
  inputs.forEach((text, i) => {
    const name = single ? 'body.input' : `body.input[${i}]`;
    if (text.length === 0) throw new ApiError(400, 'INVALID_INPUT', `${name} must not be empty`);
    const n = isWithinTokenLimit(text, MAX_TOKENS_PER_INPUT, asPlainText);
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
