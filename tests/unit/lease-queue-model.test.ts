import { describe, expect, it } from 'vitest';
import { AGING_SECONDS, estimateGrant, fairOrder, tenantShare, ticketState, waitReason, type ShareInputs, type Ticket } from '../../shared/capacity/lease-queue';

const NOW = new Date('2026-12-07T10:00:00Z');
let serial = 0;

function ticket(tenant: string, overrides: Partial<Ticket> = {}): Ticket {
  serial++;
  return {
    id: `lreq_${String(serial).padStart(4, '0')}`,
    tenant,
    kind: 'attempt',
    pool: 'p',
    units: 1,
    ttlSeconds: 60,
    holder: 'h',
    idempotencyKey: `k${serial}`,
    requestDigest: 'd',
    requestedAt: NOW,
    deadline: new Date(NOW.getTime() + 300_000),
    state: 'waiting',
    leaseId: `lease_${serial}`,
    ...overrides,
  };
}

function inputs(held: Record<string, Record<string, number>>, capacity: Record<string, number>, weight: Record<string, number> = {}): ShareInputs {
  return {
    held: new Map(Object.entries(held).map(([tenant, kinds]) => [tenant, new Map(Object.entries(kinds))])),
    capacity: new Map(Object.entries(capacity)),
    weight: new Map(Object.entries(weight)),
  };
}

const tenantsOf = (order: readonly Ticket[]) => order.map((t) => t.tenant);

describe('lease queue: fair order', () => {
  it('when tenants of weights 1:1:2 each queue many requests, then the order hands out units in proportion 1:1:2', () => {
    const waiting = ['a', 'b', 'c'].flatMap((tenant) => Array.from({ length: 40 }, () => ticket(tenant)));
    const order = fairOrder(waiting, inputs({}, { attempt: 40 }, { a: 1, b: 1, c: 2 }), NOW);
    const first40 = tenantsOf(order.slice(0, 40));
    expect(first40.filter((t) => t === 'a')).toHaveLength(10);
    expect(first40.filter((t) => t === 'b')).toHaveLength(10);
    expect(first40.filter((t) => t === 'c')).toHaveLength(20);
  });

  it('when tenants of weights 1:1:2 hold a pool 2:1:2 and one unit frees, then it goes to the heavier tenant, even behind an older ticket', () => {
    // Shares before a grant tie (1/6 against 2/6/2); with the grant, the heavier tenant's is the smaller (3/6/2 < 2/6).
    const older = new Date(NOW.getTime() - 5_000);
    const waiting = [ticket('a', { requestedAt: older }), ticket('b', { requestedAt: older }), ticket('c')];
    const order = fairOrder(waiting, inputs({ a: { attempt: 2 }, b: { attempt: 1 }, c: { attempt: 2 } }, { attempt: 6 }, { a: 1, b: 1, c: 2 }), NOW);
    expect(order[0]?.tenant).toBe('c');
  });

  it('when a tenant already holds more than its share, then the others go first until their shares catch up', () => {
    const waiting = [ticket('big'), ticket('small'), ticket('small'), ticket('big')];
    const order = fairOrder(waiting, inputs({ big: { attempt: 4 } }, { attempt: 10 }), NOW);
    expect(tenantsOf(order)).toEqual(['small', 'small', 'big', 'big']);
  });

  it('when a tenant holds several kinds, then its dominant share (the largest fraction of any kind) decides', () => {
    // a holds 1/10 of attempts but 8/10 of builds: its dominant share is 0.8; b holds 3/10 of attempts.
    const waiting = [ticket('a'), ticket('b')];
    const order = fairOrder(waiting, inputs({ a: { attempt: 1, build: 8 }, b: { attempt: 3 } }, { attempt: 10, build: 10 }), NOW);
    expect(tenantsOf(order)).toEqual(['b', 'a']);
    expect(tenantShare(inputs({ a: { attempt: 1, build: 8 } }, { attempt: 10, build: 10 }, { a: 2 }), 'a')).toBeCloseTo(0.4);
  });

  it('when one tenant queues several requests, then they go first in, first out', () => {
    const first = ticket('a', { requestedAt: new Date(NOW.getTime() - 3000) });
    const second = ticket('a', { requestedAt: new Date(NOW.getTime() - 2000) });
    const third = ticket('a', { requestedAt: new Date(NOW.getTime() - 1000) });
    expect(fairOrder([third, first, second], inputs({}, { attempt: 10 }), NOW)).toEqual([first, second, third]);
  });

  it('when a tenant far above its share has waited long enough, then age puts it ahead of a newcomer: nothing starves', () => {
    const old = ticket('busy', { requestedAt: new Date(NOW.getTime() - AGING_SECONDS * 1000) });
    const fresh = ticket('idle');
    // busy holds 0.9 of the pool; having waited AGING_SECONDS lowers its share by 1, below idle's 0.
    expect(tenantsOf(fairOrder([fresh, old], inputs({ busy: { attempt: 9 } }, { attempt: 10 }), NOW))).toEqual(['busy', 'idle']);
    // A moment of waiting is not enough.
    const recent = ticket('busy', { requestedAt: new Date(NOW.getTime() - 10_000) });
    expect(tenantsOf(fairOrder([fresh, recent], inputs({ busy: { attempt: 9 } }, { attempt: 10 }), NOW))).toEqual(['idle', 'busy']);
  });

  it('when shares and ages tie, then the older ticket goes first, then the smaller id', () => {
    const later = ticket('b', { requestedAt: new Date(NOW.getTime() - 1) });
    const earlier = ticket('a', { requestedAt: new Date(NOW.getTime() - 1) });
    const order = fairOrder([later, earlier], inputs({}, { attempt: 10 }), new Date(NOW.getTime() - 1));
    expect(order.map((t) => t.id)).toEqual([later.id, earlier.id].sort());
  });

  it('when a weight is missing, then the tenant weighs 1', () => {
    expect(tenantShare(inputs({ a: { attempt: 5 } }, { attempt: 10 }), 'a')).toBe(0.5);
    expect(tenantShare(inputs({ a: { attempt: 5 } }, { attempt: 10 }, { a: 4 }), 'a')).toBe(0.125);
    expect(tenantShare(inputs({ a: { attempt: 5 } }, {}), 'a')).toBe(0);
  });
});

describe('lease queue: states, reasons and estimates', () => {
  it('when a waiting ticket reaches its deadline, then it is expired whether or not a pass has marked it', () => {
    const t = ticket('a');
    expect(ticketState(t, new Date(t.deadline.getTime() - 1))).toBe('waiting');
    expect(ticketState(t, t.deadline)).toBe('expired');
    expect(ticketState({ ...t, state: 'granted' }, new Date(t.deadline.getTime() + 1))).toBe('granted');
  });

  const base = { ticket: ticket('a', { units: 2 }), position: 3, aheadInTenant: 0, quota: { used: 1, quota: 4 }, pool: { used: 8, capacity: 8, retiring: false }, share: 0.25, weight: 1, fairShare: 0.3333 };

  it('when the tenant has no quota left for the request, then it waits on TENANT_QUOTA with used and quota, wherever it stands', () => {
    expect(waitReason({ ...base, position: 1, quota: { used: 3, quota: 4 } })).toEqual({ code: 'TENANT_QUOTA', used: 3, quota: 4 });
  });

  it('when the ticket is next, then it waits on the pool: POOL_FULL, or POOL_RESIZING while the pool shrinks', () => {
    expect(waitReason({ ...base, position: 1 })).toEqual({ code: 'POOL_FULL', used: 8, capacity: 8 });
    expect(waitReason({ ...base, position: 1, pool: { used: 8, capacity: 6, retiring: true } })).toEqual({ code: 'POOL_RESIZING', used: 8, capacity: 6 });
  });

  it('when its own tenant has tickets ahead, then it is QUEUED_BEHIND at its position; else BEHIND_FAIR_SHARE with the shares', () => {
    expect(waitReason({ ...base, aheadInTenant: 1 })).toEqual({ code: 'QUEUED_BEHIND', position: 3 });
    expect(waitReason(base)).toEqual({ code: 'BEHIND_FAIR_SHARE', share: 0.25, weight: 1, fairShare: 0.333 });
  });

  it('when the leases ahead expire in turn, then the estimate is the expiry that frees enough units for the queue ahead and the ticket', () => {
    const expiries = [{ units: 1, expiresAt: 1_000 }, { units: 2, expiresAt: 2_000 }, { units: 4, expiresAt: 5_000 }];
    expect(estimateGrant({ free: 0, unitsAhead: 0, units: 1, expiries, now: 500 })).toEqual(new Date(1_000));
    expect(estimateGrant({ free: 0, unitsAhead: 2, units: 1, expiries, now: 500 })).toEqual(new Date(2_000));
    expect(estimateGrant({ free: 1, unitsAhead: 3, units: 2, expiries, now: 500 })).toEqual(new Date(5_000));
    expect(estimateGrant({ free: 3, unitsAhead: 0, units: 2, expiries, now: 500 })).toEqual(new Date(500));
    expect(estimateGrant({ free: 0, unitsAhead: 6, units: 2, expiries, now: 500 })).toBeUndefined();
    // A lease already past its expiry (not yet swept) frees its units now, not in the past.
    expect(estimateGrant({ free: 0, unitsAhead: 0, units: 1, expiries, now: 1_500 })).toEqual(new Date(1_500));
  });
});
