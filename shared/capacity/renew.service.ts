import type { TenantFilter } from '../platform/auth/auth';
import { ensureError } from '../platform/errors/app-error';
import { inTransaction, retryingContention } from '../platform/sql/transaction';
import { EPOCH_SPAN } from '../platform/sql/store-epoch';
import { isUniqueViolation } from '../platform/sql/dialect';
import { fencingMismatch, leaseGone, leaseNotFound, tenantOfLease, type CapacityContext, type LeaseHolding } from './capacity.context';
import { tenantLimit } from './capacity.repository';
import type { GrantOutcome } from './capacity-ledger.repository';
import { getLease, renewActiveLease } from './lease.repository';
import { effectiveState, ttlProblem, type Lease, type LeaseRequest } from './lease';
import { exhaustedRefusal, quotaRefusal, refuseUnfitPool } from './refusals.service';
import { sweepExpired } from './sweep.service';
import { problemError } from '../platform/errors/catalogue';
import { CapacityErrors } from './errors';

/**
 * Extends a lease whose holder proves itself with its fencing token, to `ttlSeconds` from now when given (within
 * the edition's longest TTL). In the recovery window after a restore, a lease the store does not know is
 * re-registered from `holding`.
 */
export async function renew(ctx: CapacityContext, tenants: TenantFilter, id: string, fencingToken: number, ttlSeconds?: number, holding?: LeaseHolding): Promise<Lease> {
  const now = ctx.clock.now().getTime();
  const tenant = await tenantOfLease(ctx, tenants, id);
  if (ttlSeconds !== undefined) {
    const lease = await getLease(ctx.db, tenant, id);
    if (!lease) return reRegister(ctx, tenants, id, fencingToken, ttlSeconds, holding);
    const view = await tenantLimit(ctx.db, ctx.ledger, lease.tenant, lease.kind);
    const problem = ttlProblem(ttlSeconds, view?.limit);
    if (problem) {
      throw problemError(CapacityErrors.ttlTooLong, problem, {
        kind: lease.kind,
        ...(view?.limit ? { maxTtlSeconds: view.limit.maxTtlSeconds } : {}),
      });
    }
  }
  const renewed = await inTransaction(ctx.db, (trx) => renewActiveLease(trx, ctx.dialect, tenant, id, fencingToken, now, ttlSeconds));
  if (renewed) return renewed;
  const lease = await getLease(ctx.db, tenant, id);
  if (!lease) return reRegister(ctx, tenants, id, fencingToken, ttlSeconds, holding);
  const state = effectiveState(lease, ctx.clock.now());
  if (state !== 'active') throw leaseGone(id, state);
  throw fencingMismatch(lease, fencingToken);
}

/**
 * Re-registers a lease the restored store does not know, for the caller's own tenant only: in the kind's recovery
 * window, for a token of an earlier epoch (granted before the restore), when the tenant's quota and the pool have
 * the units. Otherwise the lease is unknown, as outside a recovery.
 */
async function reRegister(ctx: CapacityContext, tenants: TenantFilter, id: string, fencingToken: number, ttlSeconds: number | undefined, holding: LeaseHolding | undefined): Promise<Lease> {
  const { db, ledger, recovery } = ctx;
  const now = ctx.clock.now().getTime();
  if (tenants.kind !== 'one' || holding === undefined || (await recovery.until(holding.kind, now)) === undefined) throw leaseNotFound(id);
  if (ttlSeconds === undefined) {
    throw problemError(CapacityErrors.ttlRequired, 're-registering a lease after a restore needs its ttlSeconds');
  }
  if (Math.floor(fencingToken / EPOCH_SPAN) >= (await recovery.epoch())) {
    throw problemError(CapacityErrors.fencingMismatch, 'only a lease granted before the store was restored can be re-registered', { presented: fencingToken });
  }
  const request: LeaseRequest = { tenant: tenants.tenant, ...holding, ttlSeconds };
  const lease: Omit<Lease, 'fencingToken'> = {
    id,
    tenant: tenants.tenant,
    ...holding,
    grantedAt: new Date(now),
    expiresAt: new Date(now + ttlSeconds * 1000),
    state: 'active',
  };
  let outcome: GrantOutcome;
  try {
    outcome = await retryingContention(() => ledger.grant(db, lease, ttlSeconds, null, fencingToken));
    // The restored store holds the units of leases that expired while it was down until the sweep ends them: a
    // holder re-registering should not wait for the sweep's next round.
    if (!('fencingToken' in outcome) && (await sweepExpired(ctx)).expired > 0) {
      outcome = await retryingContention(() => ledger.grant(db, lease, ttlSeconds, null, fencingToken));
    }
  } catch (thrown) {
    const error = ensureError(thrown);
    if (!isUniqueViolation(error)) throw error;
    // The same holder re-registered it meanwhile (a retry): renew that. Else the id is another tenant's.
    const renewed = await inTransaction(db, (trx) => renewActiveLease(trx, ctx.dialect, tenants.tenant, id, fencingToken, now, ttlSeconds));
    if (renewed) return renewed;
    throw problemError(CapacityErrors.leaseConflict, `lease ${id} cannot be re-registered`);
  }
  if ('fencingToken' in outcome) return { ...lease, fencingToken: outcome.fencingToken };
  if (outcome.shortOf === 'quota') throw (await quotaRefusal(ctx, request, now)).refusal;
  await refuseUnfitPool(ctx, holding.pool, holding.kind);
  throw await exhaustedRefusal(ctx, request, now, false);
}
