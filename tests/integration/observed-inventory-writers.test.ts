import { TableClient } from '@azure/data-tables';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningTableServer } from '../../local/azurite/table-server';
import type { EnvironmentKey } from '../../shared/inventory/environment';
import { createObservedInventory, environmentPartition, INVENTORY_TABLE, type Observation, type ObservedInventory, type ObservedRow } from '../../shared/inventory/observed-inventory.repository';
import { createTableStore } from '../../shared/platform/tables/tables';
import { Gate, startTableServerOf, TABLE_SERVERS, tableStoreHoldingBatch } from '../support/table-servers';

/**
 * Two hosts write one environment's observed inventory at once: the writes are conditional (ETags, create-only
 * inserts, a head row fencing every batch), so the newer observation wins whichever order the batches reach Table
 * storage in. The interleaving is made by holding one writer's batch at a gate until the other has written.
 */
describe.each(TABLE_SERVERS)('observed inventory written by two hosts at once (%s Table server)', (kind) => {
  let server: RunningTableServer;
  let reader: ObservedInventory;
  const t1 = new Date('2026-06-01T00:00:00Z');
  const t2 = new Date('2026-06-01T00:05:00Z');
  let environments = 0;
  const anEnvironment = (tenant = 'tenant-a'): EnvironmentKey => ({ tenant, id: `env-${++environments}` });
  /** `count` resources, each with `size`: two observations differ in every row. */
  const resources = (count: number, size: string): ObservedRow[] => Array.from({ length: count }, (_, i) => ({ urn: `urn:r-${String(i).padStart(3, '0')}`, type: 't', id: `id-${i}`, properties: { size } }));
  const sizes = async (environment: EnvironmentKey) => {
    const rows = await reader.listPage(environment, { limit: 1000 });
    return { count: rows.length, sizes: [...new Set(rows.map((r) => r.resource.properties?.size))] };
  };
  /** Another host's write of an observation, held before its `n`-th Table transaction: resolves once it is there. */
  const heldWrite = async (n: number, environment: EnvironmentKey, rows: ObservedRow[], observation: Observation) => {
    const gate = new Gate();
    const writing = createObservedInventory(tableStoreHoldingBatch(server.connectionString, n, gate)).replace(environment, rows, observation);
    await gate.reached;
    return { gate, writing };
  };

  beforeAll(async () => {
    server = await startTableServerOf(kind);
    reader = createObservedInventory(createTableStore(server.connectionString));
  });
  afterAll(async () => {
    await server?.close();
  });

  it('when an older observation reaches Table storage after a newer one was stored, then it is superseded and the newer one stays', async () => {
    const environment = anEnvironment();
    const older = await heldWrite(1, environment, resources(20, 'old'), { at: t1, scanId: 'scan-old' });

    expect(await reader.replace(environment, resources(20, 'new'), { at: t2, scanId: 'scan-new' })).toMatchObject({ outcome: 'stored', written: 20 });
    older.gate.open();

    expect(await older.writing).toEqual({ outcome: 'superseded', by: { scanId: 'scan-new', observedAt: t2.toISOString() } });
    expect(await sizes(environment)).toEqual({ count: 20, sizes: ['new'] });
  });

  it('when a newer observation takes over the partition half way through an older one (three batches), then the older one stops and the partition is the newer one exactly', async () => {
    const environment = anEnvironment();
    await reader.replace(environment, resources(250, 'first'), { at: new Date(t1.getTime() - 60_000), scanId: 'scan-first' });
    // The older writer's first batch is written; its second waits until the newer one has written the whole partition.
    const older = await heldWrite(2, environment, resources(250, 'old'), { at: t1, scanId: 'scan-old' });

    expect(await reader.replace(environment, resources(240, 'new'), { at: t2, scanId: 'scan-new' })).toMatchObject({ outcome: 'stored', written: 240, deleted: 10 });
    older.gate.open();

    expect(await older.writing).toMatchObject({ outcome: 'superseded', by: { scanId: 'scan-new' } });
    expect(await sizes(environment)).toEqual({ count: 240, sizes: ['new'] });
  });

  it('when a newer observation is stored, then an older one arriving later writes nothing', async () => {
    const environment = anEnvironment();
    await reader.replace(environment, resources(3, 'new'), { at: t2, scanId: 'scan-new' });
    expect(await reader.replace(environment, resources(5, 'old'), { at: t1, scanId: 'scan-old' })).toMatchObject({ outcome: 'superseded' });
    expect(await sizes(environment)).toEqual({ count: 3, sizes: ['new'] });
  });

  it('when an older writer took the partition first and a newer one overtakes it, then the newer one re-reads on its conflict and completes', async () => {
    const environment = anEnvironment();
    // The newer writer reads the partition, then waits; the older one writes all of it meanwhile.
    const newer = await heldWrite(1, environment, resources(20, 'new'), { at: t2, scanId: 'scan-new' });
    expect(await reader.replace(environment, resources(25, 'old'), { at: t1, scanId: 'scan-old' })).toMatchObject({ outcome: 'stored', written: 25 });
    newer.gate.open();

    // Its held batch was built on what it read before: refused (412/409), read again, and written over the older one.
    expect(await newer.writing).toMatchObject({ outcome: 'stored', written: 20, deleted: 5 });
    expect(await sizes(environment)).toEqual({ count: 20, sizes: ['new'] });
  });

  it('when a writer stopped half way, then the next observation completes the partition and an unchanged one after it writes no row', async () => {
    const environment = anEnvironment();
    const stopped = await heldWrite(2, environment, resources(150, 'half'), { at: t1, scanId: 'scan-half' });
    stopped.gate.open(new Error('the host was stopped'));
    await expect(stopped.writing).rejects.toMatchObject({ code: 'INVENTORY.TABLES_UNAVAILABLE' });
    expect((await sizes(environment)).count).toBe(99);

    expect(await reader.replace(environment, resources(150, 'half'), { at: t2, scanId: 'scan-next' })).toMatchObject({ outcome: 'stored', written: 51, deleted: 0 });
    expect(await reader.replace(environment, resources(150, 'half'), { at: new Date(t2.getTime() + 60_000), scanId: 'scan-again' })).toMatchObject({ outcome: 'stored', written: 0, deleted: 0 });
    expect(await sizes(environment)).toEqual({ count: 150, sizes: ['half'] });
  });

  it('when two tenants have an environment of the same id, then a newer observation of one never supersedes an older one of the other', async () => {
    const a = anEnvironment('tenant-a');
    const b = { tenant: 'tenant-b', id: a.id };
    const older = await heldWrite(1, a, resources(4, 'a'), { at: t1, scanId: 'scan-a' });
    expect(await reader.replace(b, resources(6, 'b'), { at: t2, scanId: 'scan-b' })).toMatchObject({ outcome: 'stored', written: 6 });
    older.gate.open();

    expect(await older.writing).toMatchObject({ outcome: 'stored', written: 4 });
    expect(await sizes(a)).toEqual({ count: 4, sizes: ['a'] });
    expect(await sizes(b)).toEqual({ count: 6, sizes: ['b'] });
  });

  it('when a partition holds its head row, then the head is never listed as a resource', async () => {
    const environment = anEnvironment();
    await reader.replace(environment, resources(2, 's'), { at: t1, scanId: 'scan-1' });
    const table = TableClient.fromConnectionString(server.connectionString, INVENTORY_TABLE, { allowInsecureConnection: true });
    const stored: string[] = [];
    for await (const row of table.listEntities({ queryOptions: { filter: `PartitionKey eq '${environmentPartition(environment)}'` } })) stored.push(row.rowKey!);
    expect(stored).toHaveLength(3);
    expect((await reader.listPage(environment, { limit: 10 })).map((r) => r.resource.urn)).toEqual(['urn:r-000', 'urn:r-001']);
    expect((await reader.listPage(environment, { after: 'urn:r-000', limit: 10 })).map((r) => r.resource.urn)).toEqual(['urn:r-001']);
  });
});
