import type { OutboxTables } from '../platform/bus/outbox';

/** Row types of the capacity module; they never leave the repository. Times are epoch milliseconds. */
export interface CapacityPoolTable {
  id: string;
  kind: string;
  target: string;
  capacity: number;
  min_units: number;
  max_units: number;
  /** JSON object of string labels. */
  labels: string;
  iac_stack: string | null;
  updated_at: number;
}

export interface CapacityEditionTable {
  name: string;
  /** Weight of its tenants' fair share of a pool's queue. */
  weight: number;
  updated_at: number;
}

export interface CapacityEditionLimitTable {
  edition: string;
  kind: string;
  max_units: number;
  max_ttl_seconds: number;
  max_wait_seconds: number;
}

export interface CapacityTenantTable {
  id: string;
  edition: string;
  updated_at: number;
}

/**
 * One row per unit of capacity: a pool's units (scope `pool:<pool>`) and a tenant's quota of a kind (scope
 * `quota:<kind>:<tenant>`). A grant claims free rows of both scopes; a row points at the lease that holds it.
 * Spreading the units over rows is what lets grants on one pool or tenant run side by side instead of queueing
 * on one counter row (see capacity.repository.ts).
 */
export interface CapacitySlotTable {
  scope: string;
  /** The lease holding the row, or '' (`FREE_SLOT`) when it is free. */
  lease_id: string;
  slot: number;
  /** 1 when the scope shrank below its use: the row goes away once free, and the scope grants nothing meanwhile. */
  retiring: number;
}

/**
 * SQLite only: one row per scope counting its units (see capacity-ledger.repository.ts). `fencing` is the pool's
 * last fencing token, bumped by the grant that takes its units.
 */
export interface CapacityScopeCounterTable {
  scope: string;
  capacity: number;
  used: number;
  fencing: number;
}

export interface CapacityLeaseTable {
  id: string;
  tenant_id: string;
  kind: string;
  pool_id: string;
  units: number;
  holder: string;
  fencing_token: number;
  ttl_seconds: number;
  granted_at: number;
  expires_at: number;
  renewed_at: number | null;
  ended_at: number | null;
  state: string;
  idempotency_key: string | null;
  /** sha-256 of what was asked (kind, units, pool, labels, holder): a reused idempotency key must ask the same. */
  request_digest: string | null;
}

/**
 * A lease request waiting in a pool's queue (a ticket), and what became of it. The lease it is granted gets the id
 * `lease_id`, chosen when it joins, and the idempotency key `idempotency_key`: two hosts that pick the same request
 * at once insert one lease, and the other's insert fails on the key.
 */
export interface CapacityLeaseRequestTable {
  id: string;
  tenant_id: string;
  kind: string;
  pool_id: string;
  units: number;
  ttl_seconds: number;
  holder: string;
  /** The caller's Idempotency-Key, or `lease-request:<id>`. */
  idempotency_key: string;
  request_digest: string;
  /** When the host received the request: waits are measured from here. */
  requested_at: number;
  /** It leaves the queue, unanswered, at this time. */
  deadline: number;
  /** `waiting`, `granted`, `canceled` or `expired` (its deadline passed). */
  state: string;
  lease_id: string;
  fencing_token: number | null;
  /** When it was granted, canceled or expired. */
  ended_at: number | null;
}

export interface CapacityTables extends OutboxTables {
  capacity_pools: CapacityPoolTable;
  capacity_editions: CapacityEditionTable;
  capacity_edition_limits: CapacityEditionLimitTable;
  capacity_tenants: CapacityTenantTable;
  capacity_slots: CapacitySlotTable;
  capacity_scope_counters: CapacityScopeCounterTable;
  capacity_leases: CapacityLeaseTable;
  capacity_lease_requests: CapacityLeaseRequestTable;
}
