import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTableServer, type RunningTableServer } from '../../local/azurite/table-server';
import { ManualClock } from '../../shared/platform/time/clock';
import type { SqlStore } from '../../shared/platform/sql/database';
import type { Observer } from '../../shared/inventory/observer';
import { createTestDatabase, postgresSkipReason, skipDialect, type TestDatabase } from '../support/databases';
import { applyToCloud, inventoryOver, specificationApplied, TEST_PROJECT, type TestResource } from '../support/inventory';

const RESOURCES: readonly TestResource[] = Array.from({ length: 20 }, (_, i) => ({ name: `r${i}`, type: 'local:compute:Service', properties: { name: `r${i}`, size: 'small' } }));
const skip = skipDialect('postgres');
if (skip) console.warn(`[inventory-two-hosts] SKIPPED: ${postgresSkipReason()}`);

/**
 * Two hosts on one PostgreSQL database scan the same drifted environment at the same moment, one from its timer
 * (scanDue) and one from the scan endpoint's use case, round after round, while the drift changes between rounds.
 * The one open proposal per environment must hold by construction (row lock and unique filtered index), not by
 * timing.
 */
describe.skipIf(skip)('inventory scans from two hosts on PostgreSQL', () => {
  let server: RunningTableServer;
  let database: TestDatabase;
  let second: SqlStore;

  beforeAll(async () => {
    server = await startTableServer();
    database = await createTestDatabase('postgres');
    second = database.connectAgain();
  });
  afterAll(async () => {
    await second?.close();
    await database?.drop();
    await server?.close();
  });

  it('when the timer on one host and the scan endpoint on the other scan one environment at once, then exactly one proposal is open after every round and each is proposed once', async () => {
    const clock = new ManualClock('2026-06-01T00:00:00Z');
    // Both observations return together, so both scans reach their proposal transaction at the same moment.
    let waiting: (() => void)[] = [];
    const together = (observer: Observer): Observer => ({
      name: observer.name,
      async observe(scope, options) {
        const resources = await observer.observe(scope, options);
        await new Promise<void>((resolve) => {
          waiting.push(resolve);
          if (waiting.length === 2) {
            for (const release of waiting) release();
            waiting = [];
          }
        });
        return resources;
      },
    });
    const hostA = inventoryOver(database.store, server.connectionString, clock, { wrapObserver: together });
    const hostB = inventoryOver(second, server.connectionString, clock, { wrapObserver: together });
    const stack = 'stack-two-hosts';
    await applyToCloud(hostA.cloud, stack, RESOURCES);
    await inventoryOver(database.store, server.connectionString, clock).inventory.recordSpecification({ id: 'event-1', time: clock.now().toISOString(), data: specificationApplied({ id: 'env-two-hosts', stack }, RESOURCES) });
    const resources = await hostA.cloud.listStack('local', { tenant: 'tenant-a', project: TEST_PROJECT, stack });

    const fingerprints = new Set<string>();
    for (let round = 0; round < 40; round++) {
      // The drift changes in three rounds of four (another resource tampered), so rounds both supersede and see again.
      if (round % 4 !== 3) {
        const target = resources[round % resources.length]!;
        await hostA.cloud.update('local', target.id, { name: target.properties.name, size: `large-${round}` });
      }
      clock.advance(300_000);
      const [timer, manual] = await Promise.all([hostA.inventory.scanDue(), hostB.inventory.scan({ tenant: 'tenant-a', id: 'env-two-hosts' }, { kind: 'manual', by: 'op-1' })]);
      expect(timer.map((r) => r.outcome)).toEqual(['completed']);
      expect(manual.outcome).toBe('completed');

      const open = (await hostA.inventory.listProposals({ kind: 'all' }, { environment: 'env-two-hosts', status: 'open', limit: 10 })).items;
      expect(open, `round ${round}`).toHaveLength(1);
      fingerprints.add(open[0]!.fingerprint);
    }

    const all = (await hostA.inventory.listProposals({ kind: 'all' }, { environment: 'env-two-hosts', limit: 1000 })).items;
    expect(all).toHaveLength(fingerprints.size);
    expect(all.filter((p) => p.status === 'superseded')).toHaveLength(fingerprints.size - 1);
    const proposed = await database.store.db.selectFrom('outbox').select('payload').where('payload', 'like', '%"type":"ReconciliationProposed"%').execute();
    const proposedIds = proposed.map((row) => (JSON.parse(String(row.payload)) as { data: { proposalId: string } }).data.proposalId);
    expect(new Set(proposedIds).size).toBe(proposedIds.length);
    expect(proposedIds.sort()).toEqual(all.map((p) => p.id).sort());
  });
});
