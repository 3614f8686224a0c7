import { ensureError } from '../platform/errors/app-error';
import type { SqlStore } from '../platform/sql/database';
import { readStoreEpoch } from '../platform/sql/store-epoch';
import type { Clock } from '../platform/time/clock';
import { capacityDb, longestLeaseTtlSeconds } from './capacity.repository';
import { CAPACITY_KINDS, type CapacityKind } from './pool';
import { problemError } from '../platform/errors/catalogue';
import { CapacityErrors } from './errors';

/**
 * Capacity's recovery window after a restore of the store (opened by shared/store-restore.ts): per kind, from the
 * start of the recovery for the longest TTL of the kind any edition allows (no lease of the kind the store forgot
 * lives longer), within the window the recovery opened. While a kind's window lasts, holders re-register the leases
 * the store does not know and new grants wait. Read from the store once: it is restored only while no host runs.
 */
export interface RecoveryWindow {
  /** The store's epoch. */
  epoch(): Promise<number>;
  /** The end of a kind's window (epoch ms) while it lasts at `now`; undefined otherwise. */
  until(kind: CapacityKind, now: number): Promise<number | undefined>;
  /** Refuses a new grant of a kind while its window lasts: 503 CAPACITY.RECOVERING with Retry-After. */
  refuseGrants(kind: CapacityKind): Promise<void>;
}

export function recoveryWindow(store: SqlStore, clock: Clock): RecoveryWindow {
  let state: Promise<{ epoch: number; until: Map<CapacityKind, number> }> | undefined;
  // Once read: whether the store had a window at all (most hosts never see one; their grants skip the look).
  let hadWindow: boolean | undefined;
  const read = () => {
    state ??= (async () => {
      const { epoch, recovery } = await readStoreEpoch(store.db);
      const until = new Map<CapacityKind, number>();
      for (const kind of recovery ? CAPACITY_KINDS : []) {
        const longest = recovery!.startedAt.getTime() + (await longestLeaseTtlSeconds(capacityDb(store.db), kind)) * 1000;
        until.set(kind, Math.min(recovery!.until.getTime(), longest));
      }
      hadWindow = until.size > 0;
      return { epoch, until };
    })().catch((thrown: unknown) => {
      state = undefined;
      throw ensureError(thrown);
    });
    return state;
  };
  const window: RecoveryWindow = {
    epoch: async () => (await read()).epoch,
    async until(kind, now) {
      const until = (await read()).until.get(kind);
      return until !== undefined && now < until ? until : undefined;
    },
    async refuseGrants(kind) {
      if (hadWindow === false) return;
      const now = clock.now().getTime();
      const until = await window.until(kind, now);
      if (until === undefined) return;
      throw problemError(CapacityErrors.recovering, `the store was restored from a backup: until ${new Date(until).toISOString()} holders re-register the ${kind} leases it does not know, and new grants wait`,
        { kind, recoveringUntil: new Date(until).toISOString(), retryAfterSeconds: Math.ceil((until - now) / 1000) },
      );
    },
  };
  return window;
}
