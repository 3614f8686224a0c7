import { ensureError } from '../errors/app-error';

/**
 * How long to wait before the next try. Example: `{ firstMs: 4, maxMs: 200, jitter: 'full' }` waits up to 4, 8,
 * 16 … 200 ms; `{ kind: 'fixed', firstMs: 5000 }` waits 5 s every time.
 */
export interface Backoff {
  /** `exponential` (default): `firstMs × factor^(failures − 1)`; `linear`: `firstMs × failures`; `fixed`: `firstMs`. */
  readonly kind?: 'exponential' | 'linear' | 'fixed';
  /** The wait after the first failure. Example: `1000`. */
  readonly firstMs: number;
  /** The growth per failure of an exponential backoff (default 2). Example: `1.5`. */
  readonly factor?: number;
  /** No wait is longer (before jitter). Example: `30_000`. */
  readonly maxMs?: number;
  /**
   * `none` (default): the wait itself; `full`: anywhere in [0, wait); `half`: in (wait / 2, wait], so that callers
   * that failed together (transactions, a pool's agents) do not come back together.
   */
  readonly jitter?: 'none' | 'full' | 'half';
}

/** The wait after `failures` failures in a row (1 for the first). `random` draws in [0, 1). */
export function backoffDelayMs(backoff: Backoff, failures: number, random: () => number = Math.random): number {
  const n = Math.max(1, failures);
  const growth = backoff.kind === 'fixed' ? 1 : backoff.kind === 'linear' ? n : (backoff.factor ?? 2) ** (n - 1);
  const delay = Math.min(backoff.maxMs ?? Infinity, backoff.firstMs * growth);
  if (backoff.jitter === 'full') return random() * delay;
  if (backoff.jitter === 'half') return delay * (1 - random() / 2);
  return delay;
}

/** A wait that ends early when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}

/**
 * Options of {@link retry}. Example: `{ attempts: 8, backoff: { firstMs: 4, maxMs: 200, jitter: 'full' }, retryIf: isContention }`.
 */
export interface RetryPolicy {
  /** Tries in all, the first included (default: no limit but `withinMs`). Example: `3`. */
  readonly attempts?: number;
  /** No try starts later than this long after the first (default: no limit but `attempts`). Example: `60_000`. */
  readonly withinMs?: number;
  /** The time `withinMs` is measured with (injected clock), in ms. Default `Date.now`. */
  readonly now?: () => number;
  readonly backoff: Backoff;
  /** Whether a failure is worth another try (default: every failure). Others are thrown at once, unchanged. */
  readonly retryIf?: (error: Error, attempt: number) => boolean;
  /** Told of each failure that will be tried again, with the wait before it. */
  readonly onRetry?: (error: Error, attempt: number, delayMs: number) => void;
  /** The wait (injected: tests run without waiting). Default {@link sleep}. */
  readonly sleep?: (ms: number, signal: AbortSignal | undefined) => Promise<void>;
  /** The jitter's draw in [0, 1) (injected: tests get known waits). */
  readonly random?: () => number;
  /** No try starts once it aborted: the last failure is thrown. */
  readonly signal?: AbortSignal;
}

/**
 * Runs `work` until it succeeds, a failure is not worth another try, the tries or the time run out, or `signal`
 * aborts. What ends it with a failure throws that failure (the last one), unchanged: a caller that wants another
 * error for tries that ran out checks `retryIf` on what it catches.
 */
export async function retry<T>(work: (attempt: number) => Promise<T>, policy: RetryPolicy): Promise<T> {
  const now = policy.now ?? Date.now;
  const giveUpAt = policy.withinMs === undefined ? Infinity : now() + policy.withinMs;
  for (let attempt = 1; ; attempt++) {
    try {
      return await work(attempt);
    } catch (thrown) {
      const error = ensureError(thrown);
      if (attempt >= (policy.attempts ?? Infinity) || policy.signal?.aborted || (policy.retryIf && !policy.retryIf(error, attempt))) throw error;
      const delayMs = backoffDelayMs(policy.backoff, attempt, policy.random);
      if (now() + delayMs > giveUpAt) throw error;
      policy.onRetry?.(error, attempt, delayMs);
      await (policy.sleep ?? sleep)(delayMs, policy.signal);
      if (policy.signal?.aborted) throw error;
    }
  }
}
