import { describe, expect, it } from 'vitest';
import { ConcurrencyLevel, EventLoopHealth } from '../../local/service-bus/dynamic-concurrency';

/** A health whose verdict the test sets. */
function fixedHealth(starvationMs = 1000): EventLoopHealth & { busy: boolean } {
  const health = new EventLoopHealth({ starvationMs }) as EventLoopHealth & { busy: boolean };
  health.busy = false;
  health.overloaded = () => health.busy;
  return health;
}

function busyFor(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // The event loop stays busy: that is what is measured.
  }
}

describe('dynamic concurrency of the local Service Bus binding', () => {
  it('starts at one message and goes up one only after every slot was used while healthy', () => {
    const level = new ConcurrencyLevel(fixedHealth(), 4);
    expect(level.fetchCount(0)).toBe(1);
    level.fetched(1, 0);
    // The one slot is in use: next time the level is two, so one more may come.
    expect(level.fetchCount(1)).toBe(1);
    expect(level.level).toBe(2);
    level.fetched(1, 1);
    expect(level.fetchCount(2)).toBe(1);
    level.fetched(1, 2);
    expect(level.fetchCount(3)).toBe(1);
    level.fetched(1, 3);
    // Capped at the maximum (maxConcurrentCalls).
    expect(level.fetchCount(4)).toBe(0);
    expect(level.level).toBe(4);
  });

  it('does not go up when the function did not use what it had', () => {
    const level = new ConcurrencyLevel(fixedHealth(), 8);
    expect(level.fetchCount(0)).toBe(1);
    level.fetched(0, 0);
    expect(level.fetchCount(0)).toBe(1);
    expect(level.level).toBe(1);
  });

  it('fetches nothing while the host is overloaded and goes down, then resumes at the lower level', () => {
    const health = fixedHealth();
    const level = new ConcurrencyLevel(health, 8);
    for (let inFlight = 0; inFlight < 3; inFlight++) {
      level.fetchCount(inFlight);
      level.fetched(1, inFlight);
    }
    expect(level.fetchCount(3)).toBe(1);
    expect(level.level).toBe(4);
    health.busy = true;
    expect(level.fetchCount(3)).toBe(0);
    expect(level.fetchCount(3)).toBe(0);
    expect(level.level).toBe(2);
    health.busy = false;
    expect(level.fetchCount(1)).toBe(1);
  });

  it('fetches one message while overloaded once it has fetched nothing for the starvation period, with nothing in flight', () => {
    let now = 0;
    const health = fixedHealth(1000);
    health.busy = true;
    const level = new ConcurrencyLevel(health, 8, () => now);
    expect(level.fetchCount(0)).toBe(0);
    now = 999;
    expect(level.fetchCount(0)).toBe(0);
    now = 1000;
    expect(level.fetchCount(1)).toBe(0);
    expect(level.fetchCount(0)).toBe(1);
    level.fetched(1, 0);
    expect(level.fetchCount(0)).toBe(0);
  });

  it('measures the event loop: overloaded after a busy window, healthy again after an idle one', async () => {
    const health = new EventLoopHealth({ windowMs: 20, overloadedAbove: 0.8 });
    await new Promise((resolve) => setTimeout(resolve, 30));
    expect(health.overloaded()).toBe(false);
    busyFor(60);
    expect(health.overloaded()).toBe(true);
    // Asked again within the window: the last measurement stands.
    expect(health.overloaded()).toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 60));
    expect(health.overloaded()).toBe(false);
  });
});
