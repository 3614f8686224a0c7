import { randomInt } from 'node:crypto';

/** Time, injected so lease expiry, drift windows and approval timeouts are tested without waiting. */
export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };

/** A clock that only moves when told to. */
export class ManualClock implements Clock {
  #ms: number;
  constructor(start: Date | string = '2026-01-01T00:00:00.000Z') {
    this.#ms = new Date(start).getTime();
  }
  now(): Date {
    return new Date(this.#ms);
  }
  advance(ms: number): void {
    this.#ms += ms;
  }
  set(at: Date | string): void {
    this.#ms = new Date(at).getTime();
  }
}

/** Identifier source, injected for repeatable tests. */
export interface Ids {
  next(prefix?: string): string;
}

let uuid: typeof import('uuid') | undefined;

/** `uuid`'s v7, loaded with the first id, not with the functions (cold start: the package is some 16 modules). */
function v7(options?: { msecs: number; seq: number }): string {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  uuid ??= require('uuid') as typeof import('uuid');
  return options ? uuid.v7(options) : uuid.v7();
}

/** The millisecond and sequence of the last id made at a given time (`uuidV7(nowMs)`), so those keep their order too. */
const given = { msecs: -Infinity, seq: 0 };

/**
 * A UUIDv7 (RFC 9562, the `uuid` package): 48 bits of Unix milliseconds, then a sequence that keeps ids of one
 * millisecond in order, then random bits. Ids made later sort later, so new rows land at the right edge of every
 * index keyed by id instead of on a random page: fewer pages written per insert, and a hot cache. Given a time
 * (an injected clock's), the id carries that time; ids given the same time still sort in the order made.
 */
export function uuidV7(nowMs?: number): string {
  if (nowMs === undefined) return v7();
  if (nowMs > given.msecs) {
    given.msecs = nowMs;
    // A random start within the millisecond (as `v7` does), leaving room for many more ids before the sequence runs out.
    given.seq = randomInt(0x80000000);
  } else if (++given.seq > 0xffffffff) {
    // The sequence ran out within one millisecond: borrow the next millisecond, keeping the order.
    given.msecs++;
    given.seq = 0;
  }
  return v7({ msecs: given.msecs, seq: given.seq });
}

/** Time-ordered unique ids, optionally prefixed (`lease_…`). */
export const randomIds: Ids = { next: (prefix) => (prefix ? `${prefix}_${uuidV7()}` : uuidV7()) };
