/**
 * A token-counting worker thread (see token-counter.ts): counts a request's inputs with
 * cl100k_base off the event loop. Its tokenizer (about 35 MB, 100-200 ms to load) is loaded once
 * per thread, when the thread starts.
 */
import { threadId } from 'node:worker_threads';
import * as cl100k from 'gpt-tokenizer/encoding/cl100k_base';
import { countInputTokens, type InputCount } from './token-limits.ts';

export interface CountTask {
  inputs: readonly string[];
  single: boolean;
}

/** What a task answers: the counts (or why the inputs are refused) and the thread that counted them. */
export type CountResult = InputCount & { threadId: number };

export default function countTokens(task: CountTask): CountResult {
  return { ...countInputTokens(cl100k, task.inputs, task.single), threadId };
}
