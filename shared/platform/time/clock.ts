import { randomFillSync } from 'node:crypto';

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

let lastMs = 0;
let sequence = 0;

/** Random bytes drawn in blocks (as `randomUUID` does): one call into the CSPRNG serves 512 ids. */
const pool = Buffer.alloc(8 * 512);
let poolOffset = pool.length;

function random8(): Buffer {
  if (poolOffset >= pool.length) {
    randomFillSync(pool);
    poolOffset = 0;
  }
  const bytes = Buffer.from(pool.subarray(poolOffset, poolOffset + 8));
  poolOffset += 8;
  return bytes;
}

/**
 * A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then a 12-bit sequence that keeps ids of one millisecond in
 * order, then 62 random bits. Ids made later sort later, so new rows land at the right edge of every index keyed
 * by id instead of on a random page: fewer pages written per insert, and a hot cache.
 */
export function uuidV7(nowMs = Date.now()): string {
  const random = random8();
  if (nowMs > lastMs) {
    lastMs = nowMs;
    // A random start within the millisecond, leaving room for many more ids before the sequence runs out.
    sequence = random.readUInt16BE(6) & 0x1ff;
  } else if (++sequence > 0xfff) {
    // The sequence ran out within one millisecond: borrow the next millisecond, keeping the order.
    lastMs++;
    sequence = 0;
  }
  random[0] = (random[0]! & 0x3f) | 0x80;
  const hex =
    lastMs.toString(16).padStart(12, '0') + (0x7000 | sequence).toString(16) + random.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}

/** Time-ordered unique ids, optionally prefixed (`lease_…`). */
export const randomIds: Ids = { next: (prefix) => (prefix ? `${prefix}_${uuidV7()}` : uuidV7()) };
