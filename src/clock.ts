/** The source of "now" for everything time-dependent (token expiry, code lifetimes, cooldowns); tests move it. */
export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };
