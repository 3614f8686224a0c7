import { randomUUID } from 'node:crypto';

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

export const randomIds: Ids = { next: (prefix) => (prefix ? `${prefix}_${randomUUID()}` : randomUUID()) };
