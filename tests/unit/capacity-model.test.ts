import { describe, expect, it } from 'vitest';
import { decodeCursor, encodeCursor } from '../../shared/platform/http/cursor';
import { effectiveState, fencingMatches, leaseRequestDigest, retryAfterSeconds, ttlProblem } from '../../shared/capacity/lease';
import { planSlotLayout, poolScope, quotaScope, type SlotRow } from '../../shared/capacity/slots';
import { freeUnits, needsResizeRequest, poolMatchesLabels, poolSpecProblems } from '../../shared/capacity/pool';
import { aKindLimit, aLease, aPool, aPoolSpec } from '../support/builders';

const at = (iso: string) => new Date(iso);

describe('capacity model: quota and capacity', () => {
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
    expect(needsResizeRequest({ capacity: 10 }, aPoolSpec({ capacity: 12, iacStack: 'team-a/worker-pool/pools-dev' }))).toBe(true);
    expect(needsResizeRequest({ capacity: 10 }, aPoolSpec({ capacity: 10, iacStack: 'team-a/worker-pool/pools-dev' }))).toBe(false);
    expect(needsResizeRequest({ capacity: 10 }, aPoolSpec({ capacity: 12 }))).toBe(false);
    expect(needsResizeRequest(undefined, aPoolSpec({ capacity: 12, iacStack: 'team-a/worker-pool/pools-dev' }))).toBe(false);
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

const free = (slot: number, retiring = false): SlotRow => ({ slot, leaseId: null, retiring });
const held = (slot: number, retiring = false): SlotRow => ({ slot, leaseId: `l${slot}`, retiring });

describe('capacity model: slot layout', () => {
  it('when a new scope is laid out, then it gets one free row per unit', () => {
    expect(planSlotLayout([], 3)).toEqual({ remove: [], setRetiring: [], clearRetiring: [], add: [0, 1, 2] });
  });

  it('when a scope grows, then rows are added after the highest slot', () => {
    expect(planSlotLayout([held(0), free(1), held(4)], 5)).toEqual({ remove: [], setRetiring: [], clearRetiring: [], add: [5, 6] });
  });

  it('when a scope shrinks above its use, then free rows go, highest first, and held rows stay', () => {
    expect(planSlotLayout([free(0), held(1), free(2), free(3)], 2)).toEqual({ remove: [2, 3], setRetiring: [], clearRetiring: [], add: [] });
  });

  it('when a scope shrinks below its use, then every free row goes and the held rows beyond the capacity retire', () => {
    expect(planSlotLayout([held(0), free(1), held(2), held(3)], 1)).toEqual({ remove: [1], setRetiring: [2, 3], clearRetiring: [], add: [] });
  });

  it('when retired rows have come free, then they go and the scope grants again up to its capacity', () => {
    // Capacity was cut to 2 while rows 0-3 were held (2 and 3 retired); 0 and 3 have been released since, and
    // the capacity is now 3: one free row stays, the retired free one goes, the still-held retired one is live again.
    expect(planSlotLayout([free(0), held(1), held(2, true), free(3, true)], 3)).toEqual({
      remove: [3],
      setRetiring: [],
      clearRetiring: [2],
      add: [],
    });
  });

  it('when a scope is laid out twice, then the second time changes nothing', () => {
    const rows = [held(0), free(1), held(2), held(3)];
    const change = planSlotLayout(rows, 2);
    const after = rows
      .filter((r) => !change.remove.includes(r.slot))
      .map((r) => ({ ...r, retiring: change.setRetiring.includes(r.slot) || (r.retiring && !change.clearRetiring.includes(r.slot)) }));
    expect(planSlotLayout(after, 2)).toEqual({ remove: [], setRetiring: [], clearRetiring: [], add: [] });
  });

  it('when scopes are named, then a pool and a quota never share a name, whatever the ids', () => {
    expect(poolScope('quota:attempt:t')).not.toBe(quotaScope('t', 'attempt'));
    expect(quotaScope('a:b', 'attempt')).not.toBe(quotaScope('b', 'attempt'));
    expect(quotaScope('build:t', 'attempt')).not.toBe(quotaScope('t', 'build'));
  });
});

describe('capacity model: idempotency digests', () => {
  it('when two requests ask for the same, then their digests match, whatever the label order and TTL', () => {
    const base = { kind: 'attempt' as const, units: 1, holder: 'w', labels: { a: '1', b: '2' } };
    expect(leaseRequestDigest(base)).toBe(leaseRequestDigest({ ...base, labels: { b: '2', a: '1' } }));
  });

  it('when kind, units, pool, labels or holder differ, then the digests differ', () => {
    const base = { kind: 'attempt' as const, units: 1, holder: 'w' };
    const digests = [
      base,
      { ...base, kind: 'build' as const },
      { ...base, units: 2 },
      { ...base, pool: 'p' },
      { ...base, labels: { a: '1' } },
      { ...base, holder: 'v' },
    ].map(leaseRequestDigest);
    expect(new Set(digests).size).toBe(digests.length);
  });
});
