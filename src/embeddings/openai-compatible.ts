import type { Dispatcher, Pool, RetryHandler } from 'undici';
import { ApiError, type ErrorCode } from '../errors.ts';
import { retryAfterSeconds, upstreamErrorMessage } from './upstream-errors.ts';
import { base64ToFloat32, type Vector } from './vectors.ts';

export interface UpstreamOptions {
  /** API root, such as https://api.openai.com/v1; requests go to `${baseUrl}/embeddings`. */
  baseUrl: string;
  apiKey: string | undefined;
  timeoutMs: number;
  retryBaseMs: number;
  /** Told of each HTTP exchange with the provider (each retry is one): its duration and `ok` or the error code. */
  onAttempt?: ((seconds: number, outcome: 'ok' | ErrorCode) => void) | undefined;
}

export interface EmbeddingsCall {
  model: string;
  input: readonly string[];
  dimensions: number | undefined;
  /** The caller's end-user identifier, sent on as OpenAI's `user` (only when configured to). */
  user?: string | undefined;
}

export interface EmbeddingsAnswer {
  vectors: Vector[];
  /** The upstream's own usage figures, when it reports them. */
  promptTokens: number | undefined;
  totalTokens: number | undefined;
}

export const MAX_RETRIES = 2;
/** A Retry-After longer than this is not waited for: the caller gets the 429 at once. */
export const MAX_RETRY_AFTER_SECONDS = 60;

const RETRYABLE_STATUS = new Set([408, 409, 429]);
const isRetryableStatus = (status: number) => RETRYABLE_STATUS.has(status) || status >= 500;

/** The error an attempt's deadline aborts it with: a slow provider, never retried. */
class AttemptDeadline extends Error {
  override name = 'AttemptDeadline';
}

/**
 * An undici interceptor giving each attempt (each dispatch below the retry interceptor) `ms` to
 * finish, a successful answer's body included; beyond, the attempt is aborted with AttemptDeadline.
 */
function attemptDeadline(ms: number): Dispatcher.DispatcherComposeInterceptor {
  return (dispatch) => (opts, handler) => {
    let timer: NodeJS.Timeout | undefined;
    return dispatch(opts, {
      onRequestStart(controller, context) {
        timer = setTimeout(() => controller.abort(new AttemptDeadline(`no answer in ${ms} ms`)), ms);
        handler.onRequestStart?.(controller, context);
      },
      onRequestUpgrade: (...args) => handler.onRequestUpgrade?.(...args),
      onResponseStart(controller, statusCode, headers, statusMessage) {
        // A failure's body only carries its message (and the retry interceptor holds it while it waits).
        if (statusCode >= 300) clearTimeout(timer);
        handler.onResponseStart?.(controller, statusCode, headers, statusMessage);
      },
      onResponseData: (...args) => handler.onResponseData?.(...args),
      onResponseEnd(controller, trailers) {
        clearTimeout(timer);
        handler.onResponseEnd?.(controller, trailers);
      },
      onResponseError(controller, err) {
        clearTimeout(timer);
        handler.onResponseError?.(controller, err);
      },
    });
  };
}

/** The code an attempt's failure is reported with (onAttempt). */
const outcomeOf = (status: number | undefined): ErrorCode => (status === 429 ? 'RATE_LIMITED' : 'PROVIDER_UNAVAILABLE');

/**
 * An OpenAI-compatible embeddings API over one keep-alive connection pool. undici's retry
 * interceptor retries connection failures, 408, 409, 429 and 5xx up to twice (exponential backoff
 * with jitter, or the upstream's Retry-After up to a minute; a longer one is answered at once);
 * each attempt has its own deadline, and a slow provider is not retried. Every failure is mapped to
 * the service's errors.
 */
export class OpenAICompatibleUpstream {
  #pool: Promise<{ pool: Pool; dispatcher: Dispatcher }> | undefined;
  readonly #origin: string;
  readonly #path: string;
  readonly #options: UpstreamOptions;

  constructor(options: UpstreamOptions) {
    const url = new URL(options.baseUrl);
    this.#options = options;
    this.#path = `${url.pathname.replace(/\/+$/, '')}/embeddings`;
    this.#origin = url.origin;
  }

  /** The connection pool with the deadline and retries, made on first use (undici is loaded then, not at start). */
  #connections(): Promise<{ pool: Pool; dispatcher: Dispatcher }> {
    this.#pool ??= import('undici').then(({ Pool, interceptors }) => {
      const pool = new Pool(this.#origin, {
        connections: 128,
        keepAliveTimeout: 30_000,
        // The per-attempt deadline covers the whole exchange; these only catch a stalled socket.
        headersTimeout: this.#options.timeoutMs + 1_000,
        bodyTimeout: this.#options.timeoutMs + 1_000,
      });
      const retries = interceptors.retry({ methods: ['POST'], maxRetries: MAX_RETRIES, throwOnError: false });
      return { pool, dispatcher: pool.compose(attemptDeadline(this.#options.timeoutMs), retries) };
    });
    return this.#pool;
  }

  /**
   * undici's retry policy for one call: which failures are retried and after how long. It sees each
   * failed attempt, so it reports those that are retried (the last one is reported by embed).
   */
  #retryPolicy(attemptStarted: { at: number }): RetryHandler.RetryCallback {
    return (err, { state }, done) => {
      const { statusCode, headers } = err as { statusCode?: number; headers?: Record<string, string | string[]> };
      const retryable = statusCode === undefined ? !(err instanceof AttemptDeadline) : isRetryableStatus(statusCode);
      const retryAfter = headers === undefined ? undefined : retryAfterSeconds(headers, Date.now());
      if (!retryable || state.counter > MAX_RETRIES || (retryAfter ?? 0) > MAX_RETRY_AFTER_SECONDS) {
        return done(err);
      }
      this.#options.onAttempt?.((performance.now() - attemptStarted.at) / 1000, outcomeOf(statusCode));
      const backoff = this.#options.retryBaseMs * 2 ** (state.counter - 1) * (0.5 + Math.random() / 2);
      setTimeout(
        () => {
          attemptStarted.at = performance.now();
          done(null);
        },
        retryAfter === undefined ? backoff : retryAfter * 1000,
      );
    };
  }

  async embed(call: EmbeddingsCall): Promise<EmbeddingsAnswer> {
    const body = JSON.stringify({
      model: call.model,
      input: call.input,
      // Always base64, whatever the caller wants: a quarter of the bytes of JSON floats, and far
      // less to parse. The answer is accepted in either form (some servers ignore the field).
      encoding_format: 'base64',
      ...(call.dimensions === undefined ? {} : { dimensions: call.dimensions }),
      ...(call.user === undefined ? {} : { user: call.user }),
    });
    const attemptStarted = { at: performance.now() };
    let status: number | undefined;
    let result: { answer: EmbeddingsAnswer } | { error: ApiError };
    try {
      const { dispatcher } = await this.#connections();
      const res = await dispatcher.request({
        method: 'POST',
        path: this.#path,
        headers: {
          'content-type': 'application/json',
          accept: 'application/json',
          ...(this.#options.apiKey ? { authorization: `Bearer ${this.#options.apiKey}` } : {}),
        },
        body,
        retryOptions: { retry: this.#retryPolicy(attemptStarted) },
      } as Dispatcher.RequestOptions);
      const text = await res.body.text();
      status = res.statusCode;
      result =
        status >= 200 && status < 300
          ? this.#parse(text, call.input.length)
          : { error: this.#failure(status, text, res.headers) };
    } catch (err) {
      result = { error: this.#unreachable(err) };
    }
    this.#options.onAttempt?.(
      (performance.now() - attemptStarted.at) / 1000,
      'answer' in result ? 'ok' : result.error.code,
    );
    if ('error' in result) throw result.error;
    return result.answer;
  }

  /** No answer: the attempt's deadline passed, or the connection failed (after the retries). */
  #unreachable(err: unknown): ApiError {
    if (err instanceof AttemptDeadline) {
      const seconds = this.#options.timeoutMs / 1000;
      return new ApiError('PROVIDER_TIMEOUT', `The embeddings provider did not answer within ${seconds} s`);
    }
    const code = (err as { code?: string }).code ?? 'connection error';
    return new ApiError('PROVIDER_UNAVAILABLE', `The embeddings provider could not be reached (${code})`);
  }

  /** The service's error for an upstream's answer that is not a success (after the retries). */
  #failure(status: number, text: string, headers: Record<string, string | string[] | undefined>): ApiError {
    const upstream = upstreamErrorMessage(text, this.#options.apiKey);
    if (status === 401 || status === 403) {
      return new ApiError(
        'PROVIDER_AUTH_FAILED',
        `The embeddings provider rejected the service's credentials (HTTP ${status})`,
      );
    }
    if (status === 429) {
      const wait = Math.max(1, Math.ceil(retryAfterSeconds(headers, Date.now()) ?? 1));
      return new ApiError(
        'RATE_LIMITED',
        `The embeddings provider is rate limiting this service; try again in ${wait} s`,
        { 'retry-after': String(wait) },
      );
    }
    if (isRetryableStatus(status)) {
      return new ApiError(
        'PROVIDER_UNAVAILABLE',
        `The embeddings provider failed (HTTP ${status}${upstream ? `: ${upstream}` : ''})`,
      );
    }
    if (status !== 400 && status !== 404 && status !== 422) {
      // A redirect, 402 (billing), 413 ...: a problem of the deployment, not of the caller's request.
      return new ApiError(
        'PROVIDER_UNAVAILABLE',
        `The embeddings provider refused the service (HTTP ${status}${upstream ? `: ${upstream}` : ''})`,
      );
    }
    // The request itself was refused (400, 404 unknown model, 422): the caller can fix it.
    return new ApiError(
      'INVALID_INPUT',
      `The embeddings provider refused the request: ${upstream ?? `HTTP ${status}`}`,
    );
  }

  #parse(text: string, expected: number): { answer: EmbeddingsAnswer } | { error: ApiError } {
    const invalid = (why: string) => ({
      error: new ApiError('PROVIDER_UNAVAILABLE', `The embeddings provider sent an invalid answer (${why})`),
    });
    let parsed: { data?: unknown; usage?: { prompt_tokens?: unknown; total_tokens?: unknown } } | null;
    try {
      parsed = JSON.parse(text);
    } catch {
      return invalid('not JSON');
    }
    if (typeof parsed !== 'object' || parsed === null) return invalid('not a JSON object');
    if (!Array.isArray(parsed.data) || parsed.data.length !== expected) return invalid('wrong number of embeddings');
    const vectors: Vector[] = new Array(expected);
    for (const [position, item] of parsed.data.entries()) {
      const index = typeof item?.index === 'number' ? item.index : position;
      if (!Number.isInteger(index) || index < 0 || index >= expected || vectors[index] !== undefined) {
        return invalid('bad index');
      }
      const vector = decodeVector(item?.embedding);
      if (vector === undefined) return invalid(`bad embedding at index ${index}`);
      vectors[index] = vector;
    }
    const usage = parsed.usage;
    // Figures outside a plausible range (the ledger's integer columns) are ignored: ours are used.
    const count = (v: unknown) =>
      typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= 2_147_483_647 ? v : undefined;
    return {
      answer: { vectors, promptTokens: count(usage?.prompt_tokens), totalTokens: count(usage?.total_tokens) },
    };
  }

  async close(): Promise<void> {
    await (await this.#pool)?.pool.close();
  }
}

/** A vector in either encoding, whatever was asked for (some servers ignore encoding_format). */
function decodeVector(embedding: unknown): Vector | undefined {
  if (typeof embedding === 'string') return base64ToFloat32(embedding);
  if (
    Array.isArray(embedding) &&
    embedding.length > 0 &&
    embedding.every((x) => typeof x === 'number' && Number.isFinite(x))
  ) {
    return embedding as number[];
  }
  return undefined;
}
