import type { JSONWebKeySet } from 'jose';
import { certificateKeys, certifyLease } from './lease-certificate.service';
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
import { queueDepth } from './lease-requests.repository';
import { acquireOrWait, admit, admitAll, admitIfWaiting, cancelTicket, getTicket, queueView, ticketsLeftQueue, type QueueView, type TicketView, type WaitingRequest, type WaitResult } from './lease-queue.service';

export type { AcquireResult, CapacityServiceOptions, CapacitySummary, LeaseHolding, LeasePage, QueueView, ReleaseResult, SweepResult, TicketView, WaitingRequest, WaitResult };

/** The capacity use cases; built once per host by `createDeps`. */
export interface CapacityService {
  acquire(request: LeaseRequest): Promise<AcquireResult>;
  /** A grant now, or a place in the pool's queue for up to `waitSeconds` (lease-queue.service.ts). */
  acquireOrWait(request: WaitingRequest): Promise<WaitResult>;
  /** A lease request in a queue, as it stands; held up to `waitSeconds` until it leaves the queue. */
  getLeaseRequest(tenants: TenantFilter, id: string, waitSeconds?: number): Promise<TicketView>;
  /** Takes a waiting lease request out of its queue. */
  cancelLeaseRequest(tenants: TenantFilter, id: string): Promise<TicketView>;
  /** Every pool's queue the caller may see. */
  queue(tenants: TenantFilter): Promise<QueueView>;
  /** Lease requests waiting per pool and tenant (the queue depth gauge). */
  queueDepth(): Promise<{ pool: string; tenant: string; waiting: number }[]>;
  /** Stops this host's polling for its waiting callers. */
  close(): void;
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
  /** A lease certificate of an active lease (lease-certificate.service.ts); undefined when not active or none are issued. */
  certify(lease: Lease): Promise<string | undefined>;
  /** The public keys certificates are checked with; 404 `CAPACITY.CERTIFICATES_OFF` on a host that issues none. */
  certificateKeys(): Promise<JSONWebKeySet>;
}

/**
 * The capacity use cases, each in a file of its own flow (acquire, renew, leases, sweep, administration
 * `.service.ts`, with the refusals' explanations in refusals.service.ts) over one `CapacityContext` (capacity.context.ts).
 */
export function createCapacityService(options: CapacityServiceOptions): CapacityService {
  const ctx = createCapacityContext(options);
  ctx.waiters.serve({ done: (ids) => ticketsLeftQueue(ctx, ids), admit: (pool) => admit(ctx, pool) });
  // Whatever may have freed units hands them to the queue before it answers (released, expired, resized, re-sized quotas).
  const thenAdmit = async <T>(work: Promise<T>, pool?: string): Promise<T> => {
    const result = await work;
    await (pool === undefined ? admitAll(ctx) : admit(ctx, pool));
    return result;
  };
  return {
    acquire: (request) => acquire(ctx, request),
    acquireOrWait: (request) => acquireOrWait(ctx, request),
    getLeaseRequest: (tenants, id, waitSeconds) => getTicket(ctx, tenants, id, waitSeconds),
    cancelLeaseRequest: (tenants, id) => cancelTicket(ctx, tenants, id),
    queue: (tenants) => queueView(ctx, tenants),
    queueDepth: () => queueDepth(ctx.db),
    close: () => ctx.waiters.close(),
    renew: (tenants, id, fencingToken, ttlSeconds, holding) => renew(ctx, tenants, id, fencingToken, ttlSeconds, holding),
    release: async (tenants, id, fencingToken) => {
      const { outcome, pool } = await release(ctx, tenants, id, fencingToken);
      if (pool !== undefined) await admitIfWaiting(ctx, pool);
      return { outcome };
    },
    getLease: (tenants, id) => getLease(ctx, tenants, id),
    listLeases: (tenants, query) => listLeases(ctx, tenants, query),
    summary: (tenants) => summary(ctx, tenants),
    putPool: (id, spec) => thenAdmit(putPool(ctx, id, spec), id),
    putEdition: (edition) => thenAdmit(putEdition(ctx, edition)),
    putTenant: (tenant) => thenAdmit(putTenant(ctx, tenant)),
    knowsTenant: (tenant) => retryingContention(() => tenantExists(ctx.db, tenant)),
    listEditions: () => listEditions(ctx),
    sweepExpired: (options) => thenAdmit(sweepExpired(ctx, options)),
    applySeed: (seed) => applySeed(ctx, seed),
    certify: (lease) => (options.certificates ? certifyLease(options.certificates, ctx.clock, lease) : Promise.resolve(undefined)),
    certificateKeys: () => certificateKeys(options.certificates),
  };
}
