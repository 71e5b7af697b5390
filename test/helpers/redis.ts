/** The local Redis the tests use (shared rate-limit counters). */
export const TEST_REDIS_URL = 'redis://127.0.0.1:6379';

/** A short-lived client that gives up at once when Redis is not there. */
async function shortLivedClient(url: string) {
  const { Redis } = await import('ioredis');
  const client = new Redis(url, {
    lazyConnect: true,
    connectTimeout: 1_000,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  client.on('error', () => {});
  return client;
}

/** Whether a Redis server answers PING at `url` within about a second. */
export async function redisAvailable(url = TEST_REDIS_URL): Promise<boolean> {
  const client = await shortLivedClient(url);
  try {
    await client.connect();
    return (await client.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    client.disconnect();
  }
}

/** Deletes every key under `prefix` (what a test's instances wrote); returns how many there were. */
export async function deleteRedisKeys(url: string, prefix: string): Promise<number> {
  const client = await shortLivedClient(url);
  try {
    await client.connect();
    const keys: string[] = [];
    let cursor = '0';
    do {
      const [next, batch] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      keys.push(...batch);
    } while (cursor !== '0');
    if (keys.length > 0) await client.del(...keys);
    return keys.length;
  } finally {
    client.disconnect();
  }
}
