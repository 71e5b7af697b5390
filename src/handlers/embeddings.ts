import type { AppContext } from '../context.ts';
import { notImplemented } from './not-implemented.ts';
import type { HandlersFor } from './types.ts';

/** Handlers of the `embeddings` tag. */
export function embeddingHandlers(_ctx: AppContext): HandlersFor<'createEmbeddings'> {
  return {
    createEmbeddings: async () => notImplemented(),
  } satisfies HandlersFor<'createEmbeddings'>;
}
