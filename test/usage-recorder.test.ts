import { randomUUID } from 'node:crypto';
import t from 'tap';
import { UsageRecorder } from '../src/embeddings/usage-recorder.ts';
import { createTestDatabase } from './helpers/database.ts';

const silent = { warn() {}, error() {} } as never;

t.test('usage rows are written in batches; a row the database refuses does not block the rest', async (t) => {
  const database = await createTestDatabase();
  t.teardown(() => database.drop());
  const db = database.handle.db;
  const recorder = new UsageRecorder(db, silent);
  t.teardown(() => recorder.close());
  const user = randomUUID();
  const row = (tokens: number) => ({
    user_id: user,
    model: 'local/lexical-v1',
    inputs: 1,
    prompt_tokens: tokens,
    total_tokens: tokens,
    created_at: new Date(),
  });

  for (let i = 1; i <= 3; i++) recorder.record(row(i));
  t.equal(
    (await db.selectFrom('embedding_usage').selectAll().execute()).length,
    0,
    'nothing written on the request path',
  );
  await recorder.flush();
  t.equal((await db.selectFrom('embedding_usage').selectAll().execute()).length, 3, 'written by the flush');

  recorder.record(row(4));
  recorder.record(row(2 ** 31)); // beyond the integer column: refused forever
  recorder.record(row(5));
  await recorder.flush();
  recorder.record(row(7));
  await recorder.flush();
  const tokens = (await db.selectFrom('embedding_usage').select('prompt_tokens').orderBy('id').execute()).map(
    (r) => r.prompt_tokens,
  );
  t.same(tokens, [1, 2, 3, 4, 5, 7], 'only the refused row was dropped: its batch and later rows land');

  for (let i = 0; i < 1200; i++) recorder.record(row(1));
  await recorder.close();
  const count = await db
    .selectFrom('embedding_usage')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .executeTakeFirst();
  t.equal(Number(count?.n), 1206, 'close writes everything queued, in several statements');
});
