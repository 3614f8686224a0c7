import type { Transaction } from 'kysely';
import type { TenantFilter } from '../platform/auth/auth';
import { appendToOutbox } from '../platform/bus/outbox';
import type { NewEvent } from '../platform/bus/events';
import { AppError } from '../platform/errors/app-error';
import type { SqlStore } from '../platform/sql/database';
import type { SqlDialect } from '../platform/sql/dialect';
import type { Clock, Ids } from '../platform/time/clock';
import { capacityDb, ledgerFor } from './capacity.repository';
import type { CapacityLedger } from './capacity-ledger.repository';
import type { CapacityTables } from './capacity.tables';
import { getLease, leaseTenant, type CapacityDb } from './lease.repository';
import { effectiveState, fencingMatches, type Lease, type LeaseState } from './lease';
import type { CapacityKind, Pool } from './pool';
import { recoveryWindow, type RecoveryWindow } from './recovery-window.service';
import { TicketWaiters } from './lease-queue-waiters';
import { problemError } from '../platform/errors/catalogue';
import { CapacityErrors } from './errors';
import type { LeaseCertificates } from './lease-certificate.service';

export type AcquireResult = { readonly outcome: 'granted' | 'existing'; readonly lease: Lease };
export type ReleaseResult = { readonly outcome: 'released' | 'already-released' };

export interface LeasePage {
  readonly items: readonly Lease[];
  readonly nextCursor?: string;
}

export interface CapacitySummary {
  readonly kinds: readonly { kind: CapacityKind; capacity: number; used: number; free: number }[];
  readonly pools: readonly (Pool & { free: number })[];
  readonly tenants: readonly {
    tenant: string;
    edition: string;
    usage: readonly { kind: string; used: number; limit: number | null }[];
  }[];
}

export interface SweepResult {
  readonly expired: number;
  readonly batches: number;
}

/** What a holder re-registering a lease after a restore says it holds. */
export type LeaseHolding = Pick<Lease, 'kind' | 'pool' | 'units' | 'holder'>;

export interface CapacityServiceOptions {
  readonly store: SqlStore;
  readonly clock: Clock;
  readonly ids: Ids;
  /** Signs a certificate of each lease granted or renewed; none: leases come without certificates. */
  readonly certificates?: LeaseCertificates;
}

/**
 * What every capacity use case works with: the store of pools, editions, tenants and leases, the slot ledger over
 * it, the recovery window after a restore, the clock and ids. Built once per host by `createCapacityService`; the
 * use case files (acquire, renew, leases, sweep, administration `.service.ts`) take it first.
 */
export interface CapacityContext {
  readonly db: CapacityDb;
  readonly dialect: SqlDialect;
  readonly ledger: CapacityLedger;
  readonly recovery: RecoveryWindow;
  readonly clock: Clock;
  readonly ids: Ids;
  /** This host's callers waiting on lease requests in a pool's queue. */
  readonly waiters: TicketWaiters;
}

export function createCapacityContext({ store, clock, ids }: CapacityServiceOptions): CapacityContext {
  return { db: capacityDb(store.db), dialect: store.dialect, ledger: ledgerFor(store), recovery: recoveryWindow(store, clock), clock, ids, waiters: new TicketWaiters() };
}

export function nowOf(ctx: CapacityContext): number {
  return ctx.clock.now().getTime();
}

/** Writes events to the outbox in the caller's transaction. */
export async function appendEvents(ctx: CapacityContext, trx: Transaction<CapacityTables>, events: readonly NewEvent[]): Promise<void> {
  await appendToOutbox(trx, events, ctx.clock, ctx.ids);
}

export function leaseNotFound(id: string): AppError {
  return problemError(CapacityErrors.leaseNotFound, `lease ${id} does not exist`);
}

export function fencingMismatch(lease: Lease, presented: number): AppError {
  const message = fencingMatches(lease, presented) ? 'the lease changed meanwhile' : 'the fencing token is not the one this lease was granted with';
  return problemError(CapacityErrors.fencingMismatch, message, { presented });
}

export function leaseGone(id: string, state: LeaseState): AppError {
  return problemError(CapacityErrors.leaseGone, `lease ${id} is ${state}`, { state });
}

/** The tenant whose lease the caller acts on: its own, or for a caller of all tenants, the lease's. */
export async function tenantOfLease(ctx: CapacityContext, tenants: TenantFilter, id: string): Promise<string> {
  if (tenants.kind === 'one') return tenants.tenant;
  const tenant = await leaseTenant(ctx.db, id);
  if (tenant === undefined) throw leaseNotFound(id);
  return tenant;
}

/** The tenant's lease and its state now; another tenant's lease is indistinguishable from a missing one. */
export async function existingLease(ctx: CapacityContext, tenant: string, id: string): Promise<{ lease: Lease; state: LeaseState }> {
  const lease = await getLease(ctx.db, tenant, id);
  if (!lease) throw leaseNotFound(id);
  return { lease, state: effectiveState(lease, ctx.clock.now()) };
}
