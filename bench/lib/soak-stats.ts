import { readFileSync } from 'node:fs';
import { LatencyHistogram } from './latency.ts';
import type { Kind } from './soak-traffic.ts';

// The soak's figures: answers counted per time window and per kind, resident memory sampled every
// second, and the judgement of whether memory keeps growing.

export interface WindowFigures {
  /** Seconds since the load started. */
  fromSeconds: number;
  toSeconds: number;
  requests: number;
  errors: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** Mean and highest of the 1-s RSS samples taken in the window. */
  rssMiB: number;
  rssMaxMiB: number;
  /** Mean V8 heap in use (samples of process.memoryUsage inside the service); undefined without the probe. */
  heapUsedMiB?: number;
  /** Heap in use after the latest full collection so far (the live heap). */
  liveHeapMiB?: number;
}

export interface KindFigures {
  kind: Kind;
  requests: number;
  errors: number;
  p50Ms: number;
  p99Ms: number;
  /** Answers by status code (all of them, expected or not). */
  statuses: Record<string, number>;
}

export interface MemorySample {
  seconds: number;
  rssMiB: number;
  heapUsedMiB?: number;
  heapTotalMiB?: number;
  externalMiB?: number;
  /** Heap in use right after a full (mark-sweep) collection, the live heap: only on the sample after one. */
  heapAfterFullGcMiB?: number;
}

const mean = (xs: number[]) => (xs.length === 0 ? 0 : xs.reduce((a, b) => a + b, 0) / xs.length);

interface Tally {
  errors: number;
  latencies: LatencyHistogram;
  statuses: Record<string, number>;
}
const tally = (): Tally => ({ errors: 0, latencies: new LatencyHistogram(), statuses: {} });

/** Counts answers per window of `windowSeconds` and per kind, and keeps the memory samples. */
export class SoakRecorder {
  private readonly windows: {
    requests: number;
    errors: number;
    latencies: LatencyHistogram;
    kinds: Map<Kind, Tally>;
  }[] = [];
  private readonly kinds = new Map<Kind, Tally>();
  readonly samples: MemorySample[] = [];
  /** Errors without an answer (connection errors, timeouts), by message. */
  readonly transportErrors: Record<string, number> = {};
  /** Unexpected answers, "kind status" → count, and the first body seen of each. */
  readonly unexpected: Record<string, number> = {};
  readonly unexpectedBodies: Record<string, string> = {};
  readonly windowCount: number;

  readonly windowSeconds: number;
  readonly durationSeconds: number;

  constructor(windowSeconds: number, durationSeconds: number) {
    this.windowSeconds = windowSeconds;
    this.durationSeconds = durationSeconds;
    this.windowCount = Math.ceil(durationSeconds / windowSeconds);
    for (let i = 0; i < this.windowCount; i++) {
      this.windows.push({ requests: 0, errors: 0, latencies: new LatencyHistogram(), kinds: new Map() });
    }
  }

  private window(seconds: number) {
    const i = Math.min(this.windowCount - 1, Math.max(0, Math.floor(seconds / this.windowSeconds)));
    return this.windows[i] as (typeof this.windows)[number];
  }

  answer(seconds: number, kind: Kind, status: number, ok: boolean, latencyMs: number, body?: string): void {
    const w = this.window(seconds);
    w.requests++;
    w.latencies.record(latencyMs);
    for (const map of [this.kinds, w.kinds]) {
      let k = map.get(kind);
      if (k === undefined) {
        k = tally();
        map.set(kind, k);
      }
      k.latencies.record(latencyMs);
      k.statuses[status] = (k.statuses[status] ?? 0) + 1;
      if (!ok) k.errors++;
    }
    if (!ok) {
      w.errors++;
      const key = `${kind} ${status}`;
      this.unexpected[key] = (this.unexpected[key] ?? 0) + 1;
      this.unexpectedBodies[key] ??= body ?? '';
    }
  }

  transportError(seconds: number, message: string): void {
    const w = this.window(seconds);
    w.requests++;
    w.errors++;
    this.transportErrors[message] = (this.transportErrors[message] ?? 0) + 1;
  }

  sample(s: MemorySample): void {
    this.samples.push(s);
  }

  windowFigures(i: number): WindowFigures {
    const w = this.windows[i] as (typeof this.windows)[number];
    const from = i * this.windowSeconds;
    const to = Math.min(from + this.windowSeconds, this.durationSeconds);
    const inside = this.samples.filter((s) => s.seconds >= from && s.seconds < to);
    const heap = inside.flatMap((s) => (s.heapUsedMiB === undefined ? [] : [s.heapUsedMiB]));
    const live = this.samples.filter((s) => s.seconds < to && s.heapAfterFullGcMiB !== undefined).at(-1);
    return {
      fromSeconds: from,
      toSeconds: to,
      requests: w.requests,
      errors: w.errors,
      p50Ms: w.latencies.percentile(50),
      p99Ms: w.latencies.percentile(99),
      maxMs: w.latencies.maxMs,
      rssMiB: mean(inside.map((s) => s.rssMiB)),
      rssMaxMiB: Math.max(0, ...inside.map((s) => s.rssMiB)),
      ...(heap.length > 0 ? { heapUsedMiB: mean(heap) } : {}),
      ...(live?.heapAfterFullGcMiB === undefined ? {} : { liveHeapMiB: live.heapAfterFullGcMiB }),
    };
  }

  allWindows(): WindowFigures[] {
    return this.windows.map((_, i) => this.windowFigures(i));
  }

  private static figures(kinds: Map<Kind, Tally>): KindFigures[] {
    return [...kinds.entries()].map(([kind, k]) => ({
      kind,
      requests: k.latencies.count,
      errors: k.errors,
      p50Ms: k.latencies.percentile(50),
      p99Ms: k.latencies.percentile(99),
      statuses: k.statuses,
    }));
  }

  kindFigures(): KindFigures[] {
    return SoakRecorder.figures(this.kinds);
  }

  /** Per window, the figures of each kind (for finding which requests a slow window slowed). */
  windowKindFigures(): KindFigures[][] {
    return this.windows.map((w) => SoakRecorder.figures(w.kinds));
  }

  totals(): { requests: number; errors: number } {
    return this.windows.reduce((t, w) => ({ requests: t.requests + w.requests, errors: t.errors + w.errors }), {
      requests: 0,
      errors: 0,
    });
  }
}

export interface MemoryThresholds {
  /** The share of the run that is warm-up, left out of the judgement. */
  warmUpShare: number;
  /** RSS keeps growing when its least-squares slope after the warm-up is above this… */
  slopeMiBPerMinute: number;
  /** …and the last quarter's mean is above the first quarter's by more than this. */
  growthMiB: number;
  /** The same two for the live heap (heap in use after full collections), judged when measured. */
  liveHeapSlopeMiBPerMinute: number;
  liveHeapGrowthMiB: number;
  /** Full collections needed in each of the first and last quarters to judge the live heap. */
  liveHeapMinFullGcs: number;
}

export interface Trend {
  samples: number;
  slopeMiBPerMinute: number;
  firstQuarterMeanMiB: number;
  lastQuarterMeanMiB: number;
  growthMiB: number;
  growing: boolean;
}

export interface MemoryJudgement {
  warmUpSeconds: number;
  rss: Trend;
  /** Undefined when too few full collections fell in the first or last quarter (short runs). */
  liveHeap?: Trend;
  /** Full collections seen in the first and last quarters after the warm-up. */
  fullGcsInQuarters: [number, number];
  thresholds: MemoryThresholds;
  growing: boolean;
}

/** Least-squares slope of y over x. */
function slope(points: { x: number; y: number }[]): number {
  const mx = mean(points.map((p) => p.x));
  const my = mean(points.map((p) => p.y));
  let num = 0;
  let den = 0;
  for (const p of points) {
    num += (p.x - mx) * (p.y - my);
    den += (p.x - mx) ** 2;
  }
  return den === 0 ? 0 : num / den;
}

/**
 * After the warm-up: the slope of a memory figure over time (MiB per minute, least squares) and
 * the mean of its last quarter against its first quarter. It "keeps growing" when both are above
 * their thresholds: a slope alone is fooled by one late step (a heap resize), a difference of
 * quarters alone by a slow wave; a leak moves both. Judged for RSS (every 1-s sample) and for the
 * live heap (one point per full collection).
 */
export function judgeMemory(
  samples: MemorySample[],
  durationSeconds: number,
  thresholds: MemoryThresholds,
): MemoryJudgement {
  const warmUpSeconds = durationSeconds * thresholds.warmUpShare;
  const quarter = (durationSeconds - warmUpSeconds) / 4;
  const trend = (value: (s: MemorySample) => number | undefined, maxSlope: number, maxGrowth: number): Trend => {
    const points = samples.flatMap((s) => {
      const y = value(s);
      return s.seconds >= warmUpSeconds && y !== undefined ? [{ x: s.seconds / 60, y }] : [];
    });
    const quarterMean = (q: number) =>
      mean(
        points
          .filter((p) => p.x * 60 >= warmUpSeconds + q * quarter && p.x * 60 < warmUpSeconds + (q + 1) * quarter)
          .map((p) => p.y),
      );
    const rate = slope(points);
    const first = quarterMean(0);
    const last = quarterMean(3);
    return {
      samples: points.length,
      slopeMiBPerMinute: rate,
      firstQuarterMeanMiB: first,
      lastQuarterMeanMiB: last,
      growthMiB: last - first,
      growing: rate > maxSlope && last - first > maxGrowth,
    };
  };
  const fullGcsIn = (q: number) =>
    samples.filter(
      (s) =>
        s.heapAfterFullGcMiB !== undefined &&
        s.seconds >= warmUpSeconds + q * quarter &&
        s.seconds < warmUpSeconds + (q + 1) * quarter,
    ).length;
  const fullGcsInQuarters: [number, number] = [fullGcsIn(0), fullGcsIn(3)];
  const rss = trend((s) => s.rssMiB, thresholds.slopeMiBPerMinute, thresholds.growthMiB);
  const liveHeap =
    Math.min(...fullGcsInQuarters) >= thresholds.liveHeapMinFullGcs
      ? trend((s) => s.heapAfterFullGcMiB, thresholds.liveHeapSlopeMiBPerMinute, thresholds.liveHeapGrowthMiB)
      : undefined;
  return {
    warmUpSeconds,
    rss,
    ...(liveHeap ? { liveHeap } : {}),
    fullGcsInQuarters,
    thresholds,
    growing: rss.growing || liveHeap?.growing === true,
  };
}

// The heap probe: a few lines loaded into the service with NODE_OPTIONS=--import (a data: URL, so
// nothing is added to the project's runtime code). Once a second it writes process.memoryUsage()
// and, from V8's GC profiler, the heap in use right after the latest full (mark-sweep) collection
// (the live heap) to a file the soak reads.
const probeSource = `
import { renameSync, writeFileSync } from 'node:fs';
import { GCProfiler } from 'node:v8';
const file = process.env.SOAK_HEAP_FILE;
let profiler = new GCProfiler();
profiler.start();
let fullGcs = 0;
let afterFullGc;
setInterval(() => {
  for (const s of profiler.stop()?.statistics ?? []) {
    if (s.gcType !== 'MarkSweepCompact') continue;
    fullGcs++;
    afterFullGc = s.afterGC.heapStatistics.usedHeapSize;
  }
  profiler = new GCProfiler();
  profiler.start();
  const m = process.memoryUsage();
  const figures = { heapUsed: m.heapUsed, heapTotal: m.heapTotal, external: m.external, fullGcs, afterFullGc };
  writeFileSync(file + '.tmp', JSON.stringify(figures));
  renameSync(file + '.tmp', file);
}, 1000).unref();
`;

/** Environment that loads the heap probe into a service writing to `file`. */
export function heapProbeEnv(file: string): Record<string, string> {
  const url = `data:text/javascript;base64,${Buffer.from(probeSource).toString('base64')}`;
  return { NODE_OPTIONS: `--import ${url}`, SOAK_HEAP_FILE: file };
}

export interface HeapFigures {
  heapUsedMiB: number;
  /** Heap V8 holds (used or not) and memory outside it (Buffers, native objects). */
  heapTotalMiB: number;
  externalMiB: number;
  /** Full collections so far, and the heap in use right after the latest one. */
  fullGcs: number;
  heapAfterFullGcMiB?: number;
}

/** The probe's latest figures in MiB (undefined before its first write). */
export function readHeapProbe(file: string): HeapFigures | undefined {
  try {
    const m = JSON.parse(readFileSync(file, 'utf8')) as {
      heapUsed: number;
      heapTotal: number;
      external: number;
      fullGcs: number;
      afterFullGc?: number;
    };
    return {
      heapUsedMiB: m.heapUsed / 2 ** 20,
      heapTotalMiB: m.heapTotal / 2 ** 20,
      externalMiB: m.external / 2 ** 20,
      fullGcs: m.fullGcs,
      ...(m.afterFullGc === undefined ? {} : { heapAfterFullGcMiB: m.afterFullGc / 2 ** 20 }),
    };
  } catch {
    return undefined;
  }
}
