import hdr from 'hdr-histogram-js';

/**
 * Latencies in milliseconds, kept in an HdrHistogram (hdr-histogram-js, the histogram autocannon
 * uses): recorded in whole microseconds with three significant digits (exact to 2.047 ms, then
 * within 0.05%), of any size, and mergeable across processes. Every latency figure of the
 * benchmarks comes from here: a percentile is the nearest rank (the smallest recorded value with at
 * least p% of the values at or below it), reported as the upper end of its bucket and never above
 * the largest value recorded.
 */
export class LatencyHistogram {
  private readonly histogram = hdr.build({ numberOfSignificantValueDigits: 3 });
  /** The largest value recorded, exactly (ms). */
  maxMs = 0;
  /** Values below zero (clamped to 0; should not happen with one monotonic clock). */
  negative = 0;

  /** A histogram of the given values (ms). */
  static of(values: Iterable<number>): LatencyHistogram {
    const h = new LatencyHistogram();
    for (const v of values) h.record(v);
    return h;
  }

  get count(): number {
    return this.histogram.totalCount;
  }

  record(ms: number): void {
    if (ms < 0) {
      this.negative++;
      ms = 0;
    }
    if (ms > this.maxMs) this.maxMs = ms;
    this.histogram.recordValue(Math.round(ms * 1000));
  }

  /** The q-quantile (0 < q ≤ 1) in ms; 0 when nothing was recorded. */
  quantile(q: number): number {
    if (this.count === 0) return 0;
    return Math.min(this.histogram.getValueAtPercentile(q * 100) / 1000, this.maxMs);
  }

  /** The p-th percentile (0 < p ≤ 100) in ms. */
  percentile(p: number): number {
    return this.quantile(p / 100);
  }

  /** A form that crosses a process boundary (JSON): the histogram compressed, and the exact extremes. */
  toJSON(): SerializedHistogram {
    return {
      histogram: hdr.encodeIntoCompressedBase64(this.histogram),
      count: this.count,
      maxMs: this.maxMs,
      negative: this.negative,
    };
  }

  /** Adds the values of another histogram (from toJSON). */
  merge(other: SerializedHistogram): void {
    if (other.count > 0) this.histogram.add(hdr.decodeFromCompressedBase64(other.histogram));
    this.maxMs = Math.max(this.maxMs, other.maxMs);
    this.negative += other.negative;
  }
}

export interface SerializedHistogram {
  /** hdr-histogram-js's compressed base64 encoding. */
  histogram: string;
  count: number;
  maxMs: number;
  negative: number;
}
