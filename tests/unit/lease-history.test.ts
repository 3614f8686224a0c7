import { describe, expect, it } from 'vitest';
import { checkLeaseHistory, LeaseHistory, peakHeld, type LeaseLimits, type LeaseOperation, type LeaseOutcome, type LeaseSend } from '../support/lease-history';

/** Hand-built histories: times are ms after T0; each operation's window is [invoked, completed]. */
const T0 = Date.parse('2026-12-03T12:00:00.000Z');
const iso = (ms: number) => new Date(T0 + ms).toISOString();
type Window = readonly [invoked: number, completed: number | undefined];

function times([invoked, completed]: Window) {
  return { invokedAt: T0 + invoked, ...(completed !== undefined ? { completedAt: T0 + completed } : {}) };
}

function aGrant(leaseId: string, token: number, window: Window, more: Partial<LeaseOperation> = {}): LeaseOperation {
  return { op: 'acquire', tenant: 'team-a', pool: 'p', kind: 'sandbox', units: 1, holder: `h-${leaseId}`, ttlSeconds: 10, leaseId, fencingToken: token, outcome: 'ok', status: 201, created: true, ...times(window), ...more };
}

/** An acquire without a definite answer: no lease id, no token. */
function anUnansweredAcquire(window: Window, more: Partial<LeaseOperation> = {}): LeaseOperation {
  return { op: 'acquire', tenant: 'team-a', pool: 'p', kind: 'sandbox', units: 1, holder: 'h-unknown', ttlSeconds: 10, outcome: 'indeterminate', status: 503, ...times(window), ...more };
}

function aRenew(leaseId: string, token: number, window: Window, outcome: LeaseOutcome, more: Partial<LeaseOperation> = {}): LeaseOperation {
  const status = outcome === 'ok' ? 200 : outcome === 'refused' ? 410 : undefined;
  return { op: 'renew', tenant: 'team-a', pool: 'p', kind: 'sandbox', units: 1, leaseId, presentedToken: token, ttlSeconds: 10, outcome, ...(status ? { status } : {}), ...(outcome === 'ok' ? { fencingToken: token } : {}), ...times(window), ...more };
}

function aRelease(leaseId: string, token: number, window: Window, outcome: LeaseOutcome, more: Partial<LeaseOperation> = {}): LeaseOperation {
  const status = outcome === 'ok' ? 204 : outcome === 'refused' ? 410 : undefined;
  return { op: 'release', tenant: 'team-a', pool: 'p', kind: 'sandbox', units: 1, leaseId, presentedToken: token, outcome, ...(status ? { status } : {}), ...times(window), ...more };
}

const pool = (capacity: number) => ({ poolCapacity: { p: capacity } });
const rules = (ops: readonly LeaseOperation[], limits: LeaseLimits = pool(2), skew = 0) => checkLeaseHistory(ops, limits, skew).map((v) => v.rule);

describe('lease history checker: real violations are found', () => {
  // A clean history: pool of 2, leases a and b held together, a released, then c granted; b renewed and released;
  // d granted for 1 s, left to expire, and its renew with the old token refused.
  const clean = [
    aGrant('a', 10, [0, 10]),
    aGrant('b', 20, [20, 30]),
    aRelease('a', 10, [100, 110], 'ok'),
    aGrant('c', 30, [120, 130]),
    aRenew('b', 20, [5_000, 5_010], 'ok'),
    aRelease('b', 20, [6_000, 6_010], 'ok'),
    aGrant('d', 40, [6_100, 6_110], { ttlSeconds: 1 }),
    aRenew('d', 40, [8_000, 8_010], 'refused'),
    aRelease('c', 30, [9_000, 9_010], 'ok'),
  ];

  it('when the history keeps to every rule, then no violation is reported', () => {
    expect(checkLeaseHistory(clean, pool(2))).toEqual([]);
  });

  it('when one over-grant is injected into it, then the checker names the pool, the instant and the leases', () => {
    // Lease x is granted while a and b are held, and released 10 ms later: three leases in a pool of two. Its fencing
    // token fits between b's and c's, so that the over-grant is all there is to find.
    const violations = checkLeaseHistory([...clean, aGrant('x', 25, [40, 50]), aRelease('x', 25, [60, 70], 'ok')], pool(2));
    expect(violations).toHaveLength(1);
    expect(violations[0]!.rule).toBe('capacity');
    expect(violations[0]!.message).toContain(`pool p: 3 units certainly held at ${iso(50)}, more than its capacity of 2`);
    expect(violations[0]!.message).toMatch(/^(?=.*\ba \()(?=.*\bb \()(?=.*\bx \()/);
  });

  it('when many leases are held at an over-grant, then its message names ten of them and counts the rest', () => {
    const ops = Array.from({ length: 12 }, (_, i) => aGrant(`l${i}`, i + 1, [i * 10, i * 10 + 5]));
    const [violation] = checkLeaseHistory(ops, pool(11));
    expect(violation!.message).toMatch(/^pool p: 12 units certainly held at .*l9 \(.*; and 2 more$/);
    expect(violation!.message).not.toContain('l10 (');
  });

  it("when a tenant holds more of a kind than its quota, across two pools, then the quota violation names the tenant", () => {
    const ops = [aGrant('a', 1, [0, 10]), aGrant('b', 1, [20, 30], { pool: 'q' })];
    const violations = checkLeaseHistory(ops, { poolCapacity: { p: 5, q: 5 }, quota: { 'team-a': { sandbox: 1 } } });
    expect(violations.map((v) => v.message)).toEqual([expect.stringContaining(`tenant team-a (sandbox): 2 units certainly held at ${iso(30)}, more than its quota of 1`)]);
  });

  it('when a lease asked for after another was granted gets a smaller fencing token of the same pool, then fencing fails', () => {
    const violations = checkLeaseHistory([aGrant('a', 5, [0, 10]), aGrant('b', 4, [20, 30])], pool(2));
    expect(violations.map((v) => v.rule)).toEqual(['fencing']);
    expect(violations[0]!.message).toContain('pool p: lease b (team-a/h-b) got fencing token 4');
  });

  it('when two leases of one pool share a fencing token, then fencing fails', () => {
    expect(rules([aGrant('a', 5, [0, 10]), aGrant('b', 5, [0, 10])])).toEqual(['fencing']);
  });

  it('when a holder renews or releases after its lease certainly expired and is answered ok, then expired-holder fails', () => {
    // Granted by 10 ms for 1 s: expired by 1010 ms at the latest.
    const grant = aGrant('a', 1, [0, 10], { ttlSeconds: 1 });
    expect(rules([grant, aRenew('a', 1, [1_100, 1_110], 'ok')])).toEqual(['expired-holder']);
    expect(rules([grant, aRelease('a', 1, [1_100, 1_110], 'ok')])).toEqual(['expired-holder']);
    expect(checkLeaseHistory([grant, aRenew('a', 1, [1_100, 1_110], 'ok')], pool(2))[0]!.message).toContain(`lease a (team-a/h-a, pool p) expired by ${iso(1_010)} at the latest`);
  });

  it("when a renew or release with another fencing token than the lease's is answered ok, or a renew answers another token, then fencing fails", () => {
    expect(rules([aGrant('a', 7, [0, 10]), aRenew('a', 6, [20, 30], 'ok', { fencingToken: 7 })])).toEqual(['fencing']);
    expect(rules([aGrant('a', 7, [0, 10]), aRelease('a', 8, [20, 30], 'ok')])).toEqual(['fencing']);
    expect(rules([aGrant('a', 7, [0, 10]), aRenew('a', 7, [20, 30], 'ok', { fencingToken: 8 })])).toEqual(['fencing']);
  });

  it('when one idempotency key is answered with two leases, or one lease is created twice, then idempotency fails', () => {
    expect(rules([aGrant('a', 1, [0, 10], { idempotencyKey: 'k' }), aGrant('b', 2, [20, 30], { idempotencyKey: 'k' })])).toEqual(['idempotency']);
    expect(rules([aGrant('a', 1, [0, 10]), aGrant('a', 1, [20, 30])])).toEqual(['idempotency']);
  });

  it("when a tenant is answered with another tenant's lease, then the tenant rule fails", () => {
    expect(rules([aGrant('a', 1, [0, 10], { tenant: 'team-b', answeredTenant: 'team-a' })])).toEqual(['tenant']);
    expect(rules([aGrant('a', 1, [0, 10], { answeredTenant: 'team-a' })])).toEqual([]);
  });

  it('when a lease granted in a window that ends before another certainly expired is counted, then the overlap is an over-grant', () => {
    // a is granted at the earliest at 0 for 1 s, so certainly held until 1000 ms; b's grant was answered at 950 ms.
    expect(rules([aGrant('a', 1, [0, 10], { ttlSeconds: 1 }), aGrant('b', 2, [900, 950])], pool(1))).toEqual(['capacity']);
  });
});

describe('lease history checker: sound under uncertainty (no false alarms)', () => {
  it('when a release and the next grant overlap in time, then they may have been sequential and nothing is flagged', () => {
    // The release may have taken effect at 510 ms and b been granted at 540 ms.
    expect(rules([aGrant('a', 1, [0, 10]), aRelease('a', 1, [500, 600], 'ok'), aGrant('b', 2, [400, 550])], pool(1))).toEqual([]);
  });

  it('when a release is invoked at the very instant the next grant is answered, then they do not overlap', () => {
    expect(rules([aGrant('a', 1, [0, 10]), aRelease('a', 1, [500, 600], 'ok'), aGrant('b', 2, [400, 500])], pool(1))).toEqual([]);
  });

  it('when a grant is answered just after another lease may have expired, then nothing is flagged', () => {
    // a may have been granted at 0 ms for 1 s; b was answered at 1005 ms.
    expect(rules([aGrant('a', 1, [0, 10], { ttlSeconds: 1 }), aGrant('b', 2, [990, 1_005])], pool(1))).toEqual([]);
  });

  it('when two grants overlap in time, then their fencing tokens may come in either order', () => {
    expect(rules([aGrant('a', 2, [0, 100]), aGrant('b', 1, [50, 150])])).toEqual([]);
  });

  it('when a renew comes before the latest its lease can have expired, then an ok answer is allowed', () => {
    // Granted as late as 500 ms for 1 s: it may hold until 1500 ms.
    expect(rules([aGrant('a', 1, [0, 500], { ttlSeconds: 1 }), aRenew('a', 1, [1_200, 1_210], 'ok')])).toEqual([]);
  });

  it('when the hosts\' clocks may be off by the skew given, then a renew within it is allowed', () => {
    const ops = [aGrant('a', 1, [0, 10], { ttlSeconds: 1 }), aRenew('a', 1, [1_050, 1_060], 'ok')];
    expect(rules(ops, pool(2), 0)).toEqual(['expired-holder']);
    expect(rules(ops, pool(2), 100)).toEqual([]);
  });

  it('when an acquire has no definite answer, then it does not count toward a full pool', () => {
    expect(rules([aGrant('a', 1, [0, 10]), anUnansweredAcquire([20, 30]), anUnansweredAcquire([40, undefined])], pool(1))).toEqual([]);
  });

  it('when a release has no definite answer, then the lease may have ended and the next grant is not flagged', () => {
    expect(rules([aGrant('a', 1, [0, 10]), aRelease('a', 1, [100, 200], 'indeterminate'), aGrant('b', 2, [300, 310])], pool(1))).toEqual([]);
    expect(rules([aGrant('a', 1, [0, 10]), aRelease('a', 1, [100, undefined], 'indeterminate'), aGrant('b', 2, [300, 310])], pool(1))).toEqual([]);
  });

  it('when a renew has no definite answer, then it may have extended the lease and a later ok renew is allowed', () => {
    const grant = aGrant('a', 1, [0, 10], { ttlSeconds: 1 });
    expect(rules([grant, aRenew('a', 1, [900, 950], 'indeterminate', { ttlSeconds: 1 }), aRenew('a', 1, [1_500, 1_510], 'ok')])).toEqual([]);
    expect(rules([grant, aRenew('a', 1, [900, undefined], 'indeterminate'), aRenew('a', 1, [5_000, 5_010], 'ok')])).toEqual([]);
    // Answered late, it may have taken effect at its answer (2000 ms) and held the lease until 3000 ms.
    expect(rules([grant, aRenew('a', 1, [900, 2_000], 'indeterminate', { ttlSeconds: 1 }), aRenew('a', 1, [2_500, 2_510], 'ok', { ttlSeconds: 1 })])).toEqual([]);
  });

  it('when a renew has no definite answer, then it may not have extended the lease, and the units may be granted again', () => {
    const ops = [aGrant('a', 1, [0, 10], { ttlSeconds: 1 }), aRenew('a', 1, [500, 600], 'indeterminate'), aGrant('b', 2, [2_000, 2_010])];
    expect(rules(ops, pool(1))).toEqual([]);
  });

  it('when a released lease is released again after its expiry, then the repeated ok is allowed', () => {
    const grant = aGrant('a', 1, [0, 10], { ttlSeconds: 1 });
    expect(rules([grant, aRelease('a', 1, [100, 110], 'ok'), aRelease('a', 1, [5_000, 5_010], 'ok')])).toEqual([]);
  });

  it('when an acquire is repeated with its idempotency key and answered with the same lease, then it is one lease', () => {
    const keyed = { idempotencyKey: 'k' };
    const ops = [
      anUnansweredAcquire([0, 30_000], keyed),
      aGrant('a', 1, [40_000, 40_010], { ...keyed, status: 200, created: false }),
      aGrant('a', 1, [40_020, 40_030], { ...keyed, status: 200, created: false }),
    ];
    expect(rules(ops, pool(1))).toEqual([]);
    // The first request may have made the grant (as early as 0 ms, for 10 s): a may have expired before b was granted.
    expect(rules([...ops, aGrant('b', 2, [45_000, 45_010])], pool(1))).toEqual([]);
  });

  it('when a replay asks for another TTL than the request that may have made the grant, then the shorter one is assumed held', () => {
    const keyed = { idempotencyKey: 'k' };
    const ops = [
      anUnansweredAcquire([0, 100], { ...keyed, ttlSeconds: 1 }),
      aGrant('a', 1, [200, 210], { ...keyed, ttlSeconds: 10, status: 200, created: false }),
      aGrant('b', 2, [1_500, 1_510]),
    ];
    expect(rules(ops, pool(1))).toEqual([]);
  });

  it('when two tenants use the same pool, holder and idempotency key names, then each keeps its own leases and quota', () => {
    const b = { tenant: 'team-b', holder: 'h-a', idempotencyKey: 'k' };
    const ops = [aGrant('a', 1, [0, 10], { idempotencyKey: 'k' }), aGrant('b', 2, [20, 30], b)];
    expect(rules(ops, { poolCapacity: { p: 2 }, quota: { 'team-a': { sandbox: 1 }, 'team-b': { sandbox: 1 } } })).toEqual([]);
    // They share the pool: a third lease of either is an over-grant.
    expect(rules([...ops, aGrant('c', 3, [40, 50], { tenant: 'team-b' })], { poolCapacity: { p: 2 } })).toEqual(['capacity']);
  });
});

describe('lease history peak', () => {
  it('when leases overlap, then the peak is the most units certainly held at one instant, and where', () => {
    const ops = [aGrant('a', 1, [0, 10]), aGrant('b', 2, [20, 30], { units: 2 }), aRelease('a', 1, [100, 110], 'ok'), aGrant('c', 3, [200, 210])];
    expect(peakHeld(ops, 'p')).toEqual({ units: 3, at: T0 + 30, leaseIds: ['a', 'b'] });
    expect(peakHeld(ops, 'q')).toEqual({ units: 0, at: Number.NaN, leaseIds: [] });
  });
});

describe('lease history recorder', () => {
  /** A send that answers from a script, one answer per request; 'throw' stands for no answer. */
  function scripted(...answers: Array<{ status: number; json?: unknown } | 'throw'>): { send: LeaseSend; sent: string[] } {
    const sent: string[] = [];
    const send: LeaseSend = async (method, path, body) => {
      sent.push(`${method} ${path}${body ? ` ${JSON.stringify(body)}` : ''}`);
      const answer = answers.shift();
      if (answer === 'throw' || answer === undefined) throw new Error('socket hang up');
      return { status: answer.status, json: answer.json };
    };
    return { send, sent };
  }
  let clock = T0;
  const tick = () => (clock += 5);

  it('when an acquire waits in the queue, then one operation spans the request to the poll that shows the grant; an expired ticket is refused', async () => {
    const view = { leaseId: 'l-9', tenant: 'team-a', pool: 'p', kind: 'sandbox', units: 1, holder: 'w', fencingToken: 9, grantedAt: iso(0), expiresAt: iso(3_000) };
    const { send, sent } = scripted(
      { status: 202, json: { requestId: 'lreq_1', state: 'waiting', position: 3 } },
      { status: 200, json: { requestId: 'lreq_1', state: 'waiting', position: 1 } },
      { status: 200, json: { requestId: 'lreq_1', state: 'granted', lease: view } },
      { status: 202, json: { requestId: 'lreq_2', state: 'waiting', position: 1 } },
      { status: 200, json: { requestId: 'lreq_2', state: 'expired' } },
    );
    const history = new LeaseHistory('team-a', send, tick);
    const granted = await history.acquireWaiting({ kind: 'sandbox', pool: 'p', holder: 'w', ttlSeconds: 3 }, 30);
    const expired = await history.acquireWaiting({ kind: 'sandbox', pool: 'p', holder: 'w', ttlSeconds: 3 }, 30);
    expect(sent).toEqual([
      'POST /runtime-cloud/leases {"units":1,"kind":"sandbox","pool":"p","holder":"w","ttlSeconds":3,"wait":{"seconds":30,"holdSeconds":0}}',
      'GET /runtime-cloud/lease-requests/lreq_1?waitSeconds=5',
      'GET /runtime-cloud/lease-requests/lreq_1?waitSeconds=5',
      'POST /runtime-cloud/leases {"units":1,"kind":"sandbox","pool":"p","holder":"w","ttlSeconds":3,"wait":{"seconds":30,"holdSeconds":0}}',
      'GET /runtime-cloud/lease-requests/lreq_2?waitSeconds=5',
    ]);
    expect(granted).toMatchObject({ op: 'acquire', outcome: 'ok', created: true, leaseId: 'l-9', fencingToken: 9, queuePosition: 3, answeredTenant: 'team-a' });
    expect(expired).toMatchObject({ op: 'acquire', outcome: 'refused', code: 'QUEUE.EXPIRED' });
  });

  it('when leases are acquired, renewed and released, then each operation is recorded with its window and outcome', async () => {
    const view = { leaseId: 'l-1', tenant: 'team-a', pool: 'p', kind: 'sandbox', units: 2, holder: 'w', fencingToken: 7, grantedAt: iso(0), expiresAt: iso(3_000) };
    const { send, sent } = scripted(
      { status: 201, json: view },
      { status: 200, json: { ...view, renewedAt: iso(1_000), expiresAt: iso(4_000) } },
      { status: 410, json: { code: 'CAPACITY.LEASE_GONE' } },
      { status: 503, json: { code: 'STORE.UNAVAILABLE' } },
      'throw',
    );
    const history = new LeaseHistory('team-a', send, tick);
    const grant = await history.acquire({ kind: 'sandbox', pool: 'p', holder: 'w', units: 2, ttlSeconds: 3, idempotencyKey: 'k' });
    const held = { leaseId: 'l-1', fencingToken: 7 };
    const renew = await history.renew(held);
    const refused = await history.renew(held, 2);
    const unavailable = await history.release(held);
    const silent = await history.acquire({ kind: 'sandbox', holder: 'w', ttlSeconds: 3 });

    expect(sent).toEqual([
      'POST /runtime-cloud/leases {"units":2,"kind":"sandbox","pool":"p","holder":"w","ttlSeconds":3,"idempotencyKey":"k"}',
      'POST /runtime-cloud/leases/l-1/renew {"fencingToken":7}',
      'POST /runtime-cloud/leases/l-1/renew {"fencingToken":7,"ttlSeconds":2}',
      'DELETE /runtime-cloud/leases/l-1?fencingToken=7',
      'POST /runtime-cloud/leases {"units":1,"kind":"sandbox","holder":"w","ttlSeconds":3}',
    ]);
    expect(grant).toMatchObject({ op: 'acquire', tenant: 'team-a', answeredTenant: 'team-a', outcome: 'ok', status: 201, created: true, leaseId: 'l-1', fencingToken: 7, pool: 'p', units: 2, ttlSeconds: 3, idempotencyKey: 'k' });
    expect(grant.completedAt! - grant.invokedAt).toBe(5);
    // A renew without a TTL records the one the answer shows (expiresAt - renewedAt), and the lease's pool and units.
    expect(renew).toMatchObject({ op: 'renew', outcome: 'ok', ttlSeconds: 3, presentedToken: 7, fencingToken: 7, pool: 'p', kind: 'sandbox', units: 2, expiresAt: T0 + 4_000 });
    expect(refused).toMatchObject({ op: 'renew', outcome: 'refused', status: 410, code: 'CAPACITY.LEASE_GONE', ttlSeconds: 2 });
    expect(unavailable).toMatchObject({ op: 'release', outcome: 'indeterminate', status: 503, code: 'STORE.UNAVAILABLE' });
    expect(silent).toMatchObject({ op: 'acquire', outcome: 'indeterminate', error: 'socket hang up' });
    expect(silent.status).toBeUndefined();
    expect(history.operations).toEqual([grant, renew, refused, unavailable, silent]);
  });

  it('when an operation is still in flight, then the history shows it as indeterminate with no completion', async () => {
    let answer: (value: { status: number; json: unknown }) => void = () => {};
    const history = new LeaseHistory('team-a', () => new Promise((resolve) => (answer = resolve)), tick);
    const pending = history.acquire({ kind: 'sandbox', pool: 'p', holder: 'w', ttlSeconds: 3 });
    expect(history.operations).toEqual([expect.objectContaining({ op: 'acquire', outcome: 'indeterminate' })]);
    expect(history.operations[0]!.completedAt).toBeUndefined();
    answer({ status: 429, json: { code: 'CAPACITY.EXHAUSTED' } });
    expect(await pending).toMatchObject({ outcome: 'refused', code: 'CAPACITY.EXHAUSTED' });
    expect(history.operations[0]!.completedAt).toBeDefined();
  });
});
