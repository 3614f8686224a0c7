/**
 * Pools, editions and tenants of the capacity module: the pure model (no I/O).
 * A pool is a set of interchangeable worker units of one kind on one target; an edition says how many units of
 * each kind a tenant may hold at once and for how long a lease may run.
 */
export const CAPACITY_KINDS = ['attempt', 'sandbox', 'build', 'browser-session', 'runner'] as const;
export type CapacityKind = (typeof CAPACITY_KINDS)[number];

export function isCapacityKind(value: string): value is CapacityKind {
  return (CAPACITY_KINDS as readonly string[]).includes(value);
}

export interface Pool {
  readonly id: string;
  readonly kind: CapacityKind;
  readonly target: string;
  /** Units that may be leased at once. Shrinking below `used` stops new grants; it never revokes leases. */
  readonly capacity: number;
  readonly min: number;
  readonly max: number;
  readonly labels: Readonly<Record<string, string>>;
  /**
   * The IaC stack that sizes this pool, `tenant/project/stack`; a size change on such a pool is requested through
   * provisioning.
   */
  readonly iacStack?: string;
  /** Units held by active leases (including expired ones the sweep has not reached yet). */
  readonly used: number;
}

/** What an administrator (or the seed file) says a pool is. */
export interface PoolSpec {
  readonly kind: CapacityKind;
  readonly target: string;
  readonly capacity: number;
  readonly min?: number;
  readonly max?: number;
  readonly labels?: Readonly<Record<string, string>>;
  readonly iacStack?: string;
}

/** Per-kind limits of an edition; a kind the edition does not list gets no capacity. */
export interface KindLimit {
  /** Units of this kind a tenant may hold at once. */
  readonly maxUnits: number;
  /** Longest lease (and renewal) of this kind. */
  readonly maxTtlSeconds: number;
  /** Longest a request of this kind may wait in a pool's queue; default `DEFAULT_MAX_WAIT_SECONDS`. */
  readonly maxWaitSeconds?: number;
}

/** How long a request may wait in a pool's queue when its edition does not say. */
export const DEFAULT_MAX_WAIT_SECONDS = 300;

export interface Edition {
  readonly name: string;
  readonly limits: Readonly<Partial<Record<CapacityKind, KindLimit>>>;
  /** Its tenants' weight in a pool queue's fair share (2 = twice the share of a tenant of weight 1); default 1. */
  readonly weight?: number;
}

export interface Tenant {
  readonly id: string;
  readonly edition: string;
}

export function freeUnits(pool: Pick<Pool, 'capacity' | 'used'>): number {
  return Math.max(0, pool.capacity - pool.used);
}

/** True when the pool carries every requested label with the same value. */
export function poolMatchesLabels(pool: Pick<Pool, 'labels'>, wanted: Readonly<Record<string, string>> | undefined): boolean {
  if (!wanted) return true;
  return Object.entries(wanted).every(([key, value]) => pool.labels[key] === value);
}

/** Bounds an administrator must respect: 0 ≤ min ≤ capacity ≤ max. Returns the problems found (empty when valid). */
export function poolSpecProblems(spec: PoolSpec): string[] {
  const min = spec.min ?? 0;
  const max = spec.max ?? spec.capacity;
  const problems: string[] = [];
  if (!Number.isInteger(spec.capacity) || spec.capacity < 0) problems.push('capacity must be a non-negative integer');
  if (min > spec.capacity) problems.push('min must not exceed capacity');
  if (spec.capacity > max) problems.push('capacity must not exceed max');
  return problems;
}

/** Whether a change of size must be requested from provisioning (the pool is sized by an IaC stack). */
export function needsResizeRequest(before: Pick<Pool, 'capacity'> | undefined, after: PoolSpec): boolean {
  return after.iacStack !== undefined && before !== undefined && before.capacity !== after.capacity;
}
