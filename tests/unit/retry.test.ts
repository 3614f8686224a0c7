import { describe, expect, it } from 'vitest';
import { backoffDelayMs, retry, sleep, type RetryPolicy } from '../../shared/platform/time/retry';

/** A policy whose waits are recorded, not slept, and whose clock moves by each wait. */
function recorded(policy: Partial<RetryPolicy> = {}): { policy: RetryPolicy; waits: number[]; clock: { ms: number } } {
  const waits: number[] = [];
  const clock = { ms: 0 };
  return {
    waits,
    clock,
    policy: {
      attempts: 5,
      backoff: { firstMs: 100, maxMs: 1000 },
      sleep: (ms) => {
        waits.push(ms);
        clock.ms += ms;
        return Promise.resolve();
      },
      now: () => clock.ms,
      ...policy,
    },
  };
}

/** Work that fails `failures` times (with errors numbered from 1), then answers `done`. */
function failing(failures: number, make: (n: number) => Error = (n) => new Error(`failure ${n}`)): { work: () => Promise<string>; calls: () => number } {
  let calls = 0;
  return {
    work: () => (++calls <= failures ? Promise.reject(make(calls)) : Promise.resolve('done')),
    calls: () => calls,
  };
}

describe('backoffDelayMs', () => {
  it('when the backoff is exponential, then the wait doubles per failure (or grows by the factor) up to the cap', () => {
    const backoff = { firstMs: 100, maxMs: 1000 };
    expect([1, 2, 3, 4, 5, 6].map((n) => backoffDelayMs(backoff, n))).toEqual([100, 200, 400, 800, 1000, 1000]);
    expect([1, 2, 3].map((n) => backoffDelayMs({ firstMs: 1000, factor: 1.5 }, n))).toEqual([1000, 1500, 2250]);
  });

  it('when the backoff is linear, then the wait grows by the first per failure, up to the cap', () => {
    expect([1, 2, 3, 4].map((n) => backoffDelayMs({ kind: 'linear', firstMs: 2, maxMs: 7 }, n))).toEqual([2, 4, 6, 7]);
  });

  it('when the backoff is fixed, then every wait is the first', () => {
    expect([1, 2, 7].map((n) => backoffDelayMs({ kind: 'fixed', firstMs: 5000, factor: 3 }, n))).toEqual([5000, 5000, 5000]);
  });

  it('when the jitter is full, the wait is the draw times the wait; when half, it loses at most half', () => {
    expect(backoffDelayMs({ firstMs: 400, jitter: 'full' }, 2, () => 0.25)).toBe(200);
    expect(backoffDelayMs({ firstMs: 400, jitter: 'full' }, 2, () => 0)).toBe(0);
    expect(backoffDelayMs({ firstMs: 400, jitter: 'half' }, 2, () => 0.5)).toBe(600);
    expect(backoffDelayMs({ firstMs: 400, jitter: 'half' }, 2, () => 0)).toBe(800);
  });
});

describe('retry', () => {
  it('when the work fails and then succeeds, then its answer is returned after the backoff\'s waits', async () => {
    const { policy, waits } = recorded();
    const { work, calls } = failing(3);
    const told: string[] = [];
    await expect(retry(work, { ...policy, onRetry: (e, attempt, ms) => told.push(`${attempt}:${e.message}:${ms}`) })).resolves.toBe('done');
    expect(calls()).toBe(4);
    expect(waits).toEqual([100, 200, 400]);
    expect(told).toEqual(['1:failure 1:100', '2:failure 2:200', '3:failure 3:400']);
  });

  it('when the attempts run out, then the last failure is thrown, after exactly that many tries', async () => {
    const { policy, waits } = recorded({ attempts: 3 });
    const { work, calls } = failing(10);
    await expect(retry(work, policy)).rejects.toThrow('failure 3');
    expect(calls()).toBe(3);
    expect(waits).toEqual([100, 200]);
  });

  it('when a failure is not worth another try, then it is thrown at once, unchanged', async () => {
    const { policy, waits } = recorded({ retryIf: (e) => !e.message.endsWith('2') });
    const first = failing(5);
    await expect(retry(first.work, policy)).rejects.toThrow('failure 2');
    expect(first.calls()).toBe(2);
    expect(waits).toEqual([100]);
    const original = new Error('refused');
    await expect(retry(() => Promise.reject(original), { ...policy, retryIf: () => false })).rejects.toBe(original);
  });

  it('when the next try would start past withinMs, then the last failure is thrown instead of waiting', async () => {
    const { policy, waits } = recorded({ attempts: undefined, withinMs: 1000 });
    const { work, calls } = failing(100);
    await expect(retry(work, policy)).rejects.toThrow('failure 4');
    // 100 + 200 + 400 = 700 ms waited; the next wait (800) would end past 1000.
    expect(waits).toEqual([100, 200, 400]);
    expect(calls()).toBe(4);
  });

  it('when the signal aborts during a wait, then no further try starts and the failure is thrown', async () => {
    const controller = new AbortController();
    const { work, calls } = failing(10);
    const policy: RetryPolicy = { attempts: 10, backoff: { firstMs: 60_000 }, signal: controller.signal };
    // Without the abort ending the wait, the test runs past its timeout and fails.
    const outcome = retry(work, policy);
    setTimeout(() => controller.abort(), 20);
    await expect(outcome).rejects.toThrow('failure 1');
    expect(calls()).toBe(1);
  });

  it('when what is thrown is not an Error, then it is made one', async () => {
    const { policy } = recorded({ attempts: 1 });
    await expect(retry(() => Promise.reject(new Error('x')), policy)).rejects.toBeInstanceOf(Error);
    const thrown = await retry(() => {
      // A dependency that throws a string (some drivers do).
      // eslint-disable-next-line @typescript-eslint/only-throw-error
      throw 'text';
    }, policy).catch((e: unknown) => e);
    expect(thrown).toBeInstanceOf(Error);
  });
});

describe('sleep', () => {
  it('when the signal is already aborted, then it ends at once', async () => {
    const controller = new AbortController();
    controller.abort();
    // A wait of a minute would run past the test's timeout.
    await expect(sleep(60_000, controller.signal)).resolves.toBeUndefined();
  });
});
