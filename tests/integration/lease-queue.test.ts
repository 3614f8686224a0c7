import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createCapacityService, type CapacityService, type WaitResult } from '../../shared/capacity/capacity.service';
import type { TenantFilter } from '../../shared/platform/auth/auth';
import { ManualClock, randomIds } from '../../shared/platform/time/clock';
import { aLeaseRequest } from '../support/builders';
import { refusal } from '../support/refusal';
import { createTestDatabase, DIALECTS, skipDialect, type TestDatabase } from '../support/databases';

const one = (tenant: string): TenantFilter => ({ kind: 'one', tenant });

function ticketOf(result: WaitResult) {
  if (result.outcome !== 'waiting') throw new Error(`expected a ticket, got a lease (${result.outcome})`);
  return result.ticket;
}

function leaseOf(result: WaitResult) {
  if (result.outcome === 'waiting') throw new Error(`expected a lease, got ticket ${result.ticket.ticket.id} (${result.ticket.state})`);
  return result.lease;
}

for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`lease queue on ${dialect}`, () => {
    let database: TestDatabase;
    let clock: ManualClock;
    let capacity: CapacityService;
    let run = 0;

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
    });
    afterAll(async () => {
      await database?.drop();
    });
    beforeEach(() => {
      run++;
      clock = new ManualClock('2026-01-01T00:00:00Z');
      capacity = createCapacityService({ store: database.store, clock, ids: randomIds });
    });
    afterEach(() => capacity.close());

    /** A pool `q-<run>` of `size` attempt units, and tenants a-, b-, c-<run> on editions of the weights given. */
    async function seed(size: number, options: { weights?: [number, number, number]; quota?: number; maxWaitSeconds?: number } = {}) {
      const [wa, wb, wc] = options.weights ?? [1, 1, 1];
      const limit = { maxUnits: options.quota ?? 100, maxTtlSeconds: 3600, ...(options.maxWaitSeconds !== undefined ? { maxWaitSeconds: options.maxWaitSeconds } : {}) };
      for (const [name, weight] of [[`a-${run}`, wa], [`b-${run}`, wb], [`c-${run}`, wc]] as const) {
        await capacity.putEdition({ name: `ed-${name}`, limits: { attempt: limit }, weight });
        await capacity.putTenant({ id: name, edition: `ed-${name}` });
      }
      await capacity.putPool(`q-${run}`, { kind: 'attempt', target: 'local', capacity: size });
      return { pool: `q-${run}`, a: `a-${run}`, b: `b-${run}`, c: `c-${run}` };
    }
    /** A request that may wait `waitSeconds` (default 60); the call answers at once (`holdSeconds` 0) unless told. */
    const wait = (tenant: string, pool: string, over: { units?: number; waitSeconds?: number; holdSeconds?: number; holder?: string; idempotencyKey?: string } = {}) =>
      capacity.acquireOrWait({
        ...aLeaseRequest({ tenant, pool, holder: over.holder ?? 'w', units: over.units ?? 1 }),
        waitSeconds: over.waitSeconds ?? 60,
        holdSeconds: over.holdSeconds ?? 0,
        ...(over.idempotencyKey ? { idempotencyKey: over.idempotencyKey } : {}),
      });

    it('when a request may wait and the pool is full, then it waits and is granted the unit a release frees, before it answers', async () => {
      const { pool, a, b } = await seed(1);
      const held = leaseOf(await wait(a, pool));
      const waiting = wait(b, pool, { holdSeconds: 20 });
      // Joined: the ticket is in the store before the release.
      await expect.poll(async () => (await capacity.queue({ kind: 'all' })).find((q) => q.pool === pool)?.standing.length ?? 0).toBe(1);
      await capacity.release(one(a), held.id, held.fencingToken);
      const granted = leaseOf(await waiting);
      expect(granted).toMatchObject({ tenant: b, pool, state: 'active' });
      expect(granted.fencingToken).toBeGreaterThan(held.fencingToken);
    });

    it('when requests wait in a pool, then a request without wait is refused QUEUED_BEHIND even with a unit free, and the freed units go to the queue', async () => {
      const { pool, a, b, c } = await seed(2);
      const held = leaseOf(await wait(a, pool));
      // b asks for 2 units: one is free, so it waits (first in line, POOL_FULL), and the free unit is kept for it.
      const big = ticketOf(await wait(b, pool, { units: 2, waitSeconds: 60 }));
      expect(big.reason).toEqual({ code: 'POOL_FULL', used: 1, capacity: 2 });
      const polled = await refusal(capacity.acquire(aLeaseRequest({ tenant: c, pool })));
      expect(polled.code).toBe('CAPACITY.EXHAUSTED');
      expect(polled.details.reason).toEqual({ code: 'QUEUED_BEHIND', position: 2 });
      await capacity.release(one(a), held.id, held.fencingToken);
      const after = await capacity.getLeaseRequest(one(b), big.ticket.id);
      expect(after.state).toBe('granted');
      expect(after.lease).toMatchObject({ units: 2, tenant: b, id: big.ticket.leaseId });
    });

    it('when tenants of weights 1, 1 and 2 wait, then units go in weighted fair share, each tenant oldest first, with reasons', async () => {
      const { pool, a, b, c } = await seed(4, { weights: [1, 1, 2] });
      const blockers = [];
      for (let i = 0; i < 4; i++) blockers.push(leaseOf(await wait(`a-${run}`, pool, { holder: `blocker-${i}` })));
      // a holds 4 units: its share is the largest. b and c each ask three times.
      const tickets = [];
      for (const tenant of [b, b, b, c, c, c, a]) {
        tickets.push(ticketOf(await wait(tenant, pool, { waitSeconds: 60, holder: `${tenant}-${tickets.length}` })).ticket);
        clock.advance(1);
      }
      const standing = (await capacity.queue({ kind: 'all' })).find((q) => q.pool === pool)?.standing ?? [];
      const order = standing.map((s) => s.ticket.holder);
      // Each step takes the tenant whose share would be smallest with its next ticket granted (C: the kind's capacity):
      // c (1/C/2) before b (1/C); then b and c tie at 1/C and b's head is older; then c at 1.5/C (b at 2/C), c's last;
      // then b's two; a, holding 4, comes last.
      expect(order).toEqual([`${c}-3`, `${b}-0`, `${c}-4`, `${c}-5`, `${b}-1`, `${b}-2`, `${a}-6`]);
      expect(standing.map((s) => s.reason?.code)).toEqual(['POOL_FULL', 'BEHIND_FAIR_SHARE', 'QUEUED_BEHIND', 'QUEUED_BEHIND', 'QUEUED_BEHIND', 'QUEUED_BEHIND', 'BEHIND_FAIR_SHARE']);
      expect(standing[1]?.reason).toMatchObject({ code: 'BEHIND_FAIR_SHARE', share: 0, weight: 1 });
      // Each release hands its unit over by the shares as they are then: c-3 (a holds 3); b-0 (a 2, c 1 of weight 2:
      // b and c tie, b's head is older); c-4 (a 1, b 1, c 1); then a, holding nothing any more, is furthest below: a-6.
      for (const lease of blockers) await capacity.release(one(a), lease.id, lease.fencingToken);
      const states = await Promise.all(tickets.map(async (t) => [t.holder, (await capacity.getLeaseRequest({ kind: 'all' }, t.id)).state]));
      expect(Object.fromEntries(states)).toEqual({
        [`${b}-0`]: 'granted',
        [`${b}-1`]: 'waiting',
        [`${b}-2`]: 'waiting',
        [`${c}-3`]: 'granted',
        [`${c}-4`]: 'granted',
        [`${c}-5`]: 'waiting',
        [`${a}-6`]: 'granted',
      });
    });

    it('when a tenant at its quota waits, then its ticket says TENANT_QUOTA and it is passed over, not blocking the others', async () => {
      const { pool, a, b } = await seed(3, { quota: 1 });
      const mine = leaseOf(await wait(a, pool));
      const other = leaseOf(await wait(b, pool));
      leaseOf(await wait(`c-${run}`, pool));
      const atQuota = ticketOf(await wait(a, pool, { waitSeconds: 60 }));
      expect(atQuota.reason).toEqual({ code: 'TENANT_QUOTA', used: 1, quota: 1 });
      // b's release frees a pool unit, but a is at its quota: the unit stays free for whoever may take it.
      await capacity.release(one(b), other.id, other.fencingToken);
      expect((await capacity.getLeaseRequest(one(a), atQuota.ticket.id)).state).toBe('waiting');
      // a's own release lets its waiting request have the unit.
      await capacity.release(one(a), mine.id, mine.fencingToken);
      expect((await capacity.getLeaseRequest(one(a), atQuota.ticket.id)).state).toBe('granted');
    });

    it('when a ticket outlives its wait, then it has expired and takes no unit; canceling is final, a granted one cannot be canceled', async () => {
      const { pool, a, b } = await seed(1, { maxWaitSeconds: 120 });
      const held = leaseOf(await wait(a, pool));
      const late = ticketOf(await wait(b, pool, { waitSeconds: 30 }));
      const canceled = ticketOf(await wait(b, pool, { waitSeconds: 60 }));
      const next = ticketOf(await wait(b, pool, { waitSeconds: 120 }));
      expect((await capacity.cancelLeaseRequest(one(b), canceled.ticket.id)).state).toBe('canceled');
      clock.advance(31_000);
      expect((await capacity.getLeaseRequest(one(b), late.ticket.id)).state).toBe('expired');
      await capacity.release(one(a), held.id, held.fencingToken);
      expect((await capacity.getLeaseRequest(one(b), late.ticket.id)).state).toBe('expired');
      expect((await capacity.getLeaseRequest(one(b), canceled.ticket.id)).state).toBe('canceled');
      expect((await capacity.getLeaseRequest(one(b), next.ticket.id)).state).toBe('granted');
      expect((await refusal(capacity.cancelLeaseRequest(one(b), next.ticket.id))).code).toBe('CAPACITY.LEASE_REQUEST_GRANTED');
      expect((await refusal(wait(b, pool, { waitSeconds: 121 }))).code).toBe('CAPACITY.WAIT_TOO_LONG');
    });

    it('when two tenants wait with the same holder and idempotency key, then each has its own ticket, and neither sees the other', async () => {
      const { pool, a, b } = await seed(1);
      const held = leaseOf(await wait(`c-${run}`, pool));
      const ofA = ticketOf(await wait(a, pool, { waitSeconds: 60, holder: 'same', idempotencyKey: 'same-key' }));
      const ofB = ticketOf(await wait(b, pool, { waitSeconds: 60, holder: 'same', idempotencyKey: 'same-key' }));
      expect(ofA.ticket.id).not.toBe(ofB.ticket.id);
      // A repeat joins once: the same ticket.
      expect(ticketOf(await wait(a, pool, { waitSeconds: 60, holder: 'same', idempotencyKey: 'same-key' })).ticket.id).toBe(ofA.ticket.id);
      expect((await refusal(capacity.getLeaseRequest(one(b), ofA.ticket.id))).code).toBe('CAPACITY.LEASE_REQUEST_NOT_FOUND');
      expect((await refusal(capacity.cancelLeaseRequest(one(a), ofB.ticket.id))).code).toBe('CAPACITY.LEASE_REQUEST_NOT_FOUND');
      const seenByA = (await capacity.queue(one(a))).flatMap((q) => q.standing.map((s) => s.ticket.tenant));
      expect(seenByA).toEqual([a]);
      await capacity.release(one(`c-${run}`), held.id, held.fencingToken);
      expect((await capacity.getLeaseRequest(one(a), ofA.ticket.id)).lease?.tenant).toBe(a);
      expect((await capacity.getLeaseRequest(one(b), ofB.ticket.id)).state).toBe('waiting');
    });

    it('when two hosts pass over one queue at once, then each ticket is granted once and the pool is never over-granted', async () => {
      const { pool, a, b } = await seed(5);
      const other = createCapacityService({ store: database.store, clock, ids: randomIds });
      try {
        const blockers = [];
        for (let i = 0; i < 5; i++) blockers.push(leaseOf(await wait(a, pool, { holder: `blocker-${i}` })));
        const tickets = [];
        for (let i = 0; i < 8; i++) tickets.push(ticketOf(await wait(i % 2 ? a : b, pool, { waitSeconds: 60, holder: `t-${i}` })).ticket);
        // Both hosts release (and pass over the queue) at once.
        await Promise.all(blockers.map((l, i) => (i % 2 ? capacity : other).release(one(a), l.id, l.fencingToken)));
        const views = await Promise.all(tickets.map((t) => capacity.getLeaseRequest({ kind: 'all' }, t.id)));
        expect(views.filter((v) => v.state === 'granted')).toHaveLength(5);
        const summary = await capacity.summary({ kind: 'all' });
        expect(summary.pools.find((p) => p.id === pool)).toMatchObject({ used: 5, capacity: 5 });
        const leases = await capacity.listLeases({ kind: 'all' }, { limit: 1000, state: 'active' });
        const ofPool = leases.items.filter((l) => l.pool === pool);
        expect(ofPool).toHaveLength(5);
        expect(new Set(ofPool.map((l) => l.id))).toEqual(new Set(views.filter((v) => v.state === 'granted').map((v) => v.ticket.leaseId)));
      } finally {
        other.close();
      }
    });
  });
}
