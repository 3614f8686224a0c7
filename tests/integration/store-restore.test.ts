import { describe, expect, it } from 'vitest';
import { capacityDb, ledgerFor } from '../../shared/capacity/capacity.repository';
import { createCapacityService, type CapacityService } from '../../shared/capacity/capacity.service';
import type { Lease } from '../../shared/capacity/lease';
import type { TenantFilter } from '../../shared/platform/auth/auth';
import { EPOCH_SPAN, readStoreEpoch, recordRestore } from '../../shared/platform/sql/store-epoch';
import { inTransaction } from '../../shared/platform/sql/transaction';
import { randomIds } from '../../shared/platform/time/clock';
import { recoverAfterRestore } from '../../shared/store-restore';
import { aLeaseRequest } from '../support/builders';
import { REPOSITORY_DIALECTS, skipDialect } from '../support/databases';
import { applyToCloud, specificationApplied, type TestResource } from '../support/inventory';
import { inventoryOnDialect } from '../support/inventory-harness';
import { refusal } from '../support/refusal';

/**
 * After a restore of the store (the seed: restore from backup; observed state re-inventoried; leases expire and are
 * re-granted). The restore itself, of a real SQLite file under a running host, is tests/e2e/store-backup-restore;
 * here, on every dialect, the store loses what a backup taken earlier would not hold (leases granted since are
 * deleted and their units given back, as the restored store has them), then the restore is recorded and a host's
 * start-up step recovers.
 */
const RESOURCES: readonly TestResource[] = [{ name: 'bucket', type: 'local:storage:Bucket', properties: { versioning: true } }];
const one = (tenant: string): TenantFilter => ({ kind: 'one', tenant });
const ALL: TenantFilter = { kind: 'all' };

for (const dialect of REPOSITORY_DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`after a restore of the store, on ${dialect}`, () => {
    const harness = inventoryOnDialect(dialect);
    let run = 0;

    /** Tenants ta-/tb-<run> on an edition of `limit` attempt units (TTL at most 60 s, builds 600 s) and a pool. */
    async function seeded(capacity: CapacityService, options: { limit?: number; pool?: number } = {}) {
      run++;
      // Past the recovery window an earlier test's restore opened (the tests share the store).
      harness.clock.advance(3_600_000);
      const limits = { attempt: { maxUnits: options.limit ?? 100, maxTtlSeconds: 60 }, build: { maxUnits: 100, maxTtlSeconds: 600 } };
      await capacity.putEdition({ name: `ed-${run}`, limits });
      for (const tenant of [`ta-${run}`, `tb-${run}`]) await capacity.putTenant({ id: tenant, edition: `ed-${run}` });
      await capacity.putPool(`pool-${run}`, { kind: 'attempt', target: 'local', capacity: options.pool ?? 10, min: 0, max: 100, labels: {} });
      return { ta: `ta-${run}`, tb: `tb-${run}`, pool: `pool-${run}` };
    }

    const service = () => createCapacityService({ store: harness.database.store, clock: harness.clock, ids: randomIds });

    /** The store as restored from a backup that predates `lost`: those leases gone, their units free again. */
    async function restoreLosing(lost: readonly Lease[]): Promise<CapacityService> {
      const store = harness.database.store;
      await inTransaction(capacityDb(store.db), async (trx) => {
        for (const lease of lost) await trx.deleteFrom('capacity_leases').where('tenant_id', '=', lease.tenant).where('id', '=', lease.id).execute();
        await ledgerFor(store).free(trx, lost.map((l) => ({ ...l, expiresAt: l.expiresAt.getTime() })));
      });
      await recordRestore(store.db, { at: harness.clock.now(), from: 'test backup' });
      expect(await recoverAfterRestore(store, harness.clock)).toBeDefined();
      return service();
    }

    it('when the store is restored, then its epoch rises and every token granted after is larger than any before, per pool', async () => {
      const before = service();
      const { ta, pool } = await seeded(before);
      const { epoch } = await readStoreEpoch(harness.database.store.db);
      const kept = (await before.acquire(aLeaseRequest({ tenant: ta, pool }))).lease;
      const lost = (await before.acquire(aLeaseRequest({ tenant: ta, pool }))).lease;
      const after = await restoreLosing([lost]);
      expect((await readStoreEpoch(harness.database.store.db)).epoch).toBe(epoch + 1);
      // A lease the backup held keeps its token and is renewed as before.
      await expect(after.renew(one(ta), kept.id, kept.fencingToken)).resolves.toMatchObject({ fencingToken: kept.fencingToken });
      harness.clock.advance(60_000);
      const granted = (await after.acquire(aLeaseRequest({ tenant: ta, pool }))).lease;
      expect(granted.fencingToken).toBeGreaterThan(Math.max(kept.fencingToken, lost.fencingToken));
      expect(Math.floor(granted.fencingToken / EPOCH_SPAN)).toBe(epoch + 1);
    });

    // Hosts share a server database; several SQLite connections in one process would block the thread each waits on.
    it.skipIf(dialect === 'sqlite')('when several hosts start on a restored store at once, then exactly one begins the recovery, and a later start finds none pending', async () => {
      const store = harness.database.store;
      await recordRestore(store.db, { at: harness.clock.now(), from: 'test backup' });
      const others = [1, 2, 3].map(() => harness.database.connectAgain());
      try {
        const begun = await Promise.all([store, ...others].map((s) => recoverAfterRestore(s, harness.clock)));
        expect(begun.filter((r) => r !== undefined)).toHaveLength(1);
        expect(await recoverAfterRestore(store, harness.clock)).toBeUndefined();
      } finally {
        await Promise.all(others.map((s) => s.close()));
      }
    });

    it('when the store is restored, then every environment is stale until a scan after the restore observes it', async () => {
      const { inventory, cloud, clock } = harness;
      const id = `env-${dialect}-${run}`;
      await applyToCloud(cloud, `stack-${id}`, RESOURCES);
      await inventory.recordSpecification({ id: `event-${id}`, time: clock.now().toISOString(), data: specificationApplied({ id, stack: `stack-${id}` }, RESOURCES) });
      const key = { tenant: 'tenant-a', id };
      expect(await inventory.scan(key, { kind: 'manual', by: 'op-1' })).toMatchObject({ outcome: 'completed', driftStatus: 'in-sync' });
      clock.advance(1_000);
      await restoreLosing([]);
      expect((await inventory.getEnvironment(ALL, id)).drift).toMatchObject({ status: 'unknown', stale: true, reason: expect.stringContaining('restored from a backup') });
      clock.advance(1_000);
      expect(await inventory.scan(key, { kind: 'timer' })).toMatchObject({ outcome: 'completed' });
      expect((await inventory.getEnvironment(ALL, id)).drift).toMatchObject({ status: 'in-sync', stale: false });
    });

    it('when a holder renews a lease the backup does not know within the window, then it is re-registered with its token; new grants wait; after the window both are as before', async () => {
      const { ta, pool } = await seeded(service());
      const lost = (await service().acquire(aLeaseRequest({ tenant: ta, pool, units: 2 }))).lease;
      const capacity = await restoreLosing([lost]);
      const holding = { kind: lost.kind, pool, units: 2, holder: lost.holder };

      const waiting = await refusal(capacity.acquire(aLeaseRequest({ tenant: ta, pool })));
      expect(waiting).toMatchObject({ code: 'CAPACITY.RECOVERING', kind: 'unavailable', details: { retryAfterSeconds: 60 } });
      // Without what it holds, the lease is unknown, as outside a recovery.
      expect((await refusal(capacity.renew(one(ta), lost.id, lost.fencingToken, 30))).code).toBe('CAPACITY.LEASE_NOT_FOUND');
      const back = await capacity.renew(one(ta), lost.id, lost.fencingToken, 30, holding);
      expect(back).toMatchObject({ id: lost.id, tenant: ta, pool, units: 2, fencingToken: lost.fencingToken, state: 'active' });
      expect((await capacity.summary(one(ta))).pools.find((p) => p.id === pool)?.used).toBe(2);
      // Renewed again, it is a lease the store knows.
      await expect(capacity.renew(one(ta), lost.id, lost.fencingToken, 30, holding)).resolves.toMatchObject({ fencingToken: lost.fencingToken });

      harness.clock.advance(60_000);
      const other = (await service().acquire(aLeaseRequest({ tenant: ta, pool }))).lease;
      expect(other.fencingToken).toBeGreaterThan(lost.fencingToken);
      const late = await refusal(capacity.renew(one(ta), 'lease_never_known', lost.fencingToken, 30, holding));
      expect(late.code).toBe('CAPACITY.LEASE_NOT_FOUND');
    });

    it('when a holder re-registers the same lease twice at once (a retry), then both answer that lease and its units are held once', async () => {
      const { ta, pool } = await seeded(service());
      const lost = (await service().acquire(aLeaseRequest({ tenant: ta, pool, units: 2 }))).lease;
      const capacity = await restoreLosing([lost]);
      const holding = { kind: lost.kind, pool, units: 2, holder: lost.holder };
      const answers = await Promise.all([1, 2].map(() => capacity.renew(one(ta), lost.id, lost.fencingToken, 30, holding)));
      expect(answers.map((a) => [a.id, a.fencingToken])).toEqual([
        [lost.id, lost.fencingToken],
        [lost.id, lost.fencingToken],
      ]);
      expect((await capacity.summary(one(ta))).pools.find((p) => p.id === pool)?.used).toBe(2);
    });

    it('when a re-registration needs units that leases the backup holds still use, then it is refused as the pool is full', async () => {
      const first = service();
      const { ta, pool } = await seeded(first, { pool: 3 });
      const kept = (await first.acquire(aLeaseRequest({ tenant: ta, pool, units: 2 }))).lease;
      const lost = (await first.acquire(aLeaseRequest({ tenant: ta, pool, units: 1 }))).lease;
      const capacity = await restoreLosing([lost]);
      const holding = { kind: lost.kind, pool, units: 2, holder: lost.holder };
      expect((await refusal(capacity.renew(one(ta), lost.id, lost.fencingToken, 30, holding))).code).toBe('CAPACITY.EXHAUSTED');
      await capacity.release(one(ta), kept.id, kept.fencingToken);
      await expect(capacity.renew(one(ta), lost.id, lost.fencingToken, 30, holding)).resolves.toMatchObject({ units: 2 });
    });

    it('when a lease is re-registered with a token of the current epoch, then it is refused: only leases granted before the restore come back', async () => {
      const { ta, pool } = await seeded(service());
      const capacity = await restoreLosing([]);
      const { epoch } = await readStoreEpoch(harness.database.store.db);
      const error = await refusal(capacity.renew(one(ta), 'lease_forged', epoch * EPOCH_SPAN + 1, 30, { kind: 'attempt', pool, units: 1, holder: 'w' }));
      expect(error.code).toBe('CAPACITY.FENCING_MISMATCH');
    });

    it('when two tenants re-register with the same lease id and pool, then each re-registers only its own and never touches the other', async () => {
      const { ta, tb, pool } = await seeded(service());
      const lost = (await service().acquire(aLeaseRequest({ tenant: ta, pool }))).lease;
      const capacity = await restoreLosing([lost]);
      const holding = { kind: lost.kind, pool, units: 1, holder: 'a-worker' };
      await capacity.renew(one(ta), lost.id, lost.fencingToken, 30, holding);
      const other = capacity.renew(one(tb), lost.id, lost.fencingToken, 40, { ...holding, holder: 'b-worker' });
      if (dialect === 'sqlite') {
        // Leases are kept per tenant on SQLite: tenant b's is its own lease of that id.
        await expect(other).resolves.toMatchObject({ tenant: tb, holder: 'b-worker' });
      } else {
        // Lease ids are unique across tenants on the server databases: tenant b's is refused.
        expect((await refusal(other)).code).toBe('CAPACITY.LEASE_CONFLICT');
      }
      expect(await capacity.getLease(one(ta), lost.id)).toMatchObject({ tenant: ta, holder: 'a-worker', expiresAt: new Date(harness.clock.now().getTime() + 30_000) });
      expect((await capacity.summary(one(ta))).tenants[0]?.usage.find((u) => u.kind === 'attempt')?.used).toBe(1);
    });
  });
}
