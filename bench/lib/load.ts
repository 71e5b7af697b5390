import autocannon from 'autocannon';

export interface LoadOptions {
  title: string;
  url: string;
  method?: 'GET' | 'POST';
  headers?: Record<string, string>;
  body?: string;
  connections: number;
  durationSeconds: number;
  /** Changes each request before it is sent (for example to give it its own body). */
  setupRequest?: (request: { method: string; path: string; headers: Record<string, string>; body?: string }) => object;
  /** The status every answer should have (default 2xx); others count as errors. */
  expectStatus?: number;
}

export interface LoadResult {
  title: string;
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  errors: number;
  non2xx: number;
  total: number;
  /** How many answers had each status other than the expected ones (`{ "503": 2 }`). */
  unexpectedStatuses: Record<string, number>;
}

/** Runs autocannon against one URL on loopback, with its progress bar, and returns the figures. */
export async function runLoad(o: LoadOptions): Promise<LoadResult> {
  if (!/^http:\/\/(127\.0\.0\.1|localhost|\[::1\])[:/]/.test(o.url))
    throw new Error(`refusing to load ${o.url}: loopback only`);
  let instance!: autocannon.Instance;
  const done = new Promise<autocannon.Result>((resolve, reject) => {
    instance = autocannon(
      {
        url: o.url,
        method: o.method ?? 'GET',
        headers: o.headers ?? {},
        ...(o.body !== undefined ? { body: o.body } : {}),
        ...(o.setupRequest ? { requests: [{ setupRequest: o.setupRequest as never }] } : {}),
        connections: o.connections,
        duration: o.durationSeconds,
      },
      (err, result) => (err ? reject(err) : resolve(result)),
    );
  });
  autocannon.track(instance, { renderResultsTable: false, renderLatencyTable: false, outputStream: process.stderr });
  const result = await done;
  // autocannon counts anything but 2xx as non2xx; an expected error status is the success of its case.
  const unexpected =
    o.expectStatus === undefined
      ? result.non2xx
      : result.requests.total -
        ((result.statusCodeStats as Record<string, { count: number }>)[String(o.expectStatus)]?.count ?? 0);
  const unexpectedStatuses = Object.fromEntries(
    Object.entries(result.statusCodeStats as Record<string, { count: number }>)
      .filter(([status]) => (o.expectStatus === undefined ? !/^2/.test(status) : status !== String(o.expectStatus)))
      .map(([status, { count }]) => [status, count]),
  );
  return {
    title: o.title,
    unexpectedStatuses,
    requestsPerSecond: Math.round(result.requests.average),
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    errors: result.errors + result.timeouts,
    non2xx: unexpected,
    total: result.requests.total,
  };
}
