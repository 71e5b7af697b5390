/**
 * Access tokens this app has already verified, so that the token a client sends with every request
 * for its whole life is checked (signature, issuer, audience, claims) once rather than each time.
 * Keyed by the token itself: a different token, even one byte apart, is a miss. Only successes are
 * kept, each until its own `exp` (and at most maxAgeMs); the oldest entry makes room when full.
 */
export class VerifiedTokenCache<Claims extends { exp?: number }> {
  readonly #entries = new Map<string, { claims: Readonly<Claims>; expiresAt: number }>();

  readonly #maxEntries: number;
  readonly #maxAgeMs: number;

  constructor(maxEntries = 10_000, maxAgeMs = 10 * 60_000) {
    this.#maxEntries = maxEntries;
    this.#maxAgeMs = maxAgeMs;
  }

  get(token: string, now: number): Readonly<Claims> | undefined {
    const entry = this.#entries.get(token);
    if (entry === undefined) return undefined;
    if (entry.expiresAt <= now) {
      this.#entries.delete(token);
      return undefined;
    }
    return entry.claims;
  }

  set(token: string, claims: Claims, now: number): void {
    if (claims.exp === undefined) return;
    const expiresAt = Math.min(claims.exp * 1000, now + this.#maxAgeMs);
    if (expiresAt <= now) return;
    if (this.#entries.size >= this.#maxEntries) {
      const oldest = this.#entries.keys().next().value;
      if (oldest !== undefined) this.#entries.delete(oldest);
    }
    this.#entries.set(token, { claims: Object.freeze({ ...claims }), expiresAt });
  }

  /** Forgets every token (the keys changed). */
  clear(): void {
    this.#entries.clear();
  }
}
