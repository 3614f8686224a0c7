import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningTableServer } from '../../local/azurite/table-server';
import type { EnvironmentKey } from '../../shared/inventory/environment';
import type { InventoryService } from '../../shared/inventory/inventory.service';
import { createObservedInventory } from '../../shared/inventory/observed-inventory.repository';
import type { Observer } from '../../shared/inventory/observer';
import type { LocalCloud } from '../../local/cloud/local-cloud';
import { AppError } from '../../shared/platform/errors/app-error';
import type { SqlStore } from '../../shared/platform/sql/database';
import { ManualClock } from '../../shared/platform/time/clock';
import { createTestDatabase, DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { applyToCloud, inventoryOver, specificationApplied, TEST_PROJECT, type TestResource } from '../support/inventory';
import { Gate, startTableServerOf, TABLE_SERVERS, tableStoreHoldingBatch } from '../support/table-servers';

const RESOURCES: readonly TestResource[] = [
  { name: 'assets', type: 'local:storage:Bucket', properties: { name: 'demo-assets', versioning: true } },
  { name: 'api', type: 'local:compute:Service', properties: { name: 'demo-api', size: 'small' } },
];

/**
 * Two hosts (two connection pools on one database, one Table server) scan one environment, and the first host's
 * scan is held at a gate (after its observation, or before its Table write) while the second scans it later and
 * finishes. Then the first goes on: its late failure never marks stale what the second observed, and its older
 * observation never replaces the newer one, in Table storage or in SQL. Each environment of one tenant only.
 */
describe.each(DIALECTS.flatMap((dialect) => TABLE_SERVERS.map((tables) => [dialect, tables] as const)))('scans of two hosts interleaved on %s with the %s Table server', (dialect, tables) => {
  let server: RunningTableServer;
  let database: TestDatabase;
  let second: SqlStore;
  let clock: ManualClock;
  let cloud: LocalCloud;
  let later: InventoryService;
  let environments = 0;
  /** The gate the first host's next observation waits at, once it has observed. */
  let observationGate: Gate | undefined;

  beforeAll(async () => {
    if (skipDialect(dialect)) return;
    server = await startTableServerOf(tables);
    database = await createTestDatabase(dialect);
    second = database.connectAgain();
    clock = new ManualClock('2026-06-01T00:00:00Z');
    ({ inventory: later, cloud } = inventoryOver(second, server.connectionString, clock));
  });
  afterAll(async () => {
    await second?.close();
    await database?.drop();
    await server?.close();
  });

  /**
   * The first host: its observer waits at `observationGate` (when one is set) after observing, and its Table store
   * holds its first transaction at `batchGate` (when given). Its observation never times out while it is held.
   */
  const firstHost = (batchGate?: Gate) => {
    const held = (observer: Observer): Observer => ({
      name: observer.name,
      async observe(scope, options) {
        const resources = await observer.observe(scope, options);
        const gate = observationGate;
        observationGate = undefined;
        await gate?.pass();
        return resources;
      },
    });
    return inventoryOver(database.store, server.connectionString, clock, {
      wrapObserver: held,
      observeTimeoutMs: 3_600_000,
      ...(batchGate ? { tables: createObservedInventory(tableStoreHoldingBatch(server.connectionString, 1, batchGate)) } : {}),
    }).inventory;
  };

  async function appliedEnvironment(tenant = 'tenant-a', id = `env-${dialect}-${tables}-${++environments}`): Promise<EnvironmentKey & { stack: string }> {
    const stack = `stack-${id}`;
    await applyToCloud(cloud, stack, RESOURCES, (r) => r.properties, tenant);
    await later.recordSpecification({ id: `event-${tenant}-${id}`, time: clock.now().toISOString(), data: specificationApplied({ id, stack, tenant }, RESOURCES) });
    return { tenant, id, stack };
  }
  const driftOf = async (key: EnvironmentKey) => (await later.getEnvironment({ kind: 'one', tenant: key.tenant }, key.id)).drift;
  const sizeInInventory = async (key: EnvironmentKey) =>
    (await later.inventory({ kind: 'one', tenant: key.tenant }, key.id, { limit: 10 })).items.find((r) => r.type === 'local:compute:Service')?.properties?.size;
  const tamper = async (key: EnvironmentKey & { stack: string }, size: string) => {
    const api = (await cloud.listStack('local', { tenant: key.tenant, project: TEST_PROJECT, stack: key.stack })).find((r) => r.urn.endsWith('::api'))!;
    await cloud.update('local', api.id, { name: 'demo-api', size });
  };

  /** Starts the first host's scan of `key`, held after its observation or at its first Table batch, once it is there. */
  const heldScan = async (key: EnvironmentKey, at: 'observation' | 'batch') => {
    const gate = new Gate();
    if (at === 'observation') observationGate = gate;
    const scan = firstHost(at === 'batch' ? gate : undefined).scan(key, { kind: 'timer' });
    await gate.reached;
    return { gate, scan };
  };
  /** A minute on, the second host scans `key` to its end. */
  const laterScan = (key: EnvironmentKey) => {
    clock.advance(60_000);
    return later.scan(key, { kind: 'manual', by: 'op-1' });
  };
  const unreachable = () => new AppError('INVENTORY.TARGET_UNREACHABLE', 'unavailable', 'the target did not answer');

  it.skipIf(skipDialect(dialect))("when a scan's observation fails after another host's later scan observed the environment, then the environment stays observed and in sync, never stale", async () => {
    const key = await appliedEnvironment();
    const early = await heldScan(key, 'observation');
    expect(await laterScan(key)).toMatchObject({ outcome: 'completed', driftStatus: 'in-sync' });

    early.gate.open(unreachable());
    const failed = await early.scan;

    expect(failed.outcome).toBe('failed');
    expect(failed.reason).toContain('a newer observation is recorded, so the environment is not marked stale');
    expect(await driftOf(key)).toMatchObject({ status: 'in-sync', stale: false, lastObservedAt: clock.now().toISOString() });
    expect((await driftOf(key)).staleSince).toBeUndefined();
  });

  it.skipIf(skipDialect(dialect))("when a scan's Table write fails after another host's later scan stored and recorded its observation, then the environment is not marked stale", async () => {
    const key = await appliedEnvironment();
    const early = await heldScan(key, 'batch');
    expect(await laterScan(key)).toMatchObject({ outcome: 'completed' });

    early.gate.open(new Error('Table storage did not answer'));

    expect(await early.scan).toMatchObject({ outcome: 'failed', reason: expect.stringContaining('not marked stale') });
    expect(await driftOf(key)).toMatchObject({ status: 'in-sync', stale: false, lastObservedAt: clock.now().toISOString() });
  });

  it.skipIf(skipDialect(dialect))('when an older observation comes back after a newer one was recorded, then the newer one stays: its rows, its drift and its proposal', async () => {
    const key = await appliedEnvironment();
    // The first host observes the environment in sync, and is held; then the target drifts and the second host sees it.
    const early = await heldScan(key, 'observation');
    await tamper(key, 'large');
    expect(await laterScan(key)).toMatchObject({ outcome: 'completed', driftStatus: 'drifted' });

    early.gate.open();

    expect(await early.scan).toMatchObject({ outcome: 'skipped', reason: expect.stringContaining('a newer observation is recorded') });
    expect(await driftOf(key)).toMatchObject({ status: 'drifted', stale: false, lastObservedAt: clock.now().toISOString() });
    expect(await sizeInInventory(key)).toBe('large');
    expect((await later.listProposals({ kind: 'one', tenant: key.tenant }, { environment: key.id, status: 'open', limit: 10 })).items).toHaveLength(1);
  });

  it.skipIf(skipDialect(dialect))('when an older observation reaches Table storage after a newer one was stored, then its write is superseded there and nothing of it is recorded', async () => {
    const key = await appliedEnvironment();
    // Held after its desired-state check, with its Table transaction built on what it read.
    const early = await heldScan(key, 'batch');
    await tamper(key, 'medium');
    expect(await laterScan(key)).toMatchObject({ outcome: 'completed', driftStatus: 'drifted' });

    early.gate.open();

    expect(await early.scan).toMatchObject({ outcome: 'skipped', reason: expect.stringContaining('a newer observation is stored') });
    expect(await driftOf(key)).toMatchObject({ status: 'drifted', stale: false, lastObservedAt: clock.now().toISOString() });
    expect(await sizeInInventory(key)).toBe('medium');
  });

  it.skipIf(skipDialect(dialect))("when two tenants have an environment of the same id, then a newer scan of one tenant's neither spares nor supersedes the other's", async () => {
    const a = await appliedEnvironment('tenant-a', `env-shared-${dialect}-${tables}`);
    const b = await appliedEnvironment('tenant-b', a.id);
    await tamper(b, 'large');

    // tenant-a's late failure: no newer observation of its own environment, so it is stale.
    const failing = await heldScan(a, 'observation');
    expect(await laterScan(b)).toMatchObject({ outcome: 'completed', driftStatus: 'drifted' });
    failing.gate.open(unreachable());
    expect(await failing.scan).toMatchObject({ outcome: 'failed', reason: 'INVENTORY.TARGET_UNREACHABLE: the target did not answer' });
    expect(await driftOf(a)).toMatchObject({ status: 'unknown', stale: true });
    expect(await driftOf(b)).toMatchObject({ status: 'drifted', stale: false });

    // tenant-a's older observation, stored after tenant-b's newer one: its own, and kept.
    clock.advance(60_000);
    const observing = await heldScan(a, 'observation');
    expect(await laterScan(b)).toMatchObject({ outcome: 'completed' });
    observing.gate.open();
    expect(await observing.scan).toMatchObject({ outcome: 'completed', driftStatus: 'in-sync' });
    expect(await driftOf(a)).toMatchObject({ status: 'in-sync', stale: false });
    expect(await sizeInInventory(a)).toBe('small');
    expect(await sizeInInventory(b)).toBe('large');
  });

  it.skipIf(skipDialect(dialect))('when the target is unreachable for a scan, then the environment is stale and never in sync, on either host, until one observes it', async () => {
    const key = await appliedEnvironment();
    expect(await later.scan(key, { kind: 'timer' })).toMatchObject({ outcome: 'completed', driftStatus: 'in-sync' });
    clock.advance(60_000);
    await cloud.setReachable('local', false);
    try {
      expect(await firstHost().scan(key, { kind: 'timer' })).toMatchObject({ outcome: 'failed', reason: expect.stringContaining('INVENTORY.TARGET_UNREACHABLE') });
      clock.advance(60_000);
      expect(await later.scan(key, { kind: 'manual', by: 'op-1' })).toMatchObject({ outcome: 'failed' });
      const drift = await driftOf(key);
      expect(drift).toMatchObject({ status: 'unknown', stale: true });
      expect(drift.status).not.toBe('in-sync');
    } finally {
      await cloud.setReachable('local', true);
    }
    clock.advance(60_000);
    expect(await firstHost().scan(key, { kind: 'timer' })).toMatchObject({ outcome: 'completed' });
    expect(await driftOf(key)).toMatchObject({ status: 'in-sync', stale: false });
  });
});
