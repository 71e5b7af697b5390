import type { Executor } from '../schema.ts';

export interface ChannelRow {
  id: string;
  pattern: string;
  description: string | null;
  enabled: boolean;
  created_at: Date;
  updated_at: Date;
}

const columns = ['id', 'pattern', 'description', 'enabled', 'created_at', 'updated_at'] as const;

/** SQLSTATE unique_violation. */
const UNIQUE_VIOLATION = '23505';

/** Every channel, by pattern. Read as the service (the tables' owner): no policy applies. */
export function listChannels(db: Executor): Promise<ChannelRow[]> {
  return db.selectFrom('realtime.channels').select(columns).orderBy('pattern').execute();
}

/** Creates a channel; undefined when the pattern exists already. */
export async function createChannel(
  db: Executor,
  values: { pattern: string; description: string | null; enabled: boolean },
): Promise<ChannelRow | undefined> {
  try {
    return await db.insertInto('realtime.channels').values(values).returning(columns).executeTakeFirstOrThrow();
  } catch (err) {
    if ((err as { code?: string }).code === UNIQUE_VIOLATION) return undefined;
    throw err;
  }
}

/** Updates a channel's enabled flag and description; undefined when there is no such channel. */
export function updateChannel(
  db: Executor,
  id: string,
  changes: { enabled?: boolean; description?: string | null },
  now: Date,
): Promise<ChannelRow | undefined> {
  return db
    .updateTable('realtime.channels')
    .set({ ...changes, updated_at: now })
    .where('id', '=', id)
    .returning(columns)
    .executeTakeFirst();
}

/** Deletes a channel; false when there is no such channel. */
export async function deleteChannel(db: Executor, id: string): Promise<boolean> {
  const result = await db.deleteFrom('realtime.channels').where('id', '=', id).executeTakeFirst();
  return result.numDeletedRows > 0n;
}
