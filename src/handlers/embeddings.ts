import type { AppContext } from '../context.ts';
import type { HandlersFor } from './types.ts';

/** Handlers of the `embeddings` tag. */
export function embeddingHandlers(ctx: AppContext): HandlersFor<'createEmbeddings'> {
  return {
    async createEmbeddings(request, reply) {
      const result = await ctx.embeddings.embed(request.user.sub, request.body);
      // The schema's serializer picks oneOf branches by validating every vector first, which
      // halved throughput on 1536-dimension floats; the typed result already has the spec's shape.
      // A custom serializer leaves the content type to us.
      reply.serializer(JSON.stringify).type('application/json; charset=utf-8');
      return result;
    },
  } satisfies HandlersFor<'createEmbeddings'>;
}
