import { inTransaction } from '../platform/sql/transaction';
import type { NewEvent } from '../platform/bus/events';
import { recordSweep } from '../platform/telemetry/metrics';
import { appendEvents, type CapacityContext, type SweepResult } from './capacity.context';
import { expireDueLeases } from './capacity.repository';
import type { EndedLease } from './lease.repository';

const DEFAULT_SWEEP_BATCH = 500;

/** Expires every active lease past its expiry, in batches; frees their units and records `LeaseExpired`. */
export async function sweepExpired(ctx: CapacityContext, options: { batchSize?: number } = {}): Promise<SweepResult> {
  const batchSize = options.batchSize ?? DEFAULT_SWEEP_BATCH;
  let expired = 0;
  let batches = 0;
  for (;;) {
    const now = ctx.clock.now().getTime();
    const ended = await inTransaction(ctx.db, async (trx) => {
      const rows = await expireDueLeases(trx, ctx.dialect, ctx.ledger, now, batchSize);
      if (rows.length === 0) return rows;
      await appendEvents(ctx, trx, rows.map(leaseExpiredEvent));
      return rows;
    });
    if (ended.length > 0) batches++;
    expired += ended.length;
    if (ended.length < batchSize) {
      recordSweep(expired);
      return { expired, batches };
    }
  }
}

function leaseExpiredEvent(lease: EndedLease): NewEvent {
  return {
    type: 'LeaseExpired',
    subject: `leases/${lease.id}`,
    correlationId: lease.id,
    tenant: lease.tenant,
    data: {
      leaseId: lease.id,
      tenantId: lease.tenant,
      kind: lease.kind,
      pool: lease.pool,
      units: lease.units,
      holder: lease.holder,
      fencingToken: lease.fencingToken,
      expiresAt: new Date(lease.expiresAt).toISOString(),
    },
  };
}
