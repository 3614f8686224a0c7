import { sql } from 'kysely';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createCapacityService, type CapacityService } from '../../shared/capacity/capacity.service';
import type { TenantFilter } from '../../shared/platform/auth/auth';
import { ManualClock, randomIds } from '../../shared/platform/time/clock';
import { aCapacitySeed, aLeaseRequest, aPoolSpec } from '../support/builders';
import { refusal } from '../support/refusal';
import { createTestDatabase, REPOSITORY_DIALECTS, skipDialect, type TestDatabase } from '../support/databases';



for (const dialect of REPOSITORY_DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`capacity store on ${dialect}`, () => {
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
    beforeEach(async () => {
      // Each test gets its own tenants and pools in the file's database, so tests stay independent.
      run++;
      clock = new ManualClock('2026-01-01T00:00:00Z');
      capacity = createCapacityService({ store: database.store, clock, ids: randomIds });
    });

    /** Seeds tenants ta-/tb-<run> on an edition of `limit` units and pools named `<kind>-<run>`; returns the pool ids. */
    async function seed(options: { limit?: number; pools?: Record<string, number>; maxTtlSeconds?: number } = {}) {
      const pools = Object.fromEntries(Object.entries(options.pools ?? { attempt: 10 }).map(([k, v]) => [`${k}-${run}`, v]));
      await capacity.applySeed(aCapacitySeed({ ...options, pools, tenants: ['seeded-tenant'] }));
      // Fresh tenants per test: earlier tests' leases hold units of theirs, and quota checks must be exact.
      const limit = { maxUnits: options.limit ?? 1000, maxTtlSeconds: options.maxTtlSeconds ?? 3600 };
      await capacity.putEdition({ name: `ed-${run}`, limits: { attempt: limit, build: limit } });
      await capacity.putTenant({ id: `ta-${run}`, edition: `ed-${run}` });
      await capacity.putTenant({ id: `tb-${run}`, edition: `ed-${run}` });
      return Object.keys(pools);
    }
    const ta = () => `ta-${run}`;
    const tb = () => `tb-${run}`;
    const one = (tenant: string): TenantFilter => ({ kind: 'one', tenant });

    it('when acquires exceed the edition quota, then the excess is refused with QUOTA_EXCEEDED, used and limit', async () => {
      const [pool] = await seed({ limit: 3, pools: { attempt: 100 } });
      await capacity.acquire(aLeaseRequest({ tenant: ta(), pool, units: 2 }));
      const error = await refusal(capacity.acquire(aLeaseRequest({ tenant: ta(), pool, units: 2, ttlSeconds: 60 })));
      expect(error.code).toBe('CAPACITY.QUOTA_EXCEEDED');
      expect(error.details).toMatchObject({ used: 2, limit: 3, requested: 2, retryAfterSeconds: 60 });
      // The other tenant of the same edition has its own quota.
      await expect(capacity.acquire(aLeaseRequest({ tenant: tb(), pool, units: 3 }))).resolves.toMatchObject({ outcome: 'granted' });
    });

    it('when a pool is full, then EXHAUSTED with Retry-After from the soonest expiry, and the tenant quota is untouched', async () => {
      const [pool] = await seed({ pools: { attempt: 2 } });
      await capacity.acquire(aLeaseRequest({ tenant: ta(), pool, units: 2, ttlSeconds: 30 }));
      clock.advance(10_000);
      const error = await refusal(capacity.acquire(aLeaseRequest({ tenant: tb(), pool })));
      expect(error.code).toBe('CAPACITY.EXHAUSTED');
      expect(error.details).toMatchObject({ used: 2, limit: 2, retryAfterSeconds: 20 });
      const summary = await capacity.summary(one(tb()));
      expect(summary.tenants[0]?.usage.find((u) => u.kind === 'attempt')?.used).toBe(0);
    });

    it("when the TTL exceeds the edition's maximum, then TTL_TOO_LONG (validation) and nothing is held", async () => {
      const [pool] = await seed({ maxTtlSeconds: 120 });
      const error = await refusal(capacity.acquire(aLeaseRequest({ tenant: ta(), pool, ttlSeconds: 121 })));
      expect(error).toMatchObject({ code: 'CAPACITY.TTL_TOO_LONG', kind: 'validation' });
      expect((await capacity.summary(one(ta()))).tenants[0]?.usage.find((u) => u.kind === 'attempt')?.used).toBe(0);
    });

    it('when leases are granted from one pool, then fencing tokens strictly increase', async () => {
      const [pool] = await seed({ pools: { attempt: 10 } });
      const tokens: number[] = [];
      for (let i = 0; i < 5; i++) {
        const { lease } = await capacity.acquire(aLeaseRequest({ tenant: ta(), pool }));
        tokens.push(lease.fencingToken);
        if (i % 2 === 0) await capacity.release(one(ta()), lease.id, lease.fencingToken);
      }
      for (let i = 1; i < tokens.length; i++) expect(tokens[i]).toBeGreaterThan(tokens[i - 1] ?? Infinity);
    });

    it('when a lease is renewed with the wrong fencing token, then 409 FENCING_MISMATCH; with the right one, a later expiry', async () => {
      const [pool] = await seed();
      const { lease } = await capacity.acquire(aLeaseRequest({ tenant: ta(), pool, ttlSeconds: 60 }));
      expect((await refusal(capacity.renew(one(ta()), lease.id, lease.fencingToken + 1))).code).toBe('CAPACITY.FENCING_MISMATCH');
      clock.advance(30_000);
      const renewed = await capacity.renew(one(ta()), lease.id, lease.fencingToken, 120);
      expect(renewed.expiresAt.toISOString()).toBe('2026-01-01T00:02:30.000Z');
      const again = await capacity.renew(one(ta()), lease.id, lease.fencingToken);
      expect(again.expiresAt.toISOString()).toBe('2026-01-01T00:02:30.000Z');
    });

    it('when a lease has expired but the sweep has not run, then renew and release answer gone (410)', async () => {
      const [pool] = await seed();
      const { lease } = await capacity.acquire(aLeaseRequest({ tenant: ta(), pool, ttlSeconds: 60 }));
      clock.advance(60_000);
      expect(await refusal(capacity.renew(one(ta()), lease.id, lease.fencingToken))).toMatchObject({ code: 'CAPACITY.LEASE_GONE', kind: 'gone' });
      expect(await refusal(capacity.release(one(ta()), lease.id, lease.fencingToken))).toMatchObject({ kind: 'gone' });
    });

    it('when a lease is released twice, then both succeed and the units come back once', async () => {
      const [pool] = await seed({ pools: { attempt: 1 } });
      const { lease } = await capacity.acquire(aLeaseRequest({ tenant: ta(), pool }));
      expect(await capacity.release(one(ta()), lease.id, lease.fencingToken)).toEqual({ outcome: 'released' });
      expect(await capacity.release(one(ta()), lease.id, lease.fencingToken)).toEqual({ outcome: 'already-released' });
      const summary = await capacity.summary(one(ta()));
      expect(summary.pools.find((p) => p.id === pool)?.used).toBe(0);
      expect(summary.tenants[0]?.usage.find((u) => u.kind === 'attempt')?.used).toBe(0);
      expect((await refusal(capacity.renew(one(ta()), lease.id, lease.fencingToken))).kind).toBe('gone');
    });

    it('when a lease is released with a token that is not its own, then 409 whatever its state, and it stays held until its holder releases it', async () => {
      const [pool] = await seed({ pools: { attempt: 1 } });
      const { lease } = await capacity.acquire(aLeaseRequest({ tenant: ta(), pool }));
      expect(await refusal(capacity.release(one(ta()), lease.id, lease.fencingToken + 1))).toMatchObject({ code: 'CAPACITY.FENCING_MISMATCH', kind: 'conflict' });
      expect((await capacity.getLease(one(ta()), lease.id)).state).toBe('active');
      expect((await refusal(capacity.acquire(aLeaseRequest({ tenant: ta(), pool })))).code).toBe('CAPACITY.EXHAUSTED');
      await capacity.release(one(ta()), lease.id, lease.fencingToken);
      expect((await refusal(capacity.release(one(ta()), lease.id, lease.fencingToken + 1))).code).toBe('CAPACITY.FENCING_MISMATCH');
    });

    it('when an idempotency key is reused with a different request, then 422 IDEMPOTENCY_KEY_REUSED and nothing more is held', async () => {
      const [pool] = await seed({ pools: { attempt: 10 } });
      const first = await capacity.acquire(aLeaseRequest({ tenant: ta(), pool, idempotencyKey: 'k-reused', holder: 'w-1' }));
      for (const different of [{ holder: 'w-2' }, { units: 2 }, { kind: 'build' as const }, { pool: undefined, labels: { zone: 'a' } }]) {
        const error = await refusal(capacity.acquire(aLeaseRequest({ tenant: ta(), pool, idempotencyKey: 'k-reused', holder: 'w-1', ...different })));
        expect(error).toMatchObject({ code: 'REQUEST.IDEMPOTENCY_KEY_REUSED', kind: 'unprocessable', details: {} });
      }
      // The same request again is answered with the same lease; another tenant's key space is its own.
      expect(await capacity.acquire(aLeaseRequest({ tenant: ta(), pool, idempotencyKey: 'k-reused', holder: 'w-1', ttlSeconds: 30 }))).toMatchObject({
        outcome: 'existing',
        lease: { id: first.lease.id },
      });
      expect((await capacity.acquire(aLeaseRequest({ tenant: tb(), pool, idempotencyKey: 'k-reused', holder: 'w-2' }))).outcome).toBe('granted');
      expect((await capacity.summary(one(ta()))).pools.find((p) => p.id === pool)?.used).toBe(2);
    });

    it("when another tenant's lease is read, renewed or released, then it is not found", async () => {
      const [pool] = await seed();
      const { lease } = await capacity.acquire(aLeaseRequest({ tenant: ta(), pool }));
      expect((await refusal(capacity.getLease(one(tb()), lease.id))).kind).toBe('not-found');
      expect((await refusal(capacity.renew(one(tb()), lease.id, lease.fencingToken))).kind).toBe('not-found');
      expect((await refusal(capacity.release(one(tb()), lease.id, lease.fencingToken))).kind).toBe('not-found');
      expect((await capacity.listLeases(one(tb()), { limit: 10 })).items).toEqual([]);
    });

    it('when the same idempotency key is used again, then the same lease comes back and nothing more is held', async () => {
      const [pool] = await seed({ pools: { attempt: 5 } });
      const first = await capacity.acquire(aLeaseRequest({ tenant: ta(), pool, idempotencyKey: 'k1' }));
      const second = await capacity.acquire(aLeaseRequest({ tenant: ta(), pool, idempotencyKey: 'k1' }));
      expect(first.outcome).toBe('granted');
      expect(second).toEqual({ outcome: 'existing', lease: first.lease });
      // The key is per tenant: another tenant's same key is another lease.
      const other = await capacity.acquire(aLeaseRequest({ tenant: tb(), pool, idempotencyKey: 'k1' }));
      expect(other.lease.id).not.toBe(first.lease.id);
      expect((await capacity.summary(one(ta()))).pools.find((p) => p.id === pool)?.used).toBe(2);
    });

    it('when duplicates with one idempotency key race, then exactly one lease exists and all get it', async () => {
      const [pool] = await seed({ pools: { attempt: 50 } });
      const results = await Promise.all(
        Array.from({ length: 20 }, () => capacity.acquire(aLeaseRequest({ tenant: ta(), pool, idempotencyKey: 'race' }))),
      );
      expect(new Set(results.map((r) => r.lease.id)).size).toBe(1);
      expect(results.filter((r) => r.outcome === 'granted')).toHaveLength(1);
      expect((await capacity.summary(one(ta()))).pools.find((p) => p.id === pool)?.used).toBe(1);
    });

    it('when many acquires race for one pool, then it is never over-granted', async () => {
      const [pool] = await seed({ pools: { attempt: 7 } });
      const results = await Promise.allSettled(Array.from({ length: 30 }, () => capacity.acquire(aLeaseRequest({ tenant: ta(), pool }))));
      expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(7);
      const tokens = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value.lease.fencingToken] : []));
      expect(new Set(tokens).size).toBe(7);
    });

    it('when concurrent acquires of several units run short of quota together, then each granted lease holds exactly its units, tokens follow request order, and the rest are refused', async () => {
      // PostgreSQL sends the first acquire alone and the five that arrive meanwhile as one statement.
      const [pool] = await seed({ limit: 7, pools: { attempt: 10 } });
      const results = await Promise.allSettled(Array.from({ length: 6 }, () => capacity.acquire(aLeaseRequest({ tenant: ta(), pool, units: 2 }))));
      const granted = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value.lease] : []));
      expect(granted).toHaveLength(3);
      for (const r of results) if (r.status === 'rejected') expect(r.reason).toMatchObject({ code: 'CAPACITY.QUOTA_EXCEEDED' });
      const tokens = granted.map((l) => l.fencingToken);
      // Azure SQL grants each lease in a transaction of its own, which draws its token as it inserts the lease: distinct, and
      // larger than any drawn before it started, but concurrent grants draw in the order they get there.
      if (dialect !== 'mssql') expect(tokens).toEqual([...tokens].sort((a, b) => a - b));
      expect(new Set(tokens).size).toBe(3);
      const summary = await capacity.summary(one(ta()));
      expect(summary.pools.find((p) => p.id === pool)?.used).toBe(6);
      expect(summary.tenants[0]?.usage.find((u) => u.kind === 'attempt')?.used).toBe(6);
      if (dialect !== 'sqlite') {
        const held = await sql<{ lease_id: string; units: number }>`
          select lease_id, count(*) as units from capacity_slots
          where scope in (${`pool:${pool}`}, ${`quota:attempt:${ta()}`}) and lease_id <> '' group by lease_id`.execute(database.store.db);
        // Two units of the pool and two of the quota per lease.
        expect(new Map(held.rows.map((r) => [r.lease_id, Number(r.units)]))).toEqual(new Map(granted.map((l) => [l.id, 4])));
      }
    });

    it('when releases arrive together, then each gets its own answer and only those presented rightly give their units back', async () => {
      // PostgreSQL sends the first release alone and the ones that arrive meanwhile as one statement.
      const [pool] = await seed({ pools: { attempt: 10 } });
      const [l1, l2, l3, l4] = await Promise.all([1, 2, 3, 4].map(async () => (await capacity.acquire(aLeaseRequest({ tenant: ta(), pool }))).lease));
      const { lease: l5 } = await capacity.acquire(aLeaseRequest({ tenant: tb(), pool }));
      if (!l1 || !l2 || !l3 || !l4) throw new Error('four leases expected');
      const outcomes = await Promise.allSettled([
        capacity.release(one(ta()), l1.id, l1.fencingToken),
        capacity.release(one(ta()), l2.id, l2.fencingToken + 1000),
        capacity.release(one(ta()), l5.id, l5.fencingToken),
        capacity.release(one(ta()), l3.id, l3.fencingToken),
        capacity.release(one(ta()), l3.id, l3.fencingToken),
        capacity.release({ kind: 'all' }, l4.id, l4.fencingToken),
      ]);
      const answers = outcomes.map((o) => (o.status === 'fulfilled' ? o.value.outcome : (o.reason as { code: string }).code));
      const expected = ['released', 'CAPACITY.FENCING_MISMATCH', 'CAPACITY.LEASE_NOT_FOUND', 'released', 'already-released', 'released'];
      // Azure SQL releases each lease in a transaction of its own: either of the two releases of l3 may be the one
      // that ends it. SQLite and PostgreSQL answer a batch in arrival order.
      if (dialect === 'mssql' && answers[3] === 'already-released') expected.splice(3, 2, 'already-released', 'released');
      expect(answers).toEqual(expected);
      const summary = await capacity.summary({ kind: 'all' });
      expect(summary.pools.find((p) => p.id === pool)?.used).toBe(2);
      const usage = (tenant: string) => summary.tenants.find((t) => t.tenant === tenant)?.usage.find((u) => u.kind === 'attempt')?.used;
      expect([usage(ta()), usage(tb())]).toEqual([1, 1]);
      expect((await capacity.getLease(one(ta()), l2.id)).state).toBe('active');
    });

    it('when leases expire, then the sweep expires them in batches, frees their units and records LeaseExpired', async () => {
      const [pool] = await seed({ pools: { attempt: 10 } });
      for (let i = 0; i < 7; i++) await capacity.acquire(aLeaseRequest({ tenant: ta(), pool, ttlSeconds: 10 }));
      const keeper = await capacity.acquire(aLeaseRequest({ tenant: ta(), pool, ttlSeconds: 100 }));
      clock.advance(10_000);
      const result = await capacity.sweepExpired({ batchSize: 3 });
      expect(result).toEqual({ expired: 7, batches: 3 });
      const summary = await capacity.summary(one(ta()));
      expect(summary.pools.find((p) => p.id === pool)?.used).toBe(1);
      expect(summary.tenants[0]?.usage.find((u) => u.kind === 'attempt')?.used).toBe(1);
      const events = await database.store.db
        .selectFrom('outbox')
        .select(['payload'])
        .where('payload', 'like', `%${pool}%`)
        .execute();
      const expired = events.map((e: { payload: string }) => JSON.parse(e.payload) as { type: string; data: { leaseId: string } });
      expect(expired.filter((e) => e.type === 'LeaseExpired')).toHaveLength(7);
      expect(expired.some((e) => e.data.leaseId === keeper.lease.id)).toBe(false);
      expect(await capacity.sweepExpired()).toEqual({ expired: 0, batches: 0 });
    });

    it('when a pool shrinks below its use, then active leases stay and grants stop until use falls', async () => {
      const [pool = ''] = await seed({ pools: { attempt: 4 } });
      const leases = [];
      for (let i = 0; i < 4; i++) leases.push((await capacity.acquire(aLeaseRequest({ tenant: ta(), pool }))).lease);
      await capacity.putPool(pool, aPoolSpec({ capacity: 2 }));
      expect((await capacity.listLeases(one(ta()), { limit: 10, state: 'active' })).items).toHaveLength(4);
      expect((await refusal(capacity.acquire(aLeaseRequest({ tenant: ta(), pool })))).code).toBe('CAPACITY.EXHAUSTED');
      for (const lease of leases.slice(0, 2)) await capacity.release(one(ta()), lease.id, lease.fencingToken);
      // Use has fallen to the new capacity, not below it: still nothing to grant.
      expect((await refusal(capacity.acquire(aLeaseRequest({ tenant: ta(), pool })))).details).toMatchObject({ used: 2, limit: 2 });
      const third = leases[2];
      if (third) await capacity.release(one(ta()), third.id, third.fencingToken);
      await expect(capacity.acquire(aLeaseRequest({ tenant: ta(), pool }))).resolves.toMatchObject({ outcome: 'granted' });
    });

    it('when a pool with an IaC stack changes size, then PoolResizeRequested is in the outbox; without a change, not', async () => {
      const id = `stacked-${run}`;
      await capacity.putPool(id, aPoolSpec({ capacity: 4, iacStack: 'team-a/worker-pool/pools-dev' }));
      const same = await capacity.putPool(id, aPoolSpec({ capacity: 4, iacStack: 'team-a/worker-pool/pools-dev' }));
      const resized = await capacity.putPool(id, aPoolSpec({ capacity: 8, iacStack: 'team-a/worker-pool/pools-dev' }));
      expect([same.resizeRequested, resized.resizeRequested]).toEqual([false, true]);
      const rows = await database.store.db.selectFrom('outbox').select(['payload']).where('correlation_id', '=', id).execute();
      expect(rows.map((r: { payload: string }) => JSON.parse(r.payload) as { type: string; data: unknown })).toEqual([
        expect.objectContaining({ type: 'PoolResizeRequested', data: expect.objectContaining({ fromCapacity: 4, toCapacity: 8 }) }),
      ]);
    });

    it('when labels are requested, then only a pool carrying them grants', async () => {
      await seed({ pools: {} });
      await capacity.putPool(`eu-${run}`, aPoolSpec({ kind: 'build', capacity: 1, labels: { region: 'eu' } }));
      await capacity.putPool(`us-${run}`, aPoolSpec({ kind: 'build', capacity: 5, labels: { region: 'us' } }));
      const { lease } = await capacity.acquire(aLeaseRequest({ tenant: ta(), kind: 'build', labels: { region: 'eu' } }));
      expect(lease.pool).toBe(`eu-${run}`);
      expect((await refusal(capacity.acquire(aLeaseRequest({ tenant: ta(), kind: 'build', labels: { region: 'eu' } })))).code).toBe(
        'CAPACITY.EXHAUSTED',
      );
    });

    it('when leases are listed with a limit, then pages follow the cursor without gaps or repeats', async () => {
      const [pool] = await seed({ pools: { attempt: 20 } });
      const granted = [];
      for (let i = 0; i < 5; i++) granted.push((await capacity.acquire(aLeaseRequest({ tenant: ta(), pool, holder: 'lister' }))).lease.id);
      const seen: string[] = [];
      let cursor: string | undefined;
      do {
        const page = await capacity.listLeases(one(ta()), { limit: 2, holder: 'lister', ...(cursor ? { cursor } : {}) });
        seen.push(...page.items.map((l) => l.id));
        cursor = page.nextCursor;
      } while (cursor);
      expect(seen).toEqual([...granted].sort());
    });

    it('when the seed is applied twice, then nothing changes and used units are kept', async () => {
      const [pool = ''] = await seed({ pools: { attempt: 3 } });
      await capacity.acquire(aLeaseRequest({ tenant: ta(), pool }));
      await seed({ pools: { attempt: 3 } });
      expect((await capacity.summary(one(ta()))).pools.find((p) => p.id === pool)).toMatchObject({ capacity: 3, used: 1 });
    });
  });
}
