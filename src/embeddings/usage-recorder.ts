import type { FastifyBaseLogger } from 'fastify';
import type { Kysely } from 'kysely';
import type { Database } from '../db/schema.ts';

export interface UsageRow {
  user_id: string;
  model: string;
  inputs: number;
  prompt_tokens: number;
  total_tokens: number;
  /** The caller's end-user identifier (OpenAI's `user`), if it sent one. */
  end_user?: string | null;
  created_at: Date;
}

const refusedForever = (err: unknown) => /^2[23]/.test(String((err as { code?: string }).code));

const FLUSH_EVERY_MS = 1_000;
const FLUSH_AT_ROWS = 500;
/** Rows kept while the database refuses them; beyond this the oldest are dropped (and logged). */
const MAX_PENDING = 100_000;

/**
 * Records embeddings usage off the request's path: rows are queued in memory and written in one
 * multi-row INSERT every second (or at 500 rows), and on close. A failed write is retried with
 * the next flush.
 */
export class UsageRecorder {
  #pending: UsageRow[] = [];
  #flushing: Promise<void> | undefined;
  readonly #timer: NodeJS.Timeout;

  readonly #db: Kysely<Database>;
  readonly #log: FastifyBaseLogger;

  constructor(db: Kysely<Database>, log: FastifyBaseLogger) {
    this.#db = db;
    this.#log = log;
    this.#timer = setInterval(() => void this.flush(), FLUSH_EVERY_MS);
    this.#timer.unref();
  }

  record(row: UsageRow): void {
    this.#pending.push(row);
    if (this.#pending.length > MAX_PENDING) {
      const dropped = this.#pending.splice(0, this.#pending.length - MAX_PENDING);
      this.#log.error({ dropped: dropped.length }, 'embedding usage rows dropped: the database refuses them');
    }
    if (this.#pending.length >= FLUSH_AT_ROWS && this.#flushing === undefined) void this.flush();
  }

  /** Writes everything queued so far (after any flush already under way). */
  async flush(): Promise<void> {
    while (this.#flushing) await this.#flushing;
    this.#flushing = this.#writeAll().finally(() => {
      this.#flushing = undefined;
    });
    await this.#flushing;
  }

  async #writeAll(): Promise<void> {
    while (this.#pending.length > 0) {
      // 1,000 rows of 7 values each stay far below PostgreSQL's 65,535 parameters per statement.
      const batch = this.#pending.splice(0, 1_000);
      try {
        await this.#db.insertInto('embedding_usage').values(batch).execute();
      } catch (err) {
        // Data errors (class 22) and constraint violations (23) would fail forever: the rows are
        // written one by one, so that only the refused ones are dropped, not their neighbours'.
        if (refusedForever(err)) {
          if (await this.#writeEach(batch)) continue;
          return;
        }
        this.#pending = batch.concat(this.#pending);
        this.#log.warn(
          { err: { message: (err as Error).message }, rows: this.#pending.length },
          'embedding usage not written yet',
        );
        return;
      }
    }
  }

  /**
   * Writes rows one at a time, dropping (and logging) each the database refuses for good. False when
   * the database failed otherwise: the rows not yet written wait for the next flush.
   */
  async #writeEach(rows: readonly UsageRow[]): Promise<boolean> {
    let refused = 0;
    let message = '';
    for (const [i, row] of rows.entries()) {
      try {
        await this.#db.insertInto('embedding_usage').values(row).execute();
      } catch (err) {
        if (!refusedForever(err)) {
          this.#pending = rows.slice(i).concat(this.#pending);
          this.#log.warn(
            { err: { message: (err as Error).message }, rows: this.#pending.length },
            'embedding usage not written yet',
          );
          return false;
        }
        refused += 1;
        message = (err as Error).message;
      }
    }
    this.#log.error({ err: { message }, rows: refused }, 'embedding usage rows refused');
    return true;
  }

  async close(): Promise<void> {
    clearInterval(this.#timer);
    await this.flush();
  }
}
