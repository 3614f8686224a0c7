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
  /** Units held by active leases; changed only by conditional UPDATEs. */
  used: number;
  /** Last fencing token handed out; bumped in the same UPDATE that grants units, so tokens strictly increase. */
  fencing_counter: number;
  updated_at: number;
}

export interface CapacityEditionTable {
  name: string;
  updated_at: number;
}

export interface CapacityEditionLimitTable {
  edition: string;
  kind: string;
  max_units: number;
  max_ttl_seconds: number;
}

export interface CapacityTenantTable {
  id: string;
  edition: string;
  updated_at: number;
}

/** One row per tenant and kind: the units the tenant holds, changed only by conditional UPDATEs. */
export interface CapacityTenantUsageTable {
  tenant_id: string;
  kind: string;
  used: number;
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
}

export interface CapacityTables extends OutboxTables {
  capacity_pools: CapacityPoolTable;
  capacity_editions: CapacityEditionTable;
  capacity_edition_limits: CapacityEditionLimitTable;
  capacity_tenants: CapacityTenantTable;
  capacity_tenant_usage: CapacityTenantUsageTable;
  capacity_leases: CapacityLeaseTable;
}
