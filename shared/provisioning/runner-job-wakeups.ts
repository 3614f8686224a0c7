import { type ProvisioningContext } from './provisioning.context';

/**
 * Wake-ups within one host: a dispatched job wakes one waiting claim of its pool at once (claims of other hosts see it
 * at their next look), and the local host watches dispatches to start a pool's agents.
 */
const waitingClaims = new Map<string, Set<() => void>>();

/** Resolves after `ms`, or sooner when a dispatch wakes this claim or `waits` aborts (the host is stopping). */
export function dispatchedOrAfter(pool: string, ms: number, waits: AbortSignal | undefined): Promise<void> {
  return new Promise((done) => {
    const waiters = waitingClaims.get(pool) ?? new Set<() => void>();
    waitingClaims.set(pool, waiters);
    const wake = () => {
      clearTimeout(timer);
      waiters.delete(wake);
      waits?.removeEventListener('abort', wake);
      done();
    };
    const timer = setTimeout(wake, ms);
    waiters.add(wake);
    waits?.addEventListener('abort', wake);
  });
}

/**
 * One dispatched job wakes one waiting claim (the longest waiting): waking them all would have every other agent
 * race for the same job and lose. A claim that finds nothing after all waits on; the others still look on their own.
 */
export function wakeClaims(pool: string): void {
  const [first] = waitingClaims.get(pool) ?? [];
  first?.();
}

/** Per provisioning service (one per host): several hosts may run in one process (tests). */
export const dispatchWatchers = new WeakMap<ProvisioningContext, Set<(pool: string) => void>>();

/**
 * Calls `watch` with the agent pool of every job this host dispatches, until the returned function is called: the
 * local host starts a pool's agents on its first job (it cannot know the tenants in advance).
 */
export function watchDispatches(ctx: ProvisioningContext, watch: (pool: string) => void): () => void {
  const watchers = dispatchWatchers.get(ctx) ?? new Set();
  dispatchWatchers.set(ctx, watchers);
  watchers.add(watch);
  return () => watchers.delete(watch);
}
