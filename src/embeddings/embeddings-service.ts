import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import type { FastifyBaseLogger } from 'fastify';
import type { Redis } from 'ioredis';
import type { Kysely } from 'kysely';
import type { components } from '../../generated/openapi.ts';
import { hmacHex } from '../auth/crypto.ts';
import type { Clock } from '../clock.ts';
import type { Config } from '../config.ts';
import type { Database } from '../db/schema.ts';
import { ApiError, type ErrorCode } from '../errors.ts';
import { localEmbedding } from './local-model.ts';
import { localModels, modelInfo } from './models.ts';
import { type EmbeddingsCall, OpenAICompatibleUpstream } from './openai-compatible.ts';
import { createTokenCounter, type TokenCounterStats } from './token-counter.ts';
import { MAX_TOKENS_PER_REQUEST } from './token-limits.ts';
import { createTokenRateLimit } from './token-rate-limit.ts';
import { type BreakerState, UpstreamBreaker } from './upstream-breaker.ts';
import { UsageRecorder } from './usage-recorder.ts';
import type { Vector } from './vectors.ts';

export type EmbeddingsInput = components['schemas']['EmbeddingsRequest'];
export type EmbeddingsOutput = components['schemas']['EmbeddingsResponse'];

/** An answer before it is written: the vectors in order, in the encoding the caller asked for. */
export interface EmbeddingsResult {
  encoding: 'float' | 'base64';
  vectors: Vector[];
  metadata: EmbeddingsOutput['metadata'];
}

/**
 * An upstream that ignores `dimensions` (a model that cannot shorten) or mixes sizes would hand
 * callers vectors they did not ask for.
 */
function checkVectorSizes(model: string, vectors: readonly Vector[], dimensions: number | undefined): void {
  const size = vectors[0]?.length;
  const wrong = vectors.find((v) => v.length !== (dimensions ?? size));
  if (wrong === undefined) return;
  if (dimensions !== undefined && vectors.every((v) => v.length === size)) {
    throw new ApiError(
      'INVALID_INPUT',
      `Model "${model}" cannot shorten its vectors (it returned ${size} dimensions): leave out body.dimensions`,
    );
  }
  throw new ApiError(
    'PROVIDER_UNAVAILABLE',
    `The embeddings provider sent an invalid answer (vectors of different sizes: ${size} and ${wrong.length})`,
  );
}

/** What the service reports as it works (the metrics listen). */
export interface EmbeddingsEvents {
  /** One HTTP exchange with the provider (each retry is one): its duration and `ok` or the error code. */
  upstreamAttempt(seconds: number, outcome: 'ok' | ErrorCode): void;
  /** A request refused by the tokens-per-minute limit. */
  tokensLimited(): void;
}

/** The local model yields to other requests after this many tokens of work. */
const LOCAL_SLICE_TOKENS = 20_000;

/**
 * Embeddings: checks model, dimensions, input limits (tokens counted in worker threads) and the
 * user's tokens per minute before any work, then computes the vectors in-process (`local/...`) or
 * upstream, encodes them as asked and records the usage.
 */
export function createEmbeddingsService(deps: {
  config: Readonly<Config>;
  db: Kysely<Database>;
  clock: Clock;
  log: FastifyBaseLogger;
  events?: EmbeddingsEvents | undefined;
  /** Keys the end-user ids sent to the provider (EMBEDDINGS_FORWARD_USER). */
  endUserKey: Buffer;
  /** Shares the tokens-per-minute counts between instances; undefined: counted in this process. */
  redis?: Redis | undefined;
}) {
  const settings = deps.config.embeddings;
  const events = deps.events;
  const upstream =
    settings.baseUrl === undefined
      ? undefined
      : new OpenAICompatibleUpstream({
          baseUrl: settings.baseUrl,
          apiKey: settings.apiKey,
          timeoutMs: settings.timeoutMs,
          retryBaseMs: settings.retryBaseMs,
          onAttempt: events && ((seconds, outcome) => events.upstreamAttempt(seconds, outcome)),
        });
  const breaker =
    upstream === undefined
      ? undefined
      : new UpstreamBreaker((call: EmbeddingsCall) => upstream.embed(call), settings.breakerResetMs, deps.log);
  const recorder = new UsageRecorder(deps.db, deps.log);
  const tokenCounter = createTokenCounter();
  const tokenLimit = createTokenRateLimit({
    tokensPerMinute: settings.tokensPerMinute,
    redis: deps.redis,
    redisKeyPrefix: deps.config.redisKeyPrefix,
    clock: deps.clock,
    log: deps.log,
  });
  // Without an upstream only the local models exist; with one, any model it serves, unless listed.
  const allowed = settings.allowedModels ?? (upstream ? undefined : localModels);

  function checkModel(model: string, dimensions: number | undefined) {
    const info = modelInfo(model);
    if ((allowed !== undefined && !allowed.includes(model)) || info === undefined) {
      const choices = (allowed ?? localModels).join(', ');
      throw new ApiError('MODEL_NOT_ALLOWED', `Model "${model}" is not available here; allowed models: ${choices}`);
    }
    if (!info.local && upstream === undefined) {
      throw new ApiError(
        'SERVICE_UNAVAILABLE',
        `Model "${model}" needs an embeddings provider, and none is configured`,
      );
    }
    if (dimensions !== undefined) {
      if (!info.shortenable) {
        throw new ApiError('INVALID_INPUT', `Model "${model}" cannot shorten its vectors: leave out body.dimensions`);
      }
      if (info.nativeDimensions !== undefined && dimensions > info.nativeDimensions) {
        throw new ApiError(
          'INVALID_INPUT',
          `body.dimensions must be at most ${info.nativeDimensions}, the native size of "${model}"`,
        );
      }
    }
    return info;
  }

  async function localVectors(inputs: readonly string[], counts: readonly number[], dimensions: number) {
    const vectors: Vector[] = [];
    let sinceYield = 0;
    for (const [i, text] of inputs.entries()) {
      vectors.push(localEmbedding(text, dimensions));
      sinceYield += counts[i] ?? 0;
      if (sinceYield >= LOCAL_SLICE_TOKENS) {
        sinceYield = 0;
        await yieldToEventLoop();
      }
    }
    return vectors;
  }

  async function embed(userId: string, request: EmbeddingsInput): Promise<EmbeddingsResult> {
    const { model } = request;
    // 0 asks for the model's own size, as leaving the field out does.
    const dimensions = request.dimensions === 0 ? undefined : request.dimensions;
    const encoding = request.encoding_format ?? 'float';
    const info = checkModel(model, dimensions);
    const single = typeof request.input === 'string';
    const inputs = typeof request.input === 'string' ? [request.input] : request.input;
    /** The token limit's refusals (429) are counted in the metrics; other errors pass as they are. */
    const counted429 = async <T>(step: Promise<T>): Promise<T> => {
      try {
        return await step;
      } catch (err) {
        if (err instanceof ApiError && err.statusCode === 429) events?.tokensLimited();
        throw err;
      }
    };
    // Before any counting work, the request holds what is left of the user's minute up to its
    // UTF-8 bytes (cl100k_base never has more tokens than bytes; counting stops past the
    // per-request limit): a user with nothing left, or whose earlier requests hold it all, is
    // refused here.
    const bytes = inputs.reduce((sum, text) => sum + Buffer.byteLength(text, 'utf8'), 0);
    const reserved = await counted429(tokenLimit.reserve(userId, Math.min(bytes, MAX_TOKENS_PER_REQUEST + 1)));
    let counts: number[];
    try {
      counts = await tokenCounter.count(userId, inputs, single);
    } catch (err) {
      // Refused inputs (400) keep their reservation, charged to the user as if counted (counting
      // stops at the first input over a limit).
      if (!(err instanceof ApiError && err.statusCode === 400)) await tokenLimit.release(userId, reserved);
      throw err;
    }
    // Charged even when refused (429, 400), so that a flood uses up its sender's own minute.
    await counted429(
      tokenLimit.settle(
        userId,
        reserved,
        counts.reduce((a, b) => a + b, 0),
      ),
    );
    const counted = counts.reduce((a, b) => a + b, 0);

    let vectors: Vector[];
    let promptTokens = counted;
    let totalTokens = counted;
    if (info.local) {
      vectors = await localVectors(inputs, counts, dimensions ?? (info.nativeDimensions as number));
    } else {
      // The provider sees a stable pseudonym per account and end user: never the caller's raw text,
      // and no caller can pass for another account's end user.
      const user =
        settings.forwardUser && request.user !== undefined
          ? hmacHex(deps.endUserKey, `${userId}\n${request.user}`).slice(0, 32)
          : undefined;
      const answer = await (breaker as NonNullable<typeof breaker>).call({ model, input: inputs, dimensions, user });
      vectors = answer.vectors;
      checkVectorSizes(model, vectors, dimensions);
      // The provider's own figures when it gives them (they are what it bills); ours otherwise.
      promptTokens = answer.promptTokens ?? counted;
      totalTokens = answer.totalTokens ?? promptTokens;
    }

    recorder.record({
      user_id: userId,
      model,
      inputs: inputs.length,
      prompt_tokens: promptTokens,
      total_tokens: totalTokens,
      end_user: request.user ?? null,
      created_at: deps.clock.now(),
    });
    return { encoding, vectors, metadata: { model, usage: { promptTokens, completionTokens: 0, totalTokens } } };
  }

  return {
    embed,
    /** The provider's circuit breaker, or undefined when no provider is configured. */
    breakerState(): BreakerState | undefined {
      return breaker?.state;
    },
    /** The token-counting threads' work so far. */
    tokenCounting(): TokenCounterStats {
      return tokenCounter.stats();
    },
    async close() {
      breaker?.close();
      await tokenCounter.close();
      await recorder.close();
      await upstream?.close();
    },
  };
}

export type EmbeddingsService = ReturnType<typeof createEmbeddingsService>;
