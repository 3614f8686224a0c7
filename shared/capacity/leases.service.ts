import type { TenantFilter } from '../platform/auth/auth';
import { AppError } from '../platform/errors/app-error';
import { decodeCursor, encodeCursor } from '../platform/http/cursor';
import { retryingContention } from '../platform/sql/transaction';
import { existingLease, fencingMismatch, leaseGone, tenantOfLease, type CapacityContext, type LeasePage, type ReleaseResult } from './capacity.context';
import { listLeases as listLeaseRows } from './lease.repository';
import { fencingMatches, type Lease, type LeaseState } from './lease';

/**
 * Releases a lease whose holder proves itself with the lease's fencing token; releasing it again is no error.
 * `pool`: the pool whose units this release gave back (its queue's turn).
 */
export async function release(ctx: CapacityContext, tenants: TenantFilter, id: string, fencingToken: number): Promise<ReleaseResult & { pool?: string }> {
  const now = ctx.clock.now().getTime();
  const tenant = await tenantOfLease(ctx, tenants, id);
  const ended = await retryingContention(() => ctx.ledger.release(ctx.db, tenant, id, fencingToken, now));
  if (ended) return { outcome: 'released', pool: ended.pool };
  const { lease, state } = await existingLease(ctx, tenant, id);
  // Only the holder may learn more: a wrong token is refused whatever state the lease is in.
  if (!fencingMatches(lease, fencingToken)) throw fencingMismatch(lease, fencingToken);
  if (state === 'released') return { outcome: 'already-released' };
  throw leaseGone(id, state);
}

export async function getLease(ctx: CapacityContext, tenants: TenantFilter, id: string): Promise<Lease> {
  return (await existingLease(ctx, await tenantOfLease(ctx, tenants, id), id)).lease;
}

/** A page of the tenants' leases, by id; a cursor this API did not make is refused with 400. */
export async function listLeases(ctx: CapacityContext, tenants: TenantFilter, query: { holder?: string; state?: LeaseState; limit: number; cursor?: string }): Promise<LeasePage> {
  const after = query.cursor === undefined ? undefined : decodeCursor(query.cursor);
  if (query.cursor !== undefined && after === undefined) {
    throw new AppError('REQUEST.INVALID_CURSOR', 'validation', 'the cursor is not one this API returned');
  }
  const rows = await listLeaseRows(ctx.db, ctx.dialect, tenants, {
    ...(query.holder !== undefined ? { holder: query.holder } : {}),
    ...(query.state !== undefined ? { state: query.state } : {}),
    ...(after !== undefined ? { after } : {}),
    limit: query.limit + 1,
    now: ctx.clock.now().getTime(),
  });
  const items = rows.slice(0, query.limit);
  const last = items[items.length - 1];
  return rows.length > query.limit && last ? { items, nextCursor: encodeCursor(last.id) } : { items };
}
