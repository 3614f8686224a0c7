import type { Clock } from '../../shared/platform/time/clock';

/**
 * The real clock, moved ahead when a test says so. A host given it (`depsOverrides: { clock }`) runs in real time,
 * and a wait that is only for time to pass (a runner job's lease to lapse, 5 s at the least) is skipped instead of
 * slept: the host's durable timers, lease checks and expiries see the time they would see after the wait, and the
 * same code takes the lapse. Timers the host sets on its event loop (polls, renewals) keep real time, so a skip must
 * stay well within the leases the host renews that way (durable leases: 15 s, renewed every 5 s): `skipPast` a lease
 * of 5 s moves the clock 5 s at the most.
 */
export class SkippingClock implements Clock {
  #skippedMs = 0;

  now(): Date {
    return new Date(Date.now() + this.#skippedMs);
  }

  /** Moves the clock just past `at`, a time of this clock (a lease's expiry the host answered); a time past already changes nothing. */
  skipPast(at: Date | string | number): void {
    const ms = new Date(at).getTime() + 1 - this.now().getTime();
    if (ms > 0) this.#skippedMs += ms;
  }
}
