import { describe, expect, it } from 'vitest';
import { createCapacityService } from '../../shared/capacity/capacity.service';
import { capacityMigrations } from '../../shared/capacity/capacity.migrations';
import { ManualClock, randomIds } from '../../shared/platform/time/clock';
import { aLeaseRequest } from '../support/builders';
import { recordingMssql, type RecordedQuery } from '../support/recording-mssql';

/** What Azure SQL would receive: Kysely's real T-SQL compiler, statements recorded instead of sent. */
function recordingService(answer?: (query: RecordedQuery) => { rows: unknown[]; numAffectedRows?: bigint }) {
  const { db, queries } = recordingMssql(answer);
  const capacity = createCapacityService({ store: { db, dialect: 'mssql', close: () => Promise.resolve() }, clock: new ManualClock(), ids: randomIds });
  return { capacity, queries };
}

describe('capacity on Azure SQL (compiled T-SQL)', () => {
  it('when a lease is acquired, then quota and pool are taken by conditional UPDATEs and the token comes from OUTPUT', async () => {
    const { capacity, queries } = recordingService((q) =>
      /update "capacity_pools"/.test(q.sql) ? { rows: [{ id: 'pool-attempt', fencing_counter: 7 }], numAffectedRows: 1n } : { rows: [], numAffectedRows: 1n },
    );
    const { lease } = await capacity.acquire(aLeaseRequest({ pool: 'pool-attempt' }));
    expect(lease.fencingToken).toBe(7);
    const statements = queries.map((q) => q.sql);
    expect(statements[0]).toBe('begin transaction');
    expect(statements[1]).toMatch(/^update "capacity_tenant_usage" set "used" = "used" \+ @1 .* and exists \(select 1 as "one"/);
    expect(statements[2]).toMatch(/^update "capacity_pools" .* output "inserted"\."id", "inserted"\."fencing_counter" where .*used \+ @\d+ <= capacity/);
    expect(statements[3]).toMatch(/^insert into "capacity_leases"/);
    expect(statements.at(-1)).toBe('commit');
    expect(statements.some((s) => / returning /.test(s))).toBe(false);
  });

  it('when no pool is named, then the pick uses TOP (1) rather than LIMIT', async () => {
    const { capacity, queries } = recordingService((q) =>
      /update "capacity_pools"/.test(q.sql) ? { rows: [{ id: 'p', fencing_counter: 1 }], numAffectedRows: 1n } : { rows: [], numAffectedRows: 1n },
    );
    await capacity.acquire(aLeaseRequest());
    const pick = queries.find((q) => /update "capacity_pools"/.test(q.sql))?.sql ?? '';
    expect(pick).toMatch(/select top\(1\) "p"\."id"/);
    expect(pick).not.toMatch(/ limit /);
  });

  it('when the schema is created, then the idempotency index is filtered so many NULL keys may coexist', async () => {
    const { db, queries } = recordingMssql();
    const migration = capacityMigrations('mssql')['20261130-10-capacity-tables'];
    await migration?.up(db);
    const index = queries.find((q) => /create unique index "capacity_leases_idempotency"/.test(q.sql))?.sql;
    expect(index).toMatch(/where "idempotency_key" is not null/);
    expect(queries.some((q) => /without rowid/.test(q.sql))).toBe(false);
  });
});
