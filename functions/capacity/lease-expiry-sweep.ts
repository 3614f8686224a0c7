import type { InvocationContext, Timer } from '@azure/functions';
import { getDeps } from '../runtime';
import { moduleApp } from '../app';
import { logOf } from '../log';

/** Every 15 s: expires leases past their expiry, frees their units and records `LeaseExpired` in the outbox. */
export async function leaseExpirySweep(_timer: Timer, context: InvocationContext): Promise<void> {
  const deps = await getDeps();
  const { expired, batches } = await deps.capacity.sweepExpired();
  if (expired > 0) logOf(context).info(`expired ${expired} leases in ${batches} batches`);
}

moduleApp('capacity').timer('leaseExpirySweep', { schedule: '*/15 * * * * *', handler: leaseExpirySweep });
