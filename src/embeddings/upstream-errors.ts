/**
 * The error message inside an upstream's error body, whichever of the common shapes it uses:
 * OpenAI's nested {error: {message, type, code}}, the flat {message, type, code} of several
 * compatible servers, {error: "text"} (Ollama, text-embeddings-inference) and FastAPI's
 * {detail: ...} (vLLM). The service's API key is removed, and the text is kept short.
 */
export function upstreamErrorMessage(body: string, apiKey: string | undefined): string | undefined {
  let message: string | undefined;
  try {
    const parsed = JSON.parse(body) as Record<string, unknown>;
    message = messageOf(parsed.error) ?? messageOf(parsed) ?? detailOf(parsed.detail);
  } catch {
    message = body.trim() === '' ? undefined : body.trim();
  }
  if (message === undefined) return undefined;
  if (apiKey) message = message.replaceAll(apiKey, '[redacted]');
  message = message.replace(/\s+/g, ' ').trim();
  return message.length > 500 ? `${message.slice(0, 497)}...` : message || undefined;
}

function messageOf(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (value && typeof value === 'object') {
    const m = (value as { message?: unknown }).message;
    if (typeof m === 'string') return m;
  }
  return undefined;
}

function detailOf(detail: unknown): string | undefined {
  if (typeof detail === 'string') return detail;
  if (Array.isArray(detail)) {
    const msgs = detail.map((d) => messageOf(d) ?? (d as { msg?: unknown })?.msg).filter((m) => typeof m === 'string');
    return msgs.length > 0 ? msgs.join('; ') : undefined;
  }
  return undefined;
}

/** Seconds to wait from Retry-After (seconds or an HTTP date) or retry-after-ms; undefined if absent. */
export function retryAfterSeconds(
  headers: Record<string, string | string[] | undefined>,
  now: number,
): number | undefined {
  const ms = Number(first(headers['retry-after-ms']));
  if (Number.isFinite(ms) && ms >= 0) return ms / 1000;
  const value = first(headers['retry-after']);
  if (value === undefined) return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds;
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, (date - now) / 1000);
}

function first(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}
