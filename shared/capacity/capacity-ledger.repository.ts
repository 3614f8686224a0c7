import type { Transaction } from 'kysely';
import type { Lease } from './lease';
import type { CapacityKind } from './pool';
import type { CapacityTables } from './capacity.tables';
import type { CapacityDb, CapacityExecutor, EndedLease } from './lease.repository';

/**
 * How the units of pools and quotas are counted: a ledger. Each pool and each tenant's quota of a kind is a
 * *scope* (see slots.ts for the names). Two ledgers keep the same promises (a grant takes units of both scopes or
 * none, never more than a scope's capacity; a lease's units come back once):
 *
 * - `slotLedger` (capacity-slots.repository.ts), on PostgreSQL and Azure SQL: a row per unit, claimed with SKIP
 *   LOCKED / READPAST, so grants on one pool or tenant from many hosts do not queue on one row.
 * - `counterLedger` (capacity-counters.repository.ts), on SQLite: a counter row per scope. SQLite lets one writer
 *   in at a time anyway, so a counter costs nothing in concurrency there and writes the fewest pages.
 */
export interface CapacityLedger {
  /**
   * Takes the lease's units from its tenant's quota and its pool and inserts it, all or nothing, with the pool's next
   * fencing token, or with `reRegistered`: the token of a lease granted before a restore that its holder re-registers.
   */
  grant(db: CapacityDb, lease: Omit<Lease, 'fencingToken'>, ttlSeconds: number, requestDigest: string | null, reRegistered?: number): Promise<GrantOutcome>;
  /** Ends a tenant's active lease presented with its fencing token and gives its units back; undefined when it was not so. */
  release(db: CapacityDb, tenant: string, id: string, fencingToken: number, now: number): Promise<EndedLease | undefined>;
  /** Gives back the units of leases the sweep ended, inside its transaction. */
  free(trx: CapacityExecutor, leases: readonly EndedLease[]): Promise<void>;
  /** Creates a scope or sets its capacity; shrinking below use revokes nothing. Runs in the owner's transaction. */
  resize(trx: Transaction<CapacityTables>, scope: string, capacity: number): Promise<void>;
  /** Brings a scope up to date with its owner's capacity again (after a shrink below use); locks the owner first. */
  relay(trx: Transaction<CapacityTables>, owner: ScopeOwner): Promise<void>;
  /** A scope's use, read without locks (for refusals). */
  use(db: CapacityExecutor, scope: string): Promise<ScopeUse>;
  /** Units held per scope, for the scopes given (all when undefined). */
  held(db: CapacityExecutor, scopes?: readonly string[]): Promise<Map<string, number>>;
}

export type GrantOutcome = { readonly fencingToken: number } | { readonly shortOf: 'quota' | 'pool' };

/** One `grant` call, as the ledgers batch them (see platform/sql/batcher.ts). */
export interface GrantRequest {
  readonly db: CapacityDb;
  readonly lease: Omit<Lease, 'fencingToken'>;
  readonly ttlSeconds: number;
  readonly requestDigest: string | null;
  /** The fencing token of a lease re-registered after a restore (see `CapacityLedger.grant`). */
  readonly reRegistered?: number;
}

/** One `release` call, as the ledgers batch them. */
export interface ReleaseRequest {
  readonly db: CapacityDb;
  readonly tenant: string;
  readonly id: string;
  readonly fencingToken: number;
  readonly now: number;
}

/**
 * The batch a grant joins: `shape` names the grants that may share one (per ledger). A grant with an idempotency
 * key, and a re-registration (whose lease id a concurrent one may insert first), go alone, since a duplicate key
 * fails the whole batch's statement or transaction.
 */
export function grantBatchKey(request: GrantRequest, shape: string): string {
  if (request.reRegistered !== undefined) return `alone:${request.lease.id}:${++reRegistrations}`;
  return request.lease.idempotencyKey === undefined ? shape : `alone:${request.lease.id}`;
}

/** Two re-registrations of one lease (a holder's retry) keep apart: each goes alone. */
let reRegistrations = 0;

/** What a scope's units say: free ones, held ones, and whether it is above its capacity waiting to be re-laid. */
export interface ScopeUse {
  readonly free: number;
  readonly held: number;
  readonly retiring: boolean;
}

export type ScopeOwner = { readonly pool: string } | { readonly tenant: string; readonly kind: CapacityKind };
