import { vi } from 'vitest';

/**
 * What `probe` answers once it answers something (not undefined), polled every 50 ms: for state that a host reaches
 * on its own (a run applied, an event published), with one overall timeout instead of a fixed wait.
 */
export function eventually<T>(probe: () => Promise<T | undefined>, timeout = 30_000): Promise<T> {
  return vi.waitFor(
    async () => {
      const value = await probe();
      if (value === undefined) throw new Error('not yet');
      return value;
    },
    { timeout, interval: 50 },
  );
}
