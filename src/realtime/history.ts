import { type Kysely, sql } from 'kysely';
import type { Database } from '../db/schema.ts';
import { asRealtimeCaller } from './as-user.ts';
import type { MessageMeta } from './protocol.ts';

export interface StoredMessage {
  messageId: string;
  channel: string;
  event: string;
  payload: Record<string, unknown>;
  senderType: MessageMeta['senderType'];
  senderId: string | null;
  timestamp: string;
}

export type HistoryPage = { messages: StoredMessage[]; hasMore: boolean } | { afterNotFound: true };

/**
 * A channel's messages in commit order, after the message `after` (exclusive) when given, read acting
 * as the caller: the read policies decide what is returned. An `after` the caller cannot see (unknown,
 * expired, another channel's, or not readable) is reported as not found.
 */
export async function readHistory(
  db: Kysely<Database>,
  userId: string,
  query: { channel: string; after?: string; limit: number },
): Promise<HistoryPage> {
  return asRealtimeCaller(db, { userId, channel: query.channel }, async (trx) => {
    let afterSeq: string | undefined;
    if (query.after !== undefined) {
      const found = await trx
        .selectFrom('realtime.messages')
        .select('seq')
        .where('id', '=', query.after)
        .where('channel_name', '=', query.channel)
        .executeTakeFirst();
      if (found === undefined) return { afterNotFound: true } as const;
      afterSeq = String(found.seq);
    }
    const rows = await trx
      .selectFrom('realtime.messages')
      .select(['id', 'channel_name', 'event', 'payload', 'sender_type', 'sender_id', 'created_at'])
      .where('channel_name', '=', query.channel)
      .$if(afterSeq !== undefined, (q) => q.where('seq', '>', sql<string>`${afterSeq}::bigint`))
      .orderBy('seq')
      .limit(query.limit + 1)
      .execute();
    return {
      messages: rows.slice(0, query.limit).map((r) => ({
        messageId: r.id,
        channel: r.channel_name,
        event: r.event,
        payload: r.payload as Record<string, unknown>,
        senderType: r.sender_type,
        senderId: r.sender_id,
        timestamp: r.created_at.toISOString(),
      })),
      hasMore: rows.length > query.limit,
    };
  });
}
