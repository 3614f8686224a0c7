import BetterSqlite3 from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createCapacityService, type CapacityService } from '../../shared/capacity/capacity.service';
import { ManualClock, randomIds } from '../../shared/platform/time/clock';
import { createTestDatabase, type TestDatabase } from '../support/databases';

/**
 * On SQLite leases are kept by (tenant, id) with one index for the sweep, and SQLite plans without statistics: a
 * condition it could serve from the wrong index would walk every lease. Every statement the capacity service
 * prepares that reads leases must seek, never scan, but an administrator's list of every tenant's leases.
 */
describe('capacity statements on SQLite', () => {
  let database: TestDatabase;
  let capacity: CapacityService;
  const prepared = new Set<string>();
  const clock = new ManualClock('2026-01-01T00:00:00Z');

  beforeAll(async () => {
    const { prepare } = BetterSqlite3.prototype as { prepare: (this: BetterSqlite3.Database, source: string) => BetterSqlite3.Statement };
    vi.spyOn(BetterSqlite3.prototype, 'prepare').mockImplementation(function (this: BetterSqlite3.Database, source: string) {
      prepared.add(source);
      return prepare.call(this, source);
    });
    database = await createTestDatabase('sqlite');
    capacity = createCapacityService({ store: database.store, clock, ids: randomIds });
    await capacity.putEdition({ name: 'team', limits: { attempt: { maxUnits: 50, maxTtlSeconds: 600 } } });
    for (const tenant of ['a', 'b', 'c']) await capacity.putTenant({ id: tenant, edition: 'team' });
    await capacity.putPool('p', { kind: 'attempt', target: 'local', capacity: 100 });
  });
  afterAll(async () => {
    vi.restoreAllMocks();
    await database?.drop();
  });

  it('when leases are granted, renewed, read, listed, released and swept by tenants and by an administrator, then no statement scans the leases but the list of all tenants', async () => {
    const request = { kind: 'attempt' as const, units: 1, ttlSeconds: 60, holder: 'h', pool: 'p' };
    const own = { kind: 'one', tenant: 'a' } as const;
    const admin = { kind: 'all' } as const;
    prepared.clear();
    const granted = await capacity.acquire({ ...request, tenant: 'a' });
    const keyed = await capacity.acquire({ ...request, tenant: 'a', idempotencyKey: 'k' });
    await capacity.acquire({ ...request, tenant: 'a', idempotencyKey: 'k' });
    const other = await capacity.acquire({ ...request, tenant: 'b' });
    await capacity.acquire({ ...request, tenant: 'c', ttlSeconds: 1 });
    await capacity.renew(own, granted.lease.id, granted.lease.fencingToken, 120);
    await capacity.renew(admin, other.lease.id, other.lease.fencingToken);
    await capacity.getLease(own, keyed.lease.id);
    await capacity.getLease(admin, keyed.lease.id);
    await capacity.listLeases(own, { limit: 10 });
    await capacity.listLeases(own, { limit: 10, state: 'active', cursor: (await capacity.listLeases(own, { limit: 1 })).nextCursor });
    await capacity.listLeases(admin, { limit: 10 });
    await capacity.release(own, granted.lease.id, granted.lease.fencingToken);
    await capacity.release(own, granted.lease.id, granted.lease.fencingToken);
    await capacity.release(admin, other.lease.id, other.lease.fencingToken);
    await expect(capacity.release(own, keyed.lease.id, keyed.lease.fencingToken + 1)).rejects.toMatchObject({ code: 'CAPACITY.FENCING_MISMATCH' });
    clock.advance(2_000);
    expect((await capacity.sweepExpired()).expired).toBe(1);

    const raw = new BetterSqlite3(database.settings.RuntimeCloud__Store__Connection, { readonly: true });
    try {
      const plans = [...prepared]
        .filter((source) => /capacity_leases/.test(source) && !/^\s*(insert|create|drop|alter)/i.test(source))
        .map((source) => {
          const parameters = Array.from({ length: (source.match(/\?/g) ?? []).length }, () => null);
          const steps = raw.prepare(`explain query plan ${source}`).all(...parameters) as { detail: string }[];
          return { source, steps: steps.map((s) => s.detail) };
        });
      expect(plans.length).toBeGreaterThanOrEqual(8);
      const scans = plans.filter(({ steps }) => steps.some((step) => /^SCAN (capacity_leases|due)\b/.test(step))).map(({ source }) => source);
      // The one exception, paid by administrators: every tenant's leases listed in id order (see capacity.migrations.ts).
      expect(scans).toEqual(['select * from "capacity_leases" order by "id" limit ?']);
    } finally {
      raw.close();
    }
  });
});
