import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningChild } from '../support/child-process';
import { postgresSkipReason, skipDialect, type TestDatabase } from '../support/databases';
import { startPostgresHosts, type PostgresHosts } from '../support/postgres-hosts';

const HOSTS = 4;
const skip = skipDialect('postgres');
if (skip) console.warn(`[capacity-multihost] SKIPPED: ${postgresSkipReason()}`);

describe.skipIf(skip)('capacity across 4 local hosts on one PostgreSQL', () => {
  let started: PostgresHosts | undefined;
  let database: TestDatabase;
  let hosts: readonly RunningChild[] = [];
  let token: PostgresHosts['token'];

  beforeAll(async () => {
    // All four start at once, so they also seed the bundled capacity file concurrently.
    started = await startPostgresHosts(HOSTS);
    ({ hosts, database, token } = started);
  }, 120_000);

  afterAll(async () => {
    await started?.stop();
  });

  it('when 200 acquires are spread over 4 hosts against a pool of 50, then exactly 50 are granted', async () => {
    const admin = await token({ roles: ['PlatformAdmin'] });
    const put = (path: string, body: unknown) =>
      fetch(new URL(path, hosts[0]?.url), {
        method: 'PUT',
        headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    expect((await put('/runtime-cloud/editions/bulk', { limits: { build: { maxUnits: 1000, maxTtlSeconds: 600 } } })).status).toBe(201);
    expect((await put('/runtime-cloud/tenants/multi', { edition: 'bulk' })).status).toBe(201);
    expect((await put('/runtime-cloud/pools/multi-50', { kind: 'build', target: 'local', capacity: 50 })).status).toBe(201);

    const lease = await token({ tenant: 'multi', scopes: ['factory.capacity.lease'] });
    const responses = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        fetch(new URL('/runtime-cloud/leases', hosts[i % HOSTS]?.url), {
          method: 'POST',
          headers: { authorization: `Bearer ${lease}`, 'content-type': 'application/json' },
          body: JSON.stringify({ kind: 'build', ttlSeconds: 300, holder: `w${i}`, pool: 'multi-50' }),
        }),
      ),
    );
    const statuses = responses.map((r) => r.status);
    expect(statuses.filter((s) => s === 201)).toHaveLength(50);
    expect(statuses.filter((s) => s === 429)).toHaveLength(150);
    const tokens = await Promise.all(responses.filter((r) => r.status === 201).map(async (r) => ((await r.clone().json()) as { fencingToken: number }).fencingToken));
    expect(new Set(tokens).size).toBe(50);
    // The rows agree: 50 of the pool's 50 rows held, each by one of the granted leases.
    const slots = await database.store.db.selectFrom('capacity_slots').select(['lease_id']).where('scope', '=', 'pool:multi-50').execute();
    expect(slots).toHaveLength(50);
    const leaseIds = await Promise.all(responses.filter((r) => r.status === 201).map(async (r) => ((await r.clone().json()) as { leaseId: string }).leaseId));
    expect(new Set(slots.map((s: { lease_id: string | null }) => s.lease_id))).toEqual(new Set(leaseIds));
    const seeded = await database.store.db.selectFrom('capacity_pools').select('id').where('id', 'like', 'local-%').execute();
    expect(seeded).toHaveLength(5);
  }, 60_000);
});
