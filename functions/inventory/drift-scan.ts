import type { InvocationContext, Timer } from '@azure/functions';
import { getDeps } from '../runtime';
import { moduleApp } from '../app';
import { logOf } from '../log';

/**
 * Every 5 minutes: scans the environments whose interval has come round (RuntimeCloud__Inventory__ScanIntervalSeconds),
 * a bounded number at once. Skips and failures are recorded with their reason by the scan itself; the count here is
 * for the log.
 */
export async function driftScan(_timer: Timer, context: InvocationContext): Promise<void> {
  const deps = await getDeps();
  const records = await deps.inventory.scanDue();
  if (records.length === 0) return;
  const by = (outcome: string) => records.filter((r) => r.outcome === outcome).length;
  logOf(context).info(`drift scan: ${records.length} environments, ${by('completed')} completed, ${by('failed')} failed, ${by('skipped')} skipped`);
}

moduleApp('inventory').timer('driftScan', { schedule: '0 */5 * * * *', handler: driftScan });
