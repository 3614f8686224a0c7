import { describe, expect, it } from 'vitest';
import { capacityMigrations } from '../../shared/capacity/capacity.migrations';
import { createCapacityService } from '../../shared/capacity/capacity.service';
import { ManualClock, randomIds } from '../../shared/platform/time/clock';
import { aLeaseRequest } from '../support/builders';
import { recordingMssql, type RecordedQuery } from '../support/recording-mssql';

/** What Azure SQL would receive: the product's T-SQL compiler, statements recorded instead of sent. */
function recordingService(answer?: (query: RecordedQuery) => { rows: unknown[]; numAffectedRows?: bigint }, compiledFor: 'mssql' | 'postgres' = 'mssql') {
  // The store's epoch (platform/sql/store-epoch.ts): never restored.
  const epoch = { id: 1, epoch: 0, restored_at: null, restored_from: null, recovery_pending: 0, recovery_started_at: null, recovery_until: null };
  const { db, queries } = recordingMssql((q) => (/^select \* from "runtime_cloud_store"/.test(q.sql) ? { rows: [epoch] } : answer ? answer(q) : { rows: [], numAffectedRows: 1n }), compiledFor);
  const capacity = createCapacityService({ store: { db, dialect: 'mssql', close: () => Promise.resolve() }, clock: new ManualClock(), ids: randomIds });
  return { capacity, statements: () => queries.map((q) => q.sql) };
}

/**
 * The claim of `units` free rows of a scope: picked once in a CTE with READPAST (free rows have lease_id '', which
 * keeps them at the front of the scope's key range), then each updated by its whole key.
 */
const claim = (units: number, allowed: string) =>
  `with "picked" as (select top(${units}) "claimable"."slot" from "capacity_slots" as "claimable" with (updlock, readpast, rowlock) ` +
  'where "claimable"."scope" = @1 and "claimable"."lease_id" = @2 ' +
  'and not exists (select "r"."slot" from "capacity_slots" as "r" where "r"."scope" = @3 and "r"."retiring" = @4) ' +
  `and exists (${allowed})) `;
const claimUpdate = (next: number) =>
  `update "capacity_slots" set "lease_id" = @${next} from "picked" where "scope" = @${next + 1} and "lease_id" = @${next + 2} and "capacity_slots"."slot" = "picked"."slot"`;
const quotaAllows =
  'select "t"."id" from "capacity_tenants" as "t" inner join "capacity_edition_limits" as "l" on "l"."edition" = "t"."edition" ' +
  'where "t"."id" = @5 and "l"."kind" = @6 and "l"."max_ttl_seconds" >= @7';
const poolAllows = 'select "pk"."id" from "capacity_pools" as "pk" where "pk"."id" = @5 and "pk"."kind" = @6';
/** Whether the pool's queue has a waiting request: one indexed probe before a grant and after a release. */
const queueProbe = 'select top(1) "id" from "capacity_lease_requests" where "pool_id" = @1 and "state" = @2';

describe('capacity on Azure SQL (compiled T-SQL)', () => {
  it('when a lease is acquired, then quota and pool rows are claimed with READPAST in a CTE and the token comes from the sequence', async () => {
    const { capacity, statements } = recordingService((q) =>
      /^insert into "capacity_leases"/.test(q.sql) ? { rows: [{ fencing_token: 1 }], numAffectedRows: 1n } : { rows: [], numAffectedRows: 3n },
    );
    await capacity.acquire(aLeaseRequest({ pool: 'pool-attempt', units: 3 }));
    expect(statements()).toEqual([
      'select * from "runtime_cloud_store" where "id" = @1',
      queueProbe,
      'begin transaction',
      claim(3, quotaAllows) + claimUpdate(8),
      claim(3, poolAllows) + claimUpdate(7),
      'insert into "capacity_leases" ("id", "tenant_id", "kind", "pool_id", "units", "holder", "fencing_token", "ttl_seconds", "granted_at", ' +
        '"expires_at", "renewed_at", "ended_at", "state", "idempotency_key", "request_digest") output "inserted"."fencing_token" ' +
        'values (@1, @2, @3, @4, @5, @6, (select epoch * 1000000000000 from runtime_cloud_store where id = 1) + next value for capacity_fencing, ' +
        '@7, @8, @9, @10, @11, @12, @13, @14)',
      'commit',
    ]);
  });

  it('when a store of the same dialect compiled for PostgreSQL (the T-SQL shadow) ran the statements first, then this store still sends its own T-SQL', async () => {
    // The statements are compiled once per store, not once per dialect: the shadow's PostgreSQL text is its own.
    const granting = (q: RecordedQuery) => (/^insert into "capacity_leases"/.test(q.sql) ? { rows: [{ fencing_token: 1 }], numAffectedRows: 1n } : { rows: [], numAffectedRows: 3n });
    const shadow = recordingService(granting, 'postgres');
    await shadow.capacity.acquire(aLeaseRequest({ pool: 'pool-attempt', units: 3 }));
    expect(shadow.statements().filter((sql) => sql.includes('$1')).length).toBeGreaterThan(1);

    const { capacity, statements } = recordingService(granting);
    await capacity.acquire(aLeaseRequest({ pool: 'pool-attempt', units: 3 }));
    expect(statements()).toContain(queueProbe);
    expect(statements().filter((sql) => sql.includes('$1'))).toEqual([]);
  });

  it('when a lease is released, then the lease row is ended with its fencing token and its rows are freed by key in its two scopes', async () => {
    const { capacity, statements } = recordingService((q) =>
      /^update "capacity_leases"/.test(q.sql)
        ? { rows: [{ id: 'l', tenant_id: 't', kind: 'attempt', pool_id: 'p', units: 1, holder: 'h', fencing_token: 4, expires_at: 0 }], numAffectedRows: 1n }
        : { rows: [], numAffectedRows: 1n },
    );
    await capacity.release({ kind: 'one', tenant: 't' }, 'l', 4);
    expect(statements()).toEqual([
      'begin transaction',
      'update "capacity_leases" set "state" = @1, "ended_at" = @2 output "inserted"."id", "inserted"."tenant_id", "inserted"."kind", ' +
        '"inserted"."pool_id", "inserted"."units", "inserted"."holder", "inserted"."fencing_token", "inserted"."expires_at" ' +
        'where "id" = @3 and "state" = @4 and "expires_at" > @5 and "fencing_token" = @6 and "tenant_id" = @7',
      'update "capacity_slots" set "lease_id" = @1 where "scope" in (@2, @3) and "lease_id" = @4',
      'commit',
      queueProbe,
    ]);
  });

  it('when the sweep runs, then due leases are read through TOP with READPAST, so sweepers on other instances take other batches', async () => {
    const { capacity, statements } = recordingService();
    await capacity.sweepExpired({ batchSize: 200 });
    expect(statements()).toContain(
      'select top(200) "claimable"."id" from "capacity_leases" as "claimable" with (updlock, readpast, rowlock) ' +
        'where "claimable"."state" = @1 and "claimable"."expires_at" <= @2 order by "claimable"."expires_at"',
    );
    expect(statements().some((s) => / limit | for update/.test(s))).toBe(false);
  });

  it('when a tenant is put, then its row is upserted by a MERGE that holds its key (WITH (HOLDLOCK)), not by ON CONFLICT', async () => {
    const { capacity, statements } = recordingService((q) =>
      /^select "name" from "capacity_editions"/.test(q.sql) ? { rows: [{ name: 'standard' }] } : { rows: [], numAffectedRows: 1n },
    );
    await capacity.putTenant({ id: 't1', edition: 'standard' });
    expect(statements()).toContain(
      'merge into "capacity_tenants" with (holdlock) using (select 1 as "one") as "source" on "capacity_tenants"."id" = @1 ' +
        'when matched then update set "edition" = @2, "updated_at" = @3 when not matched then insert ("id", "edition", "updated_at") values (@4, @5, @6);',
    );
    expect(statements().some((s) => /on conflict/.test(s))).toBe(false);
  });

  it('when the slot schema is created, then one key serves grants and releases, the sequence is created, and defaults are dropped before columns', async () => {
    const { db, queries } = recordingMssql();
    await capacityMigrations('mssql')['20261130-20-capacity-slots']?.up(db);
    const sent = queries.map((q) => q.sql);
    expect(sent).toContain(
      'create table "capacity_slots" ("scope" nvarchar(200) not null, "lease_id" nvarchar(200) not null, "slot" integer not null, ' +
        '"retiring" integer not null, constraint "capacity_slots_pk" primary key ("scope", "lease_id", "slot"))',
    );
    expect(sent).toContain('create index "capacity_slots_retiring" on "capacity_slots" ("scope") where "retiring" = 1');
    expect(sent).toContain('create sequence capacity_fencing as bigint start with 1');
    const dropUsed = sent.indexOf('alter table "capacity_pools" drop column "used"');
    expect(dropUsed).toBeGreaterThan(0);
    expect(sent[dropUsed - 1]).toMatch(/^declare @name sysname = \(select d\.name from sys\.default_constraints d .* drop constraint ' \+ @name\)$/s);
  });

  it('when the first schema is created, then the idempotency index is filtered so many NULL keys may coexist', async () => {
    const { db, queries } = recordingMssql();
    await capacityMigrations('mssql')['20261130-10-capacity-tables']?.up(db);
    expect(queries.map((q) => q.sql)).toContain(
      'create unique index "capacity_leases_idempotency" on "capacity_leases" ("tenant_id", "idempotency_key") where "idempotency_key" is not null',
    );
    expect(queries.some((q) => /without rowid/.test(q.sql))).toBe(false);
  });
});
