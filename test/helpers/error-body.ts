import type { Test } from 'tap';
import { errorCodes } from '../../generated/contract.ts';

/** Asserts that a response is in the Error schema with the given status (and code, when given). */
export function assertErrorBody(
  t: Test,
  res: { statusCode: number; body: string; headers: Record<string, unknown> },
  status: number,
  code?: string,
): { error: string; message: string; statusCode: number } {
  t.equal(res.statusCode, status, `status ${status}`);
  t.match(String(res.headers['content-type']), /^application\/json/, 'JSON content type');
  const body = JSON.parse(res.body) as { error: string; message: string; statusCode: number };
  t.same(Object.keys(body).sort(), ['error', 'message', 'statusCode'], 'exactly error, message, statusCode');
  t.ok((errorCodes as readonly string[]).includes(body.error), `${body.error} is in the spec's ErrorCode enum`);
  t.equal(body.statusCode, status, 'statusCode matches the status');
  t.ok(typeof body.message === 'string' && body.message.length > 0, 'a message');
  if (code !== undefined) t.equal(body.error, code, `code ${code}`);
  return body;
}

/** Asserts an embeddings request refused for its user's tokens per minute: 429 RATE_LIMITED, Retry-After within the minute. */
export function assertTokensLimited(
  t: Test,
  res: { statusCode: number; body: string; headers: Record<string, unknown> },
  what: string,
) {
  t.test(what, async (t) => {
    const body = assertErrorBody(t, res, 429, 'RATE_LIMITED');
    t.match(body.message, /tokens/, 'the message says the tokens are used up');
    const seconds = Number(res.headers['retry-after']);
    t.ok(Number.isInteger(seconds) && seconds >= 1 && seconds <= 60, `Retry-After ${seconds} within the minute`);
  });
}
