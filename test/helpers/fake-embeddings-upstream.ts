import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

/** What the fake does with one request; an empty queue means a correct answer. */
export interface UpstreamBehaviour {
  status?: number;
  headers?: Record<string, string>;
  /** The whole JSON body to send; for an error status without one, OpenAI's nested error shape. */
  body?: unknown;
  /** Wait this long before answering. */
  delayMs?: number;
  /** Close the connection without answering. */
  drop?: boolean;
}

export interface RecordedRequest {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  body: { model?: string; input?: string[] | string; encoding_format?: string; dimensions?: number };
}

export interface FakeUpstream {
  /** API root to configure as EMBEDDINGS_BASE_URL (ends in /v1). */
  baseUrl: string;
  requests: RecordedRequest[];
  /** Behaviours for the next requests, one each, in order. */
  enqueue(...behaviours: UpstreamBehaviour[]): void;
  /** Answer with float arrays whatever encoding_format asks (as some servers do). */
  ignoreEncodingFormat: boolean;
  /** Leave `usage` out of answers (as some servers do). */
  omitUsage: boolean;
  reset(): void;
  close(): Promise<void>;
}

export const FAKE_NATIVE_DIMENSIONS = 8;

/**
 * The fake's deterministic vector for `text`: like a real model's, unit length with float32 values
 * (which JSON.stringify writes with up to 17 digits, as OpenAI's float answers do).
 */
export function fakeVector(text: string, dimensions: number): number[] {
  let seed = 2166136261;
  for (const ch of text) seed = Math.imul(seed ^ (ch.codePointAt(0) ?? 0), 16777619) >>> 0;
  const next = () => {
    // mulberry32
    seed = (seed + 0x6d2b79f5) >>> 0;
    let z = seed;
    z = Math.imul(z ^ (z >>> 15), z | 1);
    z ^= z + Math.imul(z ^ (z >>> 7), z | 61);
    return ((z ^ (z >>> 14)) >>> 0) / 2 ** 32;
  };
  const raw = Array.from({ length: dimensions }, () => next() + next() + next() - 1.5);
  const norm = Math.hypot(...raw) || 1;
  return raw.map((x) => Math.fround(x / norm));
}

/** The prompt_tokens the fake reports: one per whitespace-separated word (deliberately not tiktoken's count). */
export const fakePromptTokens = (inputs: readonly string[]) =>
  inputs.reduce((n, s) => n + s.split(/\s+/).filter(Boolean).length, 0) + 1000;

/** A real HTTP server on loopback that speaks the OpenAI embeddings API and fails on demand (tests, bench:embeddings). */
export async function startFakeUpstream(port = 0): Promise<FakeUpstream> {
  const queue: UpstreamBehaviour[] = [];
  const fake: FakeUpstream = {
    baseUrl: '',
    requests: [],
    enqueue: (...b) => queue.push(...b),
    ignoreEncodingFormat: false,
    omitUsage: false,
    reset() {
      queue.length = 0;
      fake.requests.length = 0;
      fake.ignoreEncodingFormat = false;
      fake.omitUsage = false;
    },
    close: async () => {
      server.closeAllConnections();
      server.close();
      await once(server, 'close');
    },
  };

  const server = http.createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    let body: RecordedRequest['body'] = {};
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {}
    fake.requests.push({ method: req.method ?? '', path: req.url ?? '', headers: req.headers, body });
    const behaviour = queue.shift() ?? {};
    if (behaviour.delayMs) await new Promise((r) => setTimeout(r, behaviour.delayMs));
    if (behaviour.drop) {
      req.socket.destroy();
      return;
    }
    const send = (status: number, payload: unknown) => {
      if (res.destroyed) return;
      res.writeHead(status, { 'content-type': 'application/json', ...behaviour.headers });
      res.end(JSON.stringify(payload));
    };
    if (behaviour.status !== undefined && behaviour.status >= 300) {
      send(
        behaviour.status,
        behaviour.body ?? { error: { message: `fake failure ${behaviour.status}`, type: 'fake_error', code: null } },
      );
      return;
    }
    if (behaviour.body !== undefined) {
      send(behaviour.status ?? 200, behaviour.body);
      return;
    }
    if (req.method !== 'POST' || req.url !== '/v1/embeddings') {
      send(404, { error: { message: `no route ${req.method} ${req.url}`, type: 'invalid_request_error' } });
      return;
    }
    const inputs = typeof body.input === 'string' ? [body.input] : (body.input ?? []);
    const dimensions = body.dimensions ?? FAKE_NATIVE_DIMENSIONS;
    const base64 = body.encoding_format === 'base64' && !fake.ignoreEncodingFormat;
    const data = inputs.map((text, index) => {
      const v = fakeVector(text, dimensions);
      return {
        object: 'embedding',
        index,
        embedding: base64 ? Buffer.from(new Float32Array(v).buffer).toString('base64') : v,
      };
    });
    const tokens = fakePromptTokens(inputs);
    send(behaviour.status ?? 200, {
      object: 'list',
      data,
      model: body.model,
      ...(fake.omitUsage ? {} : { usage: { prompt_tokens: tokens, total_tokens: tokens } }),
    });
  });
  server.listen(port, '127.0.0.1');
  await once(server, 'listening');
  fake.baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  return fake;
}
