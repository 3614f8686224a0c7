import { createHash } from 'node:crypto';
import type { CapacityKind, KindLimit } from './pool';

/**
 * Capacity leases: the pure model (no I/O). A lease holds `units` of one pool for a tenant until `expiresAt`;
 * its fencing token is drawn from a sequence while the grant holds the pool's units, so a lease granted after
 * another one ended has a larger token, and a holder that lost its lease can be told apart from the one that
 * holds it now.
 */
export const LEASE_STATES = ['active', 'released', 'expired'] as const;
export type LeaseState = (typeof LEASE_STATES)[number];

export interface Lease {
  readonly id: string;
  readonly tenant: string;
  readonly kind: CapacityKind;
  readonly pool: string;
  readonly units: number;
  readonly holder: string;
  readonly fencingToken: number;
  readonly grantedAt: Date;
  readonly expiresAt: Date;
  readonly renewedAt?: Date;
  /** The stored state; an `active` lease whose `expiresAt` has passed is expired (see `effectiveState`). */
  readonly state: LeaseState;
  readonly idempotencyKey?: string;
}

export interface LeaseRequest {
  readonly tenant: string;
  readonly kind: CapacityKind;
  readonly units: number;
  readonly ttlSeconds: number;
  readonly holder: string;
  readonly idempotencyKey?: string;
  /** A pool by id, or labels every candidate pool must carry; neither means any pool of the kind. */
  readonly pool?: string;
  readonly labels?: Readonly<Record<string, string>>;
}

/**
 * The state a lease is in at `now`. Expiry is decided by time, not by the sweep: a lease past its expiry can
 * no longer be renewed or released even while the sweep has not marked it yet.
 */
export function effectiveState(lease: Pick<Lease, 'state' | 'expiresAt'>, now: Date): LeaseState {
  return lease.state === 'active' && lease.expiresAt.getTime() <= now.getTime() ? 'expired' : lease.state;
}

/** Checks a requested TTL against the edition's limit for the kind; returns the problem, or undefined when allowed. */
export function ttlProblem(ttlSeconds: number, limit: KindLimit | undefined): string | undefined {
  if (!Number.isInteger(ttlSeconds) || ttlSeconds <= 0) return 'ttlSeconds must be a positive integer';
  if (!limit) return 'the edition grants no capacity of this kind';
  if (ttlSeconds > limit.maxTtlSeconds) return `ttlSeconds must not exceed ${limit.maxTtlSeconds} for this edition`;
  return undefined;
}

/**
 * Seconds until a refused request is worth retrying: until the soonest expiry of a lease that holds the units,
 * at least 1. When that expiry has passed already, the next sweep frees the units (it runs every 15 s).
 */
export function retryAfterSeconds(soonestExpiry: Date | undefined, now: Date, sweepIntervalSeconds = 15): number {
  if (!soonestExpiry) return sweepIntervalSeconds;
  const seconds = Math.ceil((soonestExpiry.getTime() - now.getTime()) / 1000);
  return seconds > 0 ? seconds : sweepIntervalSeconds;
}

/** Whether a renewal or release presents the token the lease was granted with. */
export function fencingMatches(lease: Pick<Lease, 'fencingToken'>, presented: number): boolean {
  return lease.fencingToken === presented;
}

/**
 * What a lease request asks for, as a digest: an idempotency key is bound to it, and the same key presented with a
 * different request is refused instead of answered with another request's lease (as payment APIs do).
 */
export function leaseRequestDigest(request: Pick<LeaseRequest, 'kind' | 'units' | 'pool' | 'labels' | 'holder'>): string {
  const labels = request.labels === undefined ? null : Object.entries(request.labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const canonical = JSON.stringify([request.kind, request.units, request.pool ?? null, labels, request.holder]);
  return createHash('sha256').update(canonical).digest('base64url');
}
