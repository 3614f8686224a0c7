import type { InvocationContext, Timer } from '@azure/functions';
import { getDeps } from '../runtime';
import { moduleApp } from '../app';
import { logOf } from '../log';

/**
 * Every minute: scans the environments whose own interval has come round (RuntimeCloud__Inventory__ScanIntervalSeconds,
 * 60 s at the least), a bounded number at once; an environment not due costs nothing but the one query for the due. Skips and failures are recorded with their reason by the scan itself; the count here is
 * for the log.
 */
export async function driftScan(_timer: Timer, context: InvocationContext): Promise<void> {
  const deps = await getDeps();
  const records = await deps.inventory.scanDue();
  if (records.length === 0) return;
  const by = (outcome: string) => records.filter((r) => r.outcome === outcome).length;
  logOf(context).info(`drift scan: ${records.length} environments, ${by('completed')} completed, ${by('failed')} failed, ${by('skipped')} skipped`);
}

moduleApp('inventory').timer('driftScan', { schedule: '0 * * * * *', handler: driftScan });
