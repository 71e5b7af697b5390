import { type Kysely, sql } from 'kysely';
import type { ReplicaConfig } from '../config.ts';
import { withTimeout } from '../deadline.ts';
import type { Database } from './schema.ts';

/** How often the replica's replay lag is measured. */
export const LAG_CHECK_INTERVAL_MS = 250;
/** How long one measurement may take before the replica counts as unreachable. */
const CHECK_DEADLINE_MS = 1_000;
/** Positions of the primary's WAL kept while the replica has not replayed them (bounded: one per check). */
const MAX_SAMPLES = 4 * 60 * 10;

/**
 * Where the lag-tolerant reads go now, and why:
 * - `replica`: the replica answers and has replayed the primary's WAL up to at most `maxLagMs` ago;
 * - `lagging`: it answers but is further behind, so the reads go to the primary;
 * - `down`: it does not answer (or has not been measured yet), so the reads go to the primary.
 */
export interface ReplicaStatus {
  state: 'replica' | 'lagging' | 'down';
  /** The replay lag at the last measurement, in milliseconds; null when it could not be measured. */
  lagMs: number | null;
  maxLagMs: number;
}

/** A LSN ("16/B374D848") as a number: 64 bits fit a double exactly up to 2^53 bytes of WAL. */
function lsnNumber(lsn: string): number {
  const [high, low] = lsn.split('/');
  return Number.parseInt(high ?? '0', 16) * 2 ** 32 + Number.parseInt(low ?? '0', 16);
}

/**
 * Chooses, for the reads that tolerate a little lag, between a streaming replica and the primary.
 *
 * The lag is measured as wall time, not from the replica's last replayed commit timestamp (which
 * grows while the primary is merely idle): every check reads the primary's current WAL position and
 * remembers when it saw it; the lag is the age of the oldest remembered position the replica has not
 * replayed yet (0 when it has replayed them all). A replica that was promoted (after a failover) has
 * no lag. Reads move back to the replica after one good measurement.
 */
export class ReadReplica {
  private samples: { at: number; lsn: number }[] = [];
  private current: ReplicaStatus;
  private timer: NodeJS.Timeout | undefined;
  private checking: Promise<void> | undefined;

  private readonly primary: Kysely<Database>;
  readonly db: Kysely<Database>;
  private readonly config: ReplicaConfig;
  private readonly now: () => number;

  constructor(
    primary: Kysely<Database>,
    replica: Kysely<Database>,
    config: ReplicaConfig,
    now = () => performance.now(),
  ) {
    this.primary = primary;
    this.db = replica;
    this.config = config;
    this.now = now;
    this.current = { state: 'down', lagMs: null, maxLagMs: config.maxLagMs };
  }

  /** Starts measuring (the first measurement at once); resolves after the first one. */
  start(): Promise<void> {
    this.timer = setInterval(() => void this.check(), LAG_CHECK_INTERVAL_MS);
    this.timer.unref();
    return this.check();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  get status(): ReplicaStatus {
    return this.current;
  }

  /** The database the lag-tolerant reads go to right now. */
  reads(): Kysely<Database> {
    return this.current.state === 'replica' ? this.db : this.primary;
  }

  /** A read on the replica failed: the reads go to the primary until the next good measurement. */
  markDown(): void {
    this.current = { state: 'down', lagMs: null, maxLagMs: this.config.maxLagMs };
    void this.check();
  }

  /** One measurement (a check still running is waited for instead of starting another). */
  check(): Promise<void> {
    this.checking ??= this.measure().finally(() => {
      this.checking = undefined;
    });
    return this.checking;
  }

  private async measure(): Promise<void> {
    const at = this.now();
    let lagMs: number;
    try {
      const replica = await withTimeout(
        sql<{
          recovering: boolean;
          replayed: string | null;
        }>`select pg_is_in_recovery() as recovering, pg_last_wal_replay_lsn()::text as replayed`.execute(this.db),
        CHECK_DEADLINE_MS,
      );
      const row = replica.rows[0];
      if (row === undefined) throw new Error('the replica answered no row');
      if (!row.recovering) {
        // Promoted. It has everything it will ever serve only if DATABASE_URL now reaches it too (the
        // failover moved both names). If the primary still answers as another server (a split brain:
        // the service keeps writing to the old primary), the promoted copy gets no more writes and
        // would serve stale reads forever: the reads go to the primary.
        const fingerprint = sql<{ server: string }>`select (select system_identifier from pg_control_system())::text
          || '/' || pg_postmaster_start_time()::text || '/' || pg_is_in_recovery()::text as server`;
        const [mine, theirs] = await Promise.all([
          withTimeout(fingerprint.execute(this.db), CHECK_DEADLINE_MS),
          withTimeout(fingerprint.execute(this.primary), CHECK_DEADLINE_MS).catch(() => undefined),
        ]);
        if (theirs !== undefined && theirs.rows[0]?.server !== mine.rows[0]?.server) {
          throw new Error('the replica was promoted but DATABASE_URL still names another primary');
        }
        lagMs = 0;
        this.samples = [];
      } else {
        const primary = await withTimeout(
          sql<{ lsn: string }>`select pg_current_wal_lsn()::text as lsn`.execute(this.primary),
          CHECK_DEADLINE_MS,
        ).catch(() => undefined);
        const lsn = primary?.rows[0]?.lsn;
        if (lsn !== undefined) {
          this.samples.push({ at, lsn: lsnNumber(lsn) });
          if (this.samples.length > MAX_SAMPLES) this.samples.shift();
        }
        const replayed = row.replayed === null ? 0 : lsnNumber(row.replayed);
        while ((this.samples[0]?.lsn ?? Number.POSITIVE_INFINITY) <= replayed) this.samples.shift();
        const oldest = this.samples[0];
        lagMs = oldest === undefined ? 0 : Math.max(0, this.now() - oldest.at);
      }
    } catch {
      this.current = { state: 'down', lagMs: null, maxLagMs: this.config.maxLagMs };
      return;
    }
    this.current = {
      state: lagMs <= this.config.maxLagMs ? 'replica' : 'lagging',
      lagMs: Math.round(lagMs),
      maxLagMs: this.config.maxLagMs,
    };
  }
}
