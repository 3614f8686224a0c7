import type { OutboxTables } from '../platform/bus/outbox';

/** Row types of the provisioning module; they never leave the repository. Times are epoch milliseconds. */

/**
 * The lock that lets one run at a time act on a stack. It is a lease: a host that dies stops renewing it and it
 * lapses at `expires_at`, so another run takes it over without anyone stepping in.
 */
export interface ProvisioningStackLockTable {
  stack: string;
  holder_run: string;
  /** The host (instance) that took the lock for the run; for operators, and for telling hosts apart in logs. */
  holder_host: string;
  acquired_at: number;
  expires_at: number;
  /** Bumped on every acquisition: a holder that lost the lock meanwhile can be told apart from the current one. */
  version: number;
}

/** An operator breaking a stack lock, kept for the audit trail. */
export interface ProvisioningLockBreakTable {
  id: string;
  stack: string;
  holder_run: string;
  holder_host: string;
  broken_by: string;
  reason: string;
  broken_at: number;
}

export interface ProvisioningTables extends OutboxTables {
  provisioning_stack_locks: ProvisioningStackLockTable;
  provisioning_lock_breaks: ProvisioningLockBreakTable;
}
