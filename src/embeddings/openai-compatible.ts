import { setTimeout as sleep } from 'node:timers/promises';
import type { Pool } from 'undici';
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

type Attempt =
  | { ok: true; answer: EmbeddingsAnswer }
  | { ok: false; retryable: boolean; error: ApiError; retryAfter?: number | undefined };

/**
 * An OpenAI-compatible embeddings API over one keep-alive connection pool. Retries connection
 * failures, 408, 409, 429 and 5xx up to twice (exponential backoff with jitter, or the upstream's
 * Retry-After up to a minute); maps every failure to the service's errors.
 */
export class OpenAICompatibleUpstream {
  #pool: Promise<Pool> | undefined;
  readonly #origin: string;
  readonly #path: string;
  readonly #options: UpstreamOptions;

  constructor(options: UpstreamOptions) {
    const url = new URL(options.baseUrl);
    this.#options = options;
    this.#path = `${url.pathname.replace(/\/+$/, '')}/embeddings`;
    this.#origin = url.origin;
  }

  /** The connection pool, made on first use (undici is loaded then, not at start). */
  #connections(): Promise<Pool> {
    this.#pool ??= import('undici').then(
      ({ Pool }) =>
        new Pool(this.#origin, {
          connections: 128,
          keepAliveTimeout: 30_000,
          // The per-call deadline below covers the whole exchange; these only catch a stalled socket.
          headersTimeout: this.#options.timeoutMs + 1_000,
          bodyTimeout: this.#options.timeoutMs + 1_000,
        }),
    );
    return this.#pool;
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
    for (let attempt = 0; ; attempt++) {
      const started = performance.now();
      const result = await this.#attempt(body, call.input.length);
      this.#options.onAttempt?.((performance.now() - started) / 1000, result.ok ? 'ok' : result.error.code);
      if (result.ok) return result.answer;
      if (!result.retryable || attempt >= MAX_RETRIES) throw result.error;
      if (result.retryAfter !== undefined && result.retryAfter > MAX_RETRY_AFTER_SECONDS) throw result.error;
      const backoff = this.#options.retryBaseMs * 2 ** attempt * (0.5 + Math.random() / 2);
      await sleep(result.retryAfter === undefined ? backoff : result.retryAfter * 1000);
    }
  }

  async #attempt(body: string, expected: number): Promise<Attempt> {
    const deadline = new AbortController();
    const timer = setTimeout(() => deadline.abort(), this.#options.timeoutMs);
    try {
      const pool = await this.#connections();
      const res = await pool.request({
        method: 'POST',
        path: this.#path,
        headers: {
          'content-type': 'application/json',
          accept: 'application/json',
          ...(this.#options.apiKey ? { authorization: `Bearer ${this.#options.apiKey}` } : {}),
        },
        body,
        signal: deadline.signal,
      });
      const text = await res.body.text();
      if (res.statusCode >= 200 && res.statusCode < 300) return this.#parse(text, expected);
      return this.#failure(res.statusCode, text, res.headers);
    } catch (err) {
      if (deadline.signal.aborted) {
        const seconds = this.#options.timeoutMs / 1000;
        return {
          ok: false,
          retryable: false,
          error: new ApiError('PROVIDER_TIMEOUT', `The embeddings provider did not answer within ${seconds} s`),
        };
      }
      const code = (err as { code?: string }).code ?? 'connection error';
      return {
        ok: false,
        retryable: true,
        error: new ApiError('PROVIDER_UNAVAILABLE', `The embeddings provider could not be reached (${code})`),
      };
    } finally {
      clearTimeout(timer);
    }
  }

  #failure(status: number, text: string, headers: Record<string, string | string[] | undefined>): Attempt {
    const upstream = upstreamErrorMessage(text, this.#options.apiKey);
    const retryAfter = retryAfterSeconds(headers, Date.now());
    if (status === 401 || status === 403) {
      return {
        ok: false,
        retryable: false,
        error: new ApiError(
          'PROVIDER_AUTH_FAILED',
          `The embeddings provider rejected the service's credentials (HTTP ${status})`,
        ),
      };
    }
    if (status === 429) {
      const wait = Math.max(1, Math.ceil(retryAfter ?? 1));
      return {
        ok: false,
        retryable: true,
        retryAfter,
        error: new ApiError(
          'RATE_LIMITED',
          `The embeddings provider is rate limiting this service; try again in ${wait} s`,
          { 'retry-after': String(wait) },
        ),
      };
    }
    if (isRetryableStatus(status)) {
      return {
        ok: false,
        retryable: true,
        retryAfter,
        error: new ApiError(
          'PROVIDER_UNAVAILABLE',
          `The embeddings provider failed (HTTP ${status}${upstream ? `: ${upstream}` : ''})`,
        ),
      };
    }
    if (status !== 400 && status !== 404 && status !== 422) {
      // A redirect, 402 (billing), 413 ...: a problem of the deployment, not of the caller's request.
      return {
        ok: false,
        retryable: false,
        error: new ApiError(
          'PROVIDER_UNAVAILABLE',
          `The embeddings provider refused the service (HTTP ${status}${upstream ? `: ${upstream}` : ''})`,
        ),
      };
    }
    // The request itself was refused (400, 404 unknown model, 422): the caller can fix it.
    return {
      ok: false,
      retryable: false,
      error: new ApiError(
        'INVALID_INPUT',
        `The embeddings provider refused the request: ${upstream ?? `HTTP ${status}`}`,
      ),
    };
  }

  #parse(text: string, expected: number): Attempt {
    const invalid = (why: string): Attempt => ({
      ok: false,
      retryable: false,
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
      ok: true,
      answer: { vectors, promptTokens: count(usage?.prompt_tokens), totalTokens: count(usage?.total_tokens) },
    };
  }

  async close(): Promise<void> {
    await (await this.#pool)?.close();
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
