/**
 * Capacity slots: the pure model (no I/O). A scope (a pool, or a tenant's quota of one kind) has a row per unit;
 * a grant claims free rows, a release frees them. The scope's capacity is the number of its live rows, so no
 * grant can pass it, and grants on one scope touch different rows instead of one shared counter.
 *
 * When a scope shrinks below what its leases hold, nothing is revoked: the held rows above the new capacity turn
 * `retiring`, and while any row of a scope is retiring the scope grants nothing (its use is at or above capacity).
 * Re-laying the scope (`planSlotLayout`) once leases have ended drops the retiring rows that came free.
 */

/** The `lease_id` of a free row in the store: empty rather than NULL, since it is part of the primary key. */
export const FREE_SLOT = '';

export function poolScope(pool: string): string {
  return `pool:${pool}`;
}

/** Kinds never contain `:`, so putting the kind first keeps every tenant id unambiguous. */
export function quotaScope(tenant: string, kind: string): string {
  return `quota:${kind}:${tenant}`;
}

export interface SlotRow {
  readonly slot: number;
  readonly leaseId: string | null;
  readonly retiring: boolean;
}

export interface SlotLayoutChange {
  /** Free rows to delete. */
  readonly remove: readonly number[];
  readonly setRetiring: readonly number[];
  readonly clearRetiring: readonly number[];
  /** New free rows to insert. */
  readonly add: readonly number[];
}

/**
 * What makes a scope's rows match `capacity`: `capacity` live rows (held ones first), the held rows beyond them
 * retiring, no free row beyond them. Lowest slot numbers stay live, so the same rows are kept on every re-lay.
 */
export function planSlotLayout(rows: readonly SlotRow[], capacity: number): SlotLayoutChange {
  const bySlot = [...rows].sort((a, b) => a.slot - b.slot);
  const held = bySlot.filter((r) => r.leaseId !== null);
  const free = bySlot.filter((r) => r.leaseId === null);
  const liveHeld = held.slice(0, capacity);
  const retiringHeld = held.slice(capacity);
  const keptFree = free.slice(0, Math.max(0, capacity - held.length));
  const newFree = Math.max(0, capacity - held.length - keptFree.length);
  const next = bySlot.reduce((max, r) => Math.max(max, r.slot + 1), 0);
  return {
    remove: free.slice(keptFree.length).map((r) => r.slot),
    setRetiring: retiringHeld.filter((r) => !r.retiring).map((r) => r.slot),
    clearRetiring: [...liveHeld, ...keptFree].filter((r) => r.retiring).map((r) => r.slot),
    add: Array.from({ length: newFree }, (_, i) => next + i),
  };
}

export function isEmptyChange(change: SlotLayoutChange): boolean {
  return change.remove.length + change.setRetiring.length + change.clearRetiring.length + change.add.length === 0;
}
