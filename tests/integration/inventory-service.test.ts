import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTableServer, type RunningTableServer } from '../../local/azurite/table-server';
import { ManualClock } from '../../shared/platform/time/clock';
import type { InventoryService } from '../../shared/inventory/inventory.service';
import type { LocalCloud } from '../../local/cloud/local-cloud';
import { createTableStore, type TableStore } from '../../shared/platform/tables/tables';
import { createObservedInventory, tableKey } from '../../shared/inventory/observed-inventory.repository';
import { createTestDatabase, REPOSITORY_DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import type { EnvironmentKey } from '../../shared/inventory/environment';
import { applyToCloud, inventoryOver, specificationApplied, TEST_PROJECT, urnOf, type TestResource } from '../support/inventory';
import { tableStoreWithPolicy } from '../support/table-servers';

const ALL = { kind: 'all' } as const;
/** The tenant of every environment of these tests (`specificationApplied`'s default). */
const TENANT = 'tenant-a';
/** The key of the test tenant's environment `id`. */
const keyOf = (id: string): EnvironmentKey => ({ tenant: TENANT, id });
const RESOURCES: readonly TestResource[] = [
  { name: 'assets', type: 'local:storage:Bucket', properties: { name: 'demo-assets', versioning: true } },
  { name: 'api', type: 'local:compute:Service', properties: { name: 'demo-api', size: 'small', env: { DB_PASSWORD: { secretRef: 'broker://demo/db' } } } },
];
// What the apply put in the cloud: the secret reference resolved to its value.
const SECRET = 's3cr3t-value-never-stored';
const resolved = (r: TestResource) => (r.name === 'api' ? { ...r.properties, env: { DB_PASSWORD: SECRET } } : r.properties);

/**
 * `count` observed resources of a stack: the first 110 urns are longer than a Table key may be (hashed, `sha256-…`),
 * the next 100 hold characters a key may not (percent-encoded), the rest are plain. In key order the hashed come
 * first, so it is not urn order, and with pages of 100 the first page ends on a hashed key and the second on an
 * encoded one: keys whose urns differ from them.
 */
function manyResources(stack: string, count: number) {
  return Array.from({ length: count }, (_, i) => {
    const name = i < 110 ? `${'long-'.repeat(120)}${i}` : i < 210 ? `dir/${i}#frag?q\\x%20` : `svc-${String(i).padStart(4, '0')}`;
    const urn = `urn:pulumi:${stack}::demo::local:compute:Service::${name}`;
    return { urn, type: 'local:compute:Service', id: `id-${i}`, properties: { index: i } };
  });
}

/** A Table store whose clients count the query requests sent and the entities they answered with. */
function countingTableStore(connection: string): { store: TableStore; read: { requests: number; entities: number } } {
  const read = { requests: 0, entities: 0 };
  const store = tableStoreWithPolicy(connection, {
    name: 'countEntitiesRead',
    async sendRequest(request, next) {
      const response = await next(request);
      const body = request.method === 'GET' && response.bodyAsText ? (JSON.parse(response.bodyAsText) as { value?: unknown }) : {};
      if (Array.isArray(body.value)) {
        read.requests++;
        read.entities += body.value.length;
      }
      return response;
    },
  });
  return { store, read };
}

describe.each(REPOSITORY_DIALECTS)('inventory scans on %s', (dialect) => {
  let server: RunningTableServer;
  let database: TestDatabase;
  let clock: ManualClock;
  let inventory: InventoryService;
  let cloud: LocalCloud;
  let environmentCount = 0;

  beforeAll(async () => {
    if (skipDialect(dialect)) return;
    server = await startTableServer();
    database = await createTestDatabase(dialect);
    clock = new ManualClock('2026-06-01T00:00:00Z');
    ({ inventory, cloud } = inventoryOver(database.store, server.connectionString, clock));
  });
  afterAll(async () => {
    await database?.drop();
    await server?.close();
  });

  /** A fresh environment with the resources applied and its desired state recorded. */
  async function appliedEnvironment(): Promise<{ id: string; stack: string }> {
    const id = `env-${dialect}-${++environmentCount}`;
    const stack = `stack-${id}`;
    await applyToCloud(cloud, stack, RESOURCES, resolved);
    const recorded = await inventory.recordSpecification({ id: `event-${id}`, time: clock.now().toISOString(), data: specificationApplied({ id, stack }, RESOURCES) });
    expect(recorded).toEqual({ outcome: 'recorded', environment: keyOf(id) });
    return { id, stack };
  }

  const resourceId = async (stack: string, name: string) => (await cloud.listStack('local', { tenant: TENANT, project: TEST_PROJECT, stack })).find((r) => r.urn.endsWith(`::${name}`))!.id;

  it.skipIf(skipDialect(dialect))('when an applied environment is scanned, then it is in sync and its inventory holds its resources without the secret', async () => {
    const { id } = await appliedEnvironment();
    expect((await inventory.getEnvironment(ALL, id)).drift.status).toBe('unknown');
    const scan = await inventory.scan(keyOf(id), { kind: 'manual', by: 'op-1' });
    expect(scan).toMatchObject({ outcome: 'completed', resources: 2, findings: 0, driftStatus: 'in-sync', written: 2, deleted: 0 });
    const view = await inventory.inventory(ALL, id, { limit: 1000 });
    expect(view.environment.drift).toMatchObject({ status: 'in-sync', stale: false, lastObservedAt: clock.now().toISOString() });
    expect(view.items.map((r) => r.type).sort()).toEqual(['local:compute:Service', 'local:storage:Bucket']);
    const api = view.items.find((r) => r.type === 'local:compute:Service')!;
    expect(api.properties).toEqual({ name: 'demo-api', size: 'small', env: { DB_PASSWORD: { secretRef: 'broker://demo/db' } } });
    expect(JSON.stringify(view)).not.toContain(SECRET);
    // An unchanged observation writes no rows.
    expect(await inventory.scan(keyOf(id), { kind: 'timer' })).toMatchObject({ outcome: 'completed', written: 0, deleted: 0 });
  });

  it.skipIf(skipDialect(dialect))('when a property is tampered with, then the environment is drifted with one proposal that a rescan keeps, and drift gone resolves it', async () => {
    const { id, stack } = await appliedEnvironment();
    await inventory.scan(keyOf(id), { kind: 'timer' });
    await cloud.update('local', await resourceId(stack, 'assets'), { name: 'demo-assets', versioning: false });

    const first = await inventory.scan(keyOf(id), { kind: 'timer' });
    expect(first).toMatchObject({ outcome: 'completed', findings: 1, driftStatus: 'drifted' });
    const drift = await inventory.drift(ALL, id);
    expect(drift.environment.drift.status).toBe('drifted');
    expect(drift.findings).toEqual([
      {
        urn: urnOf(stack, RESOURCES[0]!),
        type: 'local:storage:Bucket',
        severity: 'medium',
        findings: [{ kind: 'modified', severity: 'medium', urn: urnOf(stack, RESOURCES[0]!), type: 'local:storage:Bucket', path: ['versioning'], desired: true, observed: false }],
      },
    ]);
    const [proposal] = (await inventory.listProposals(ALL, { environment: id, status: 'open', limit: 10 })).items;
    expect(proposal).toMatchObject({ status: 'open', plan: { steps: [{ urn: urnOf(stack, RESOURCES[0]!), op: 'update', paths: ['versioning'] }], leftAlone: [] } });
    expect(drift.openProposalId).toBe(proposal!.id);

    clock.advance(60_000);
    await inventory.scan(keyOf(id), { kind: 'manual', by: 'op-1' });
    const proposals = (await inventory.listProposals(ALL, { environment: id, limit: 10 })).items;
    expect(proposals).toHaveLength(1);
    expect(proposals[0]).toMatchObject({ id: proposal!.id, status: 'open', lastSeenAt: clock.now().toISOString(), createdAt: proposal!.createdAt });

    // Different findings supersede the open proposal with a pointer to the new one.
    await cloud.delete('local', await resourceId(stack, 'api'));
    await inventory.scan(keyOf(id), { kind: 'timer' });
    const after = (await inventory.listProposals(ALL, { environment: id, limit: 10 })).items;
    const open = after.find((p) => p.status === 'open')!;
    expect(after.find((p) => p.id === proposal!.id)).toMatchObject({ status: 'superseded', supersededBy: open.id });
    expect(open.findings.map((g) => [g.severity, g.findings.map((f) => f.kind)])).toEqual([
      ['high', ['missing']],
      ['medium', ['modified']],
    ]);

    // Drift gone: resolved on its own, and the environment is in sync.
    await cloud.update('local', await resourceId(stack, 'assets'), { name: 'demo-assets', versioning: true });
    await applyToCloud(cloud, stack, [RESOURCES[1]!], resolved);
    expect(await inventory.scan(keyOf(id), { kind: 'timer' })).toMatchObject({ driftStatus: 'in-sync' });
    expect((await inventory.getProposal(ALL, open.id)).status).toBe('resolved');
    expect((await inventory.listProposals(ALL, { environment: id, status: 'open', limit: 10 })).items).toEqual([]);
  });

  it.skipIf(skipDialect(dialect))('when the target is unreachable, then the status is unknown and stale with its times, and in sync again once it answers', async () => {
    const { id } = await appliedEnvironment();
    await inventory.scan(keyOf(id), { kind: 'timer' });
    const observedAt = clock.now().toISOString();
    clock.advance(60_000);
    await cloud.setReachable('local', false);
    try {
      const failed = await inventory.scan(keyOf(id), { kind: 'timer' });
      expect(failed).toMatchObject({ outcome: 'failed' });
      expect(failed.reason).toContain('INVENTORY.TARGET_UNREACHABLE');
      const staleSince = clock.now().toISOString();
      clock.advance(60_000);
      await inventory.scan(keyOf(id), { kind: 'timer' });
      expect((await inventory.getEnvironment(ALL, id)).drift).toMatchObject({ status: 'unknown', stale: true, lastObservedAt: observedAt, staleSince });
    } finally {
      await cloud.setReachable('local', true);
    }
    clock.advance(1_000);
    await inventory.scan(keyOf(id), { kind: 'timer' });
    const drift = (await inventory.getEnvironment(ALL, id)).drift;
    expect(drift).toMatchObject({ status: 'in-sync', stale: false, lastObservedAt: clock.now().toISOString() });
    expect(drift.staleSince).toBeUndefined();
    const scans = (await inventory.drift(ALL, id)).scans;
    expect(scans.map((s) => s.outcome)).toEqual(['completed', 'failed', 'failed', 'completed']);
  });

  it.skipIf(skipDialect(dialect))('when the observed inventory cannot be stored, then the scan fails and the environment is stale, never in sync', async () => {
    const { id } = await appliedEnvironment();
    const tables = createObservedInventory(createTableStore(server.connectionString));
    const broken = inventoryOver(database.store, server.connectionString, clock, {
      tables: { ...tables, replace: () => Promise.reject(new Error('table service unavailable')) },
    }).inventory;
    const scan = await broken.scan(keyOf(id), { kind: 'timer' });
    expect(scan).toMatchObject({ outcome: 'failed', reason: 'the observed inventory could not be stored: table service unavailable' });
    expect((await inventory.getEnvironment(ALL, id)).drift).toMatchObject({ status: 'unknown', stale: true });
  });

  it.skipIf(skipDialect(dialect))('when an unmanaged resource appears and an ignore rule covers a change, then the resource is found and the change is listed as ignored by the rule', async () => {
    const { id, stack } = await appliedEnvironment();
    const debug = `urn:pulumi:${stack}::${TEST_PROJECT}::local:compute:Service::debug`;
    await cloud.create('local', { scope: TENANT, urn: debug, type: 'local:compute:Service', properties: { name: 'debug' } });
    // Another tenant's resource in a stack of the same project and stack names: never this environment's, unmanaged or not.
    await cloud.create('local', { scope: 'tenant-b', urn: `urn:pulumi:${stack}::${TEST_PROJECT}::local:compute:Service::intruder`, type: 'local:compute:Service', properties: { name: 'intruder' } });
    await cloud.update('local', await resourceId(stack, 'api'), { name: 'demo-api', size: 'large', env: { DB_PASSWORD: SECRET } });
    const asked = { scope: { type: 'local:compute:Service' }, path: 'size', reason: 'autoscaler', owner: 'platform', expiresAt: '2026-07-01T00:00:00.000Z', holdsOnApply: true };
    const { rule, created } = await inventory.addIgnoreRule(ALL, id, asked, { by: 'op-1', idempotencyKey: 'rule-1' });
    expect(created).toBe(true);
    expect(rule).toMatchObject({ createdBy: 'op-1', holdsOnApply: true });
    // The same key again: the same rule, not a second one; the key for another rule is refused.
    expect(await inventory.addIgnoreRule(ALL, id, asked, { by: 'op-1', idempotencyKey: 'rule-1' })).toEqual({ rule, created: false });
    await expect(inventory.addIgnoreRule(ALL, id, { ...asked, path: 'name' }, { by: 'op-1', idempotencyKey: 'rule-1' })).rejects.toMatchObject({ code: 'REQUEST.IDEMPOTENCY_KEY_REUSED' });
    expect((await inventory.listIgnoreRules(ALL, id, { limit: 10, includeDeleted: false })).items.map((r) => r.id)).toEqual([rule.id]);

    await inventory.scan(keyOf(id), { kind: 'timer' });
    const drift = await inventory.drift(ALL, id);
    expect(drift.findings.flatMap((g) => g.findings.map((f) => [f.kind, f.urn]))).toEqual([['unmanaged', debug]]);
    expect(drift.ignored).toEqual([expect.objectContaining({ kind: 'modified', path: ['size'], desired: 'small', observed: 'large', ignoredBy: [rule.id], holdsOnApply: true })]);
    const [proposal] = (await inventory.listProposals(ALL, { environment: id, status: 'open', limit: 1 })).items;
    expect(proposal!.plan).toMatchObject({ steps: [], leftAlone: [debug], keptByRules: [{ path: 'size', ruleIds: [rule.id] }] });

    // Past its expiry the rule applies to nothing: the change is a finding again, and the rule is named as expired.
    clock.set('2026-07-02T00:00:00Z');
    await inventory.scan(keyOf(id), { kind: 'timer' });
    const later = await inventory.drift(ALL, id);
    expect(later.expiredRules).toEqual([rule.id]);
    expect(later.findings.flatMap((g) => g.findings.map((f) => f.kind)).sort()).toEqual(['modified', 'unmanaged']);
    clock.set('2026-06-01T00:00:00Z');
  });

  it.skipIf(skipDialect(dialect))('when scans are paused or the stack is applying, then the skip is recorded with why, and an environment not scanned for twice its interval is unknown', async () => {
    const { id } = await appliedEnvironment();
    await inventory.scan(keyOf(id), { kind: 'timer' });
    await inventory.setScanning(ALL, id, { enabled: false, by: 'op-2', reason: 'maintenance window' });
    const skipped = await inventory.scan(keyOf(id), { kind: 'timer' });
    expect(skipped).toMatchObject({ outcome: 'skipped', reason: 'scans are paused by op-2: maintenance window' });

    clock.advance(2 * 300_000 + 1);
    const view = await inventory.getEnvironment(ALL, id);
    expect(view.drift.status).toBe('unknown');
    expect(view.drift.reason).toContain('scans are paused by op-2');
    expect(view.scanning.paused).toMatchObject({ by: 'op-2', reason: 'maintenance window' });
    await inventory.setScanning(ALL, id, { enabled: true, by: 'op-2', reason: 'done' });

    const busy = inventoryOver(database.store, server.connectionString, clock, { applyingRun: async () => 'run-42' }).inventory;
    expect(await busy.scan(keyOf(id), { kind: 'timer' })).toMatchObject({ outcome: 'skipped', reason: 'the environment is busy applying (run run-42)' });
    expect((await inventory.getEnvironment(ALL, id)).drift.status).toBe('unknown');
  });

  it.skipIf(skipDialect(dialect))('when an inventory is paged with a cursor, then every resource comes once, in stored key order, hashed and encoded urns included', async () => {
    const { id, stack } = await appliedEnvironment();
    const resources = manyResources(stack, 250);
    await createObservedInventory(createTableStore(server.connectionString)).replace(keyOf(id), resources, { at: clock.now(), scanId: 'scan-seeded' });

    const urns: string[] = [];
    const pageSizes: number[] = [];
    let cursor: string | undefined;
    do {
      const page = await inventory.inventory({ kind: 'one', tenant: 'tenant-a' }, id, { limit: 100, ...(cursor !== undefined ? { cursor } : {}) });
      expect(page.environment.id).toBe(id);
      pageSizes.push(page.items.length);
      urns.push(...page.items.map((r) => r.urn));
      cursor = page.nextCursor;
    } while (cursor !== undefined && pageSizes.length < 10);

    expect(pageSizes).toEqual([100, 100, 50]);
    expect(new Set(urns).size).toBe(urns.length);
    expect([...urns].sort()).toEqual(resources.map((r) => r.urn).sort());
    // Stored key order: the hashed keys (`sha256-…`) come before every `urn:…` key, so this is not urn order.
    const keys = urns.map(tableKey);
    expect(keys).toEqual([...keys].sort());
    expect(urns).not.toEqual([...urns].sort());

    await expect(inventory.inventory(ALL, id, { limit: 10, cursor: 'not-a-cursor!' })).rejects.toMatchObject({ code: 'REQUEST.INVALID_CURSOR' });
    await expect(inventory.inventory({ kind: 'one', tenant: 'tenant-b' }, id, { limit: 10 })).rejects.toMatchObject({ code: 'INVENTORY.ENVIRONMENT_NOT_FOUND' });
  });

  it.skipIf(skipDialect(dialect))('when a page of a large inventory is asked for, then about one page is read from Table storage, not the whole partition', async () => {
    const { id, stack } = await appliedEnvironment();
    await createObservedInventory(createTableStore(server.connectionString)).replace(keyOf(id), manyResources(stack, 1_000), { at: clock.now(), scanId: 'scan-seeded' });
    const { store, read } = countingTableStore(server.connectionString);
    const counted = inventoryOver(database.store, server.connectionString, clock, { tables: createObservedInventory(store) }).inventory;

    const first = await counted.inventory(ALL, id, { limit: 100 });
    expect(first.items).toHaveLength(100);
    expect(read.requests).toBe(1);
    expect(read.entities).toBeLessThanOrEqual(101);

    read.requests = 0;
    read.entities = 0;
    const second = await counted.inventory(ALL, id, { limit: 100, cursor: first.nextCursor ?? '' });
    expect(second.items).toHaveLength(100);
    expect(read.requests).toBe(1);
    expect(read.entities).toBeLessThanOrEqual(101);
  });

  it.skipIf(skipDialect(dialect))('when Table storage does not answer, then the inventory view fails as unavailable (a 503)', async () => {
    const { id } = await appliedEnvironment();
    const unreachable = createTableStore(server.connectionString.replace(/TableEndpoint=http:\/\/127\.0\.0\.1:\d+/, 'TableEndpoint=http://127.0.0.1:9'));
    const broken = inventoryOver(database.store, server.connectionString, clock, { tables: createObservedInventory(unreachable) }).inventory;
    await expect(broken.inventory(ALL, id, { limit: 10 })).rejects.toMatchObject({ code: 'INVENTORY.TABLES_UNAVAILABLE', kind: 'unavailable' });
  }, 30_000);

  it.skipIf(skipDialect(dialect))('when a tenant reads, then only its environments and proposals are shown', async () => {
    const { id } = await appliedEnvironment();
    const all: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await inventory.listEnvironments({ kind: 'one', tenant: 'tenant-a' }, { limit: 2, ...(cursor !== undefined ? { cursor } : {}) });
      expect(page.items.length).toBeLessThanOrEqual(2);
      all.push(...page.items.map((e) => e.id));
      cursor = page.nextCursor;
    } while (cursor !== undefined);
    // Paged in id order, each environment once, the tenant's only.
    expect(all).toEqual([...new Set(all)].sort());
    expect(all).toContain(id);
    expect(all.length).toBe(environmentCount);
    expect((await inventory.listEnvironments({ kind: 'one', tenant: 'tenant-b' }, { limit: 10 })).items).toEqual([]);
    await expect(inventory.listEnvironments(ALL, { limit: 10, cursor: 'not-a-cursor!' })).rejects.toMatchObject({ code: 'REQUEST.INVALID_CURSOR' });
    await expect(inventory.getEnvironment({ kind: 'one', tenant: 'tenant-b' }, id)).rejects.toMatchObject({ code: 'INVENTORY.ENVIRONMENT_NOT_FOUND' });
  });
});
