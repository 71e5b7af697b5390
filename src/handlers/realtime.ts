import type { AppContext } from '../context.ts';
import {
  type ChannelRow,
  createChannel,
  deleteChannel,
  listChannels,
  updateChannel,
} from '../db/repositories/realtime-channels.ts';
import { ApiError } from '../errors.ts';
import { prototypeKeyProblem } from '../json-values.ts';
import { readHistory } from '../realtime/history.ts';
import type { HandlersFor } from './types.ts';

type RealtimeOperation =
  | 'getRealtimePermissions'
  | 'listRealtimeChannels'
  | 'createRealtimeChannel'
  | 'updateRealtimeChannel'
  | 'deleteRealtimeChannel'
  | 'publishRealtimeMessage'
  | 'listRealtimeMessages';

const noSuchChannel = () => new ApiError('NOT_FOUND', 'No such channel');

function toChannel(row: ChannelRow) {
  return {
    id: row.id,
    pattern: row.pattern,
    description: row.description,
    enabled: row.enabled,
    createdAt: row.created_at.toISOString(),
    updatedAt: row.updated_at.toISOString(),
  };
}

/** Handlers of the `realtime` tag. */
export function realtimeHandlers(ctx: AppContext): HandlersFor<RealtimeOperation> {
  return {
    getRealtimePermissions: async () => ctx.realtimePolicies.get(),

    async listRealtimeChannels() {
      return { channels: (await listChannels(ctx.db)).map(toChannel) };
    },

    async createRealtimeChannel(request, reply) {
      const { pattern, description = null, enabled = true } = request.body;
      const row = await createChannel(ctx.db, { pattern, description, enabled });
      if (row === undefined) {
        throw new ApiError('CHANNEL_ALREADY_EXISTS', 'A channel with this pattern exists already');
      }
      await ctx.realtimePolicies.channelsChanged();
      reply.code(201);
      return toChannel(row);
    },

    async updateRealtimeChannel(request) {
      const row = await updateChannel(ctx.db, request.params.channelId, request.body, ctx.clock.now());
      if (row === undefined) throw noSuchChannel();
      // Live subscriptions are checked again on every instance: a disabled channel ends them.
      await ctx.realtimePolicies.channelsChanged();
      return toChannel(row);
    },

    async deleteRealtimeChannel(request, reply) {
      if (!(await deleteChannel(ctx.db, request.params.channelId))) throw noSuchChannel();
      await ctx.realtimePolicies.channelsChanged();
      reply.code(204);
      return undefined;
    },

    async publishRealtimeMessage(request, reply) {
      const { channel, event, payload, senderId } = request.body;
      const prototypeKey = prototypeKeyProblem(payload, 'body.payload');
      if (prototypeKey !== undefined) throw new ApiError('INVALID_INPUT', prototypeKey);
      const outcome = await ctx.realtime.publish({
        userId: request.user.sub,
        channel,
        event,
        payload,
        ...(senderId === undefined ? {} : { senderId }),
      });
      if (!outcome.ok) {
        if (outcome.code === 'PAYLOAD_TOO_LARGE') throw new ApiError('PAYLOAD_TOO_LARGE', outcome.message);
        if (outcome.code === 'SERVICE_UNAVAILABLE') {
          throw new ApiError('SERVICE_UNAVAILABLE', outcome.message, { 'retry-after': '1' });
        }
        throw new ApiError('FORBIDDEN', outcome.message);
      }
      reply.code(201);
      const { meta } = outcome;
      return {
        messageId: meta.messageId,
        channel,
        event,
        payload,
        senderType: meta.senderType,
        senderId: meta.senderId,
        timestamp: meta.timestamp,
      };
    },

    async listRealtimeMessages(request) {
      const { channel, after } = request.query;
      // 1 to 1000 digits without leading zeros: the schema's pattern.
      const limit = request.query.limit === undefined ? 100 : Number(request.query.limit);
      const page = await readHistory(ctx.db, request.user.sub, {
        channel,
        limit,
        ...(after === undefined ? {} : { after }),
      });
      if ('afterNotFound' in page) throw new ApiError('NOT_FOUND', 'No such message on this channel');
      return page;
    },
  } satisfies HandlersFor<RealtimeOperation>;
}
