import type { AppContext } from '../context.ts';
import { embeddingsResponseJson } from '../embeddings/response-json.ts';
import type { HandlersFor } from './types.ts';

/** Handlers of the `embeddings` tag. */
export function embeddingHandlers(ctx: AppContext): HandlersFor<'createEmbeddings'> {
  return {
    async createEmbeddings(request, reply) {
      const result = await ctx.embeddings.embed(request.user.sub, request.body);
      // Written by its own serializer (src/embeddings/response-json.ts): the schema's serializer
      // would validate every vector against the oneOf first, and JSON.stringify is slow on floats.
      await reply.type('application/json; charset=utf-8').send(embeddingsResponseJson(result));
      return undefined;
    },
  } satisfies HandlersFor<'createEmbeddings'>;
}
