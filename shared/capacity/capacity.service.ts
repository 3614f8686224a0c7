import { retryingContention } from '../platform/sql/transaction';
import { tenantExists } from './capacity.repository';
import type { TenantFilter } from '../platform/auth/auth';
import { acquire } from './acquire.service';
import { applySeed, listEditions, putEdition, putPool, putTenant, summary } from './administration.service';
import {
  createCapacityContext,
  type AcquireResult,
  type CapacityServiceOptions,
  type CapacitySummary,
  type LeaseHolding,
  type LeasePage,
  type ReleaseResult,
  type SweepResult,
} from './capacity.context';
import type { CapacitySeed } from './capacity.seed';
import { getLease, listLeases, release } from './leases.service';
import type { Lease, LeaseRequest, LeaseState } from './lease';
import type { Edition, Pool, PoolSpec, Tenant } from './pool';
import { renew } from './renew.service';
import { sweepExpired } from './sweep.service';

export type { AcquireResult, CapacityServiceOptions, CapacitySummary, LeaseHolding, LeasePage, ReleaseResult, SweepResult };

/** The capacity use cases; built once per host by `createDeps`. */
export interface CapacityService {
  acquire(request: LeaseRequest): Promise<AcquireResult>;
  /**
   * Extends a lease. In the recovery window after a restore, a lease the store does not know is re-registered from
   * `holding` (what its holder says it holds) with its fencing token, if it was granted before the restore and
   * the capacity allows; `ttlSeconds` is then required.
   */
  renew(tenants: TenantFilter, id: string, fencingToken: number, ttlSeconds?: number, holding?: LeaseHolding): Promise<Lease>;
  /** Releases a lease whose holder proves itself with the lease's fencing token. */
  release(tenants: TenantFilter, id: string, fencingToken: number): Promise<ReleaseResult>;
  getLease(tenants: TenantFilter, id: string): Promise<Lease>;
  listLeases(tenants: TenantFilter, query: { holder?: string; state?: LeaseState; limit: number; cursor?: string }): Promise<LeasePage>;
  summary(tenants: TenantFilter): Promise<CapacitySummary>;
  putPool(id: string, spec: PoolSpec): Promise<{ created: boolean; pool: Pool; resizeRequested: boolean }>;
  putEdition(edition: Edition): Promise<{ created: boolean }>;
  putTenant(tenant: Tenant): Promise<{ created: boolean }>;
  /** Whether the installation has the tenant (the other modules ask: tenants are administered here). */
  knowsTenant(tenant: string): Promise<boolean>;
  listEditions(): Promise<Edition[]>;
  /** Expires every active lease past its expiry, in batches; frees their units and records `LeaseExpired`. */
  sweepExpired(options?: { batchSize?: number }): Promise<SweepResult>;
  /** Upserts the editions, then the tenants and pools of a seed file; running it again changes nothing. */
  applySeed(seed: CapacitySeed): Promise<void>;
}

/**
 * The capacity use cases, each in a file of its own flow (acquire, renew, leases, sweep, administration
 * `.service.ts`, with the refusals' explanations in refusals.service.ts) over one `CapacityContext` (capacity.context.ts).
 */
export function createCapacityService(options: CapacityServiceOptions): CapacityService {
  const ctx = createCapacityContext(options);
  return {
    acquire: (request) => acquire(ctx, request),
    renew: (tenants, id, fencingToken, ttlSeconds, holding) => renew(ctx, tenants, id, fencingToken, ttlSeconds, holding),
    release: (tenants, id, fencingToken) => release(ctx, tenants, id, fencingToken),
    getLease: (tenants, id) => getLease(ctx, tenants, id),
    listLeases: (tenants, query) => listLeases(ctx, tenants, query),
    summary: (tenants) => summary(ctx, tenants),
    putPool: (id, spec) => putPool(ctx, id, spec),
    putEdition: (edition) => putEdition(ctx, edition),
    putTenant: (tenant) => putTenant(ctx, tenant),
    knowsTenant: (tenant) => retryingContention(() => tenantExists(ctx.db, tenant)),
    listEditions: () => listEditions(ctx),
    sweepExpired: (options) => sweepExpired(ctx, options),
    applySeed: (seed) => applySeed(ctx, seed),
  };
}
