import { longestLeaseTtlSeconds, capacityDb } from './capacity/capacity.repository';
import { inventoryDb, markEveryEnvironmentStale } from './inventory/inventory.repository';
import type { SqlStore } from './platform/sql/database';
import { beginRecovery, readStoreEpoch } from './platform/sql/store-epoch';
import { inTransaction } from './platform/sql/transaction';
import type { Clock } from './platform/time/clock';

/** What a host found to recover after a restore, when it was the one to begin it. */
export interface StoreRecovery {
  readonly epoch: number;
  readonly environmentsStale: number;
  readonly window: { readonly startedAt: Date; readonly until: Date };
}

/**
 * The step after a restore (the seed: desired state is in Git, observed state is re-inventoried, leases expire and
 * are re-granted), run by every host as it starts and done by the first that finds a restore pending:
 * - every environment is stale until a scan after now observes it, and due for one now;
 * - capacity opens a recovery window of one longest lease TTL: until it ends, holders of leases the backup does not
 *   know re-register them (renew with their fencing token and what they hold), and new grants wait, so no grant
 *   takes units a holder the store forgot still uses (capacity renew.service.ts).
 * Both in one transaction, so no host sees the window open over environments still shown as observed.
 */
export async function recoverAfterRestore(store: SqlStore, clock: Clock): Promise<StoreRecovery | undefined> {
  const { epoch, recoveryPending, restoredAt } = await readStoreEpoch(store.db);
  if (!recoveryPending) return undefined;
  const startedAt = clock.now();
  const until = new Date(startedAt.getTime() + (await longestLeaseTtlSeconds(capacityDb(store.db))) * 1000);
  const reason = `the store was restored from a backup${restoredAt ? ` (recorded ${restoredAt.toISOString()})` : ''}: observations since the backup are lost`;
  return inTransaction(store.db, async (trx) => {
    if (!(await beginRecovery(trx, { at: startedAt, until }))) return undefined;
    const environmentsStale = await markEveryEnvironmentStale(inventoryDb(trx), startedAt.getTime(), reason);
    return { epoch, environmentsStale, window: { startedAt, until } };
  });
}
