import { describe, expect, it } from 'vitest';
import { decodeCursor, effectiveState, encodeCursor, fencingMatches, fits, retryAfterSeconds, ttlProblem } from '../../shared/capacity/lease';
import { freeUnits, needsResizeRequest, poolMatchesLabels, poolSpecProblems } from '../../shared/capacity/pool';
import { aKindLimit, aLease, aPool, aPoolSpec } from '../support/builders';

const at = (iso: string) => new Date(iso);

describe('capacity model: quota and capacity', () => {
  it('when the units fit exactly under the limit, then they fit; one more does not', () => {
    expect(fits(8, 2, 10)).toBe(true);
    expect(fits(8, 3, 10)).toBe(false);
  });

  it('when zero or negative units are asked for, then they never fit', () => {
    expect(fits(0, 0, 10)).toBe(false);
    expect(fits(0, -1, 10)).toBe(false);
  });

  it('when a pool was shrunk below its use, then it has no free units (not a negative number)', () => {
    expect(freeUnits(aPool({ capacity: 5, used: 8 }))).toBe(0);
    expect(freeUnits(aPool({ capacity: 10, used: 3 }))).toBe(7);
  });

  it('when labels are requested, then only pools carrying all of them with the same values match', () => {
    const pool = aPool({ labels: { region: 'eu', gpu: 'yes' } });
    expect(poolMatchesLabels(pool, { region: 'eu' })).toBe(true);
    expect(poolMatchesLabels(pool, { region: 'us' })).toBe(false);
    expect(poolMatchesLabels(pool, { zone: 'a' })).toBe(false);
    expect(poolMatchesLabels(pool, undefined)).toBe(true);
  });

  it('when a pool spec breaks min ≤ capacity ≤ max, then each problem is named', () => {
    expect(poolSpecProblems(aPoolSpec({ capacity: 10, min: 0, max: 20 }))).toEqual([]);
    expect(poolSpecProblems(aPoolSpec({ capacity: 10, min: 11, max: 20 }))).toEqual(['min must not exceed capacity']);
    expect(poolSpecProblems(aPoolSpec({ capacity: 30, min: 0, max: 20 }))).toEqual(['capacity must not exceed max']);
  });

  it('when a pool with an IaC stack changes size, then a resize is requested; without a stack or size change, not', () => {
    expect(needsResizeRequest({ capacity: 10 }, aPoolSpec({ capacity: 12, iacStack: 'pools-dev' }))).toBe(true);
    expect(needsResizeRequest({ capacity: 10 }, aPoolSpec({ capacity: 10, iacStack: 'pools-dev' }))).toBe(false);
    expect(needsResizeRequest({ capacity: 10 }, aPoolSpec({ capacity: 12 }))).toBe(false);
    expect(needsResizeRequest(undefined, aPoolSpec({ capacity: 12, iacStack: 'pools-dev' }))).toBe(false);
  });
});

describe('capacity model: TTL bounds', () => {
  it("when the TTL is within the edition's maximum, then there is no problem; above it, there is", () => {
    const limit = aKindLimit({ maxTtlSeconds: 600 });
    expect(ttlProblem(600, limit)).toBeUndefined();
    expect(ttlProblem(601, limit)).toMatch(/must not exceed 600/);
  });

  it('when the TTL is not a positive integer or the edition lacks the kind, then that is the problem', () => {
    expect(ttlProblem(0, aKindLimit())).toMatch(/positive/);
    expect(ttlProblem(1.5, aKindLimit())).toMatch(/positive/);
    expect(ttlProblem(60, undefined)).toMatch(/no capacity/);
  });

  it('when the expiry has passed, then an active lease is effectively expired even before the sweep', () => {
    const lease = aLease({ expiresAt: at('2026-01-01T00:01:00Z') });
    expect(effectiveState(lease, at('2026-01-01T00:00:59.999Z'))).toBe('active');
    expect(effectiveState(lease, at('2026-01-01T00:01:00Z'))).toBe('expired');
    expect(effectiveState(aLease({ state: 'released' }), at('2030-01-01T00:00:00Z'))).toBe('released');
  });

  it('when capacity is refused, then Retry-After counts to the soonest expiry, or the sweep interval once it has passed', () => {
    const now = at('2026-01-01T00:00:00Z');
    expect(retryAfterSeconds(at('2026-01-01T00:00:41.2Z'), now)).toBe(42);
    expect(retryAfterSeconds(at('2025-12-31T23:59:59Z'), now)).toBe(15);
    expect(retryAfterSeconds(undefined, now)).toBe(15);
  });
});

describe('capacity model: fencing and cursors', () => {
  it('when the presented token is the granted one, then it matches; any other, not', () => {
    expect(fencingMatches(aLease({ fencingToken: 7 }), 7)).toBe(true);
    expect(fencingMatches(aLease({ fencingToken: 7 }), 6)).toBe(false);
  });

  it('when a cursor is encoded, then it decodes to the same id; a forged one is refused', () => {
    expect(decodeCursor(encodeCursor('lease_abc'))).toBe('lease_abc');
    expect(decodeCursor('!!!')).toBeUndefined();
  });
});
