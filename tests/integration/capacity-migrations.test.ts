import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { capacityMigrations } from '../../shared/capacity/capacity.migrations';
import { createCapacityService } from '../../shared/capacity/capacity.service';
import { migrateToLatest, type MigrationSource } from '../../shared/platform/sql/migrations';
import { ManualClock, randomIds } from '../../shared/platform/time/clock';
import { localHostMigrations as allMigrations } from '../../local/migrations';
import { createTestDatabase, DIALECTS, skipDialect, type TestDatabase } from '../support/databases';

const SLOTS_MIGRATION = '20261130-20-capacity-slots';
const LEASES_BY_TENANT_MIGRATION = '20261130-30-capacity-leases-by-tenant';

/**
 * Every migration but the named capacity ones: a store as it was before them. Later capacity migrations (the lease
 * queue's) touch none of their tables, so they are applied, as the code under test needs their tables.
 */
const migrationsWithout = (...left: string[]): readonly MigrationSource[] =>
  allMigrations.map((source) =>
    source === capacityMigrations ? (dialect) => Object.fromEntries(Object.entries(source(dialect)).filter(([name]) => !left.includes(name))) : source,
  );

for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`capacity slot migration on ${dialect}`, () => {
    let database: TestDatabase | undefined;
    afterEach(async () => {
      await database?.drop();
      database = undefined;
    });

    it('when a store with counter rows and active leases is migrated, then every lease keeps its units and tokens keep rising', async () => {
      database = await createTestDatabase(dialect, { migrate: false });
      const db = database.store.db;
      await migrateToLatest(db, dialect, migrationsWithout(SLOTS_MIGRATION, LEASES_BY_TENANT_MIGRATION));
      const now = Date.parse('2026-01-01T00:00:00Z');
      await db.insertInto('capacity_editions').values({ name: 'team', updated_at: now }).execute();
      await db.insertInto('capacity_edition_limits').values({ edition: 'team', kind: 'attempt', max_units: 3, max_ttl_seconds: 600 }).execute();
      await db.insertInto('capacity_tenants').values({ id: 't', edition: 'team', updated_at: now }).execute();
      await db.insertInto('capacity_tenant_usage').values({ tenant_id: 't', kind: 'attempt', used: 3 }).execute();
      // The pool was shrunk to 2 while 3 units were leased: one unit above capacity.
      await db
        .insertInto('capacity_pools')
        .values({ id: 'p', kind: 'attempt', target: 'local', capacity: 2, min_units: 0, max_units: 10, labels: '{}', iac_stack: null, used: 3, fencing_counter: 41, updated_at: now })
        .execute();
      const lease = (id: string, units: number, state: string, token: number) => ({
        id, tenant_id: 't', kind: 'attempt', pool_id: 'p', units, holder: 'h', fencing_token: token, ttl_seconds: 600,
        granted_at: now, expires_at: now + 600_000, renewed_at: null, ended_at: null, state, idempotency_key: null,
      });
      await db.insertInto('capacity_leases').values([lease('l1', 2, 'active', 40), lease('l2', 1, 'active', 41), lease('l0', 5, 'released', 39)]).execute();

      expect(await migrateToLatest(db, dialect, allMigrations)).toEqual([SLOTS_MIGRATION, LEASES_BY_TENANT_MIGRATION]);

      const capacity = createCapacityService({ store: database.store, clock: new ManualClock('2026-01-01T00:01:00Z'), ids: randomIds });
      const summary = await capacity.summary({ kind: 'all' });
      expect(summary.pools).toEqual([expect.objectContaining({ id: 'p', capacity: 2, used: 3, free: 0 })]);
      expect(summary.tenants).toEqual([{ tenant: 't', edition: 'team', usage: [{ kind: 'attempt', used: 3, limit: 3 }] }]);
      // Above capacity: nothing is granted until use falls below it; then the next token is above every earlier one.
      await expect(capacity.acquire({ tenant: 't', kind: 'attempt', units: 1, ttlSeconds: 60, holder: 'h', pool: 'p' })).rejects.toMatchObject({ code: 'CAPACITY.QUOTA_EXCEEDED' });
      await capacity.release({ kind: 'one', tenant: 't' }, 'l1', 40);
      expect((await capacity.summary({ kind: 'all' })).pools[0]).toMatchObject({ used: 1, free: 1 });
      const { lease: granted } = await capacity.acquire({ tenant: 't', kind: 'attempt', units: 1, ttlSeconds: 60, holder: 'h', pool: 'p' });
      expect(granted.fencingToken).toBeGreaterThan(41);
      await expect(capacity.acquire({ tenant: 't', kind: 'attempt', units: 1, ttlSeconds: 60, holder: 'h', pool: 'p' })).rejects.toMatchObject({ code: 'CAPACITY.EXHAUSTED' });
    });

    it('when leases are moved to their tenant-keyed table, then every column survives and each caller finds, renews and releases them as before', async () => {
      database = await createTestDatabase(dialect, { migrate: false });
      const db = database.store.db;
      await migrateToLatest(db, dialect, migrationsWithout(LEASES_BY_TENANT_MIGRATION));
      const clock = new ManualClock('2026-01-01T00:00:00Z');
      const before = createCapacityService({ store: database.store, clock, ids: randomIds });
      await before.putEdition({ name: 'team', limits: { attempt: { maxUnits: 4, maxTtlSeconds: 600 } } });
      for (const tenant of ['a', 'b']) await before.putTenant({ id: tenant, edition: 'team' });
      await before.putPool('p', { kind: 'attempt', target: 'local', capacity: 8 });
      const request = { kind: 'attempt' as const, units: 1, ttlSeconds: 60, holder: 'h', pool: 'p' };
      const kept = await before.acquire({ ...request, tenant: 'a', idempotencyKey: 'k1' });
      const other = await before.acquire({ ...request, tenant: 'b' });
      const rowsBefore = await db.selectFrom('capacity_leases').selectAll().orderBy('id').execute();

      expect(await migrateToLatest(db, dialect, allMigrations)).toEqual([LEASES_BY_TENANT_MIGRATION]);

      expect(await db.selectFrom('capacity_leases').selectAll().orderBy('id').execute()).toEqual(rowsBefore);
      if (dialect === 'sqlite') {
        const key = await sql<{ name: string; pk: number }>`select name, pk from pragma_table_info('capacity_leases') where pk > 0 order by pk`.execute(db);
        expect(key.rows.map((r) => r.name)).toEqual(['tenant_id', 'id']);
        const names = await sql<{ name: string }>`select name from pragma_index_list('capacity_leases') where origin = 'c' order by name`.execute(db);
        expect(names.rows.map((r) => r.name)).toEqual(['capacity_leases_due', 'capacity_leases_idempotency']);
      }

      const after = createCapacityService({ store: database.store, clock, ids: randomIds });
      const admin = { kind: 'all' } as const;
      expect(await after.getLease({ kind: 'one', tenant: 'a' }, kept.lease.id)).toEqual(kept.lease);
      await expect(after.getLease({ kind: 'one', tenant: 'b' }, kept.lease.id)).rejects.toMatchObject({ code: 'CAPACITY.LEASE_NOT_FOUND' });
      expect(await after.getLease(admin, other.lease.id)).toEqual(other.lease);
      // The key still binds its request: a retry answers with the lease it granted.
      expect(await after.acquire({ ...request, tenant: 'a', idempotencyKey: 'k1' })).toEqual({ outcome: 'existing', lease: kept.lease });
      expect((await after.renew(admin, kept.lease.id, kept.lease.fencingToken, 120)).expiresAt).toEqual(new Date(clock.now().getTime() + 120_000));
      expect(await after.release(admin, other.lease.id, other.lease.fencingToken)).toEqual({ outcome: 'released' });
      expect(await after.release({ kind: 'one', tenant: 'a' }, kept.lease.id, kept.lease.fencingToken)).toEqual({ outcome: 'released' });
      await expect(after.release(admin, 'lease_missing', 1)).rejects.toMatchObject({ code: 'CAPACITY.LEASE_NOT_FOUND' });
      expect((await after.summary(admin)).pools[0]).toMatchObject({ used: 0, free: 8 });
    });
  });
}
