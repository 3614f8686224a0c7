import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTableServer, type RunningTableServer } from '../../local/azurite/table-server';
import { createTableStore } from '../../shared/platform/tables/tables';
import type { EnvironmentKey } from '../../shared/inventory/environment';
import { createObservedInventory, tableKey, type ObservedInventory } from '../../shared/inventory/observed-inventory.repository';

/** The observed inventory on a real Table server (Azurite in this process): Table limits, keys, rewrites. */
describe('observed inventory in Table storage', () => {
  let server: RunningTableServer;
  let inventory: ObservedInventory;
  const at = new Date('2026-06-01T00:00:00Z');
  /** An environment of a tenant: ids are unique within a tenant only. */
  const env = (id: string, tenant = 'tenant-a'): EnvironmentKey => ({ tenant, id });

  beforeAll(async () => {
    server = await startTableServer();
    inventory = createObservedInventory(createTableStore(server.connectionString));
  });
  afterAll(async () => {
    await server?.close();
  });

  it('when a property bag is larger than one Table string property, then it is split and read back whole; past the entity limit it is summarised', async () => {
    const large = { blob: 'x'.repeat(100_000), nested: { a: [1, 2, 3] } };
    const huge = { blob: 'y'.repeat(600_000), other: true };
    await inventory.replace(env('env-large'), [
      { urn: 'urn:a', type: 't', id: 'a', properties: large },
      { urn: 'urn:b', type: 't', id: 'b', properties: huge },
    ], { at, scanId: 'scan-large' });

    const [a, b] = (await inventory.listPage(env('env-large'), { limit: 10 })).map((row) => row.resource);
    expect(a).toEqual({ urn: 'urn:a', type: 't', id: 'a', properties: large, changedAt: at.toISOString() });
    expect(b!.properties).toBeUndefined();
    expect(b!.summary).toMatchObject({ bytes: JSON.stringify(huge).length, keys: ['blob', 'other'], sha256: expect.stringMatching(/^[0-9a-f]{64}$/) });
  });

  it('when urns hold characters Table keys forbid, then they are encoded and read back, and long ones are hashed', () => {
    expect(tableKey('urn:pulumi:dev::app::azure-native:web:WebApp::a/b#c?d\\e%f')).toBe('urn:pulumi:dev::app::azure-native:web:WebApp::a%2fb%23c%3fd%5ce%25f');
    expect(tableKey('u'.repeat(600))).toMatch(/^sha256-[0-9a-f]{64}$/);
  });

  it('when an environment is observed again, then only changed rows are written and vanished ones deleted', async () => {
    const r = (urn: string, size: string) => ({ urn, type: 't', id: urn, properties: { size } });
    expect(await inventory.replace(env('env-rewrite'), [r('urn:1/x', 's'), r('urn:2', 's'), r('urn:3', 's')], { at, scanId: 'scan-1' })).toMatchObject({ outcome: 'stored', written: 3, deleted: 0 });
    const later = new Date('2026-06-02T00:00:00Z');
    expect(await inventory.replace(env('env-rewrite'), [r('urn:1/x', 's'), r('urn:2', 'l')], { at: later, scanId: 'scan-2' })).toMatchObject({ outcome: 'stored', written: 1, deleted: 1 });
    const rows = (await inventory.listPage(env('env-rewrite'), { limit: 10 })).map((row) => row.resource);
    expect(rows.map((row) => [row.urn, row.properties, row.changedAt])).toEqual([
      ['urn:1/x', { size: 's' }, at.toISOString()],
      ['urn:2', { size: 'l' }, later.toISOString()],
    ]);
  });

  it('when an environment is read a page at a time, then each page follows on from the last row key, in key order, and every resource carries its row key', async () => {
    const urns = Array.from({ length: 25 }, (_, i) => (i % 4 === 0 ? `urn:${'u'.repeat(600)}${i}` : i % 4 === 1 ? `urn:a/b#${i}` : `urn:plain-${String(i).padStart(2, '0')}`));
    await inventory.replace(env('env-pages'), urns.map((urn) => ({ urn, type: 't', id: urn, properties: {} })), { at, scanId: 'scan-pages' });

    const pages: { key: string; urn: string }[][] = [];
    let after: string | undefined;
    for (;;) {
      const page = await inventory.listPage(env('env-pages'), { ...(after !== undefined ? { after } : {}), limit: 10 });
      pages.push(page.map((row) => ({ key: row.key, urn: row.resource.urn })));
      if (page.length < 10) break;
      after = page[page.length - 1]!.key;
    }

    expect(pages.map((page) => page.length)).toEqual([10, 10, 5]);
    const rows = pages.flat();
    expect(rows.map((row) => row.key)).toEqual(urns.map(tableKey).sort());
    for (const row of rows) expect(row.key).toBe(tableKey(row.urn));
    expect(rows.filter((row) => row.key.startsWith('sha256-'))).toHaveLength(7);
    expect(await inventory.listPage(env('env-pages'), { after: rows[rows.length - 1]!.key, limit: 10 })).toEqual([]);
  });

  it("when two tenants have an environment of the same id, then each reads only its own resources and scans, however ':' falls in their names", async () => {
    const r = (urn: string) => ({ urn, type: 't', id: urn, properties: {} });
    // Joined naively with ':', these two keys would be one partition: `a:b:c`.
    const pairs: [EnvironmentKey, EnvironmentKey][] = [
      [env('env-shared', 'tenant-a'), env('env-shared', 'tenant-b')],
      [env('b:c', 'a'), env('c', 'a:b')],
    ];
    for (const [first, second] of pairs) {
      await inventory.replace(first, [r('urn:first')], { at, scanId: 'scan-first' });
      expect(await inventory.replace(second, [r('urn:second')], { at, scanId: 'scan-second' })).toMatchObject({ outcome: 'stored', written: 1, deleted: 0 });
      expect((await inventory.listPage(first, { limit: 10 })).map((row) => row.resource.urn)).toEqual(['urn:first']);
      expect((await inventory.listPage(second, { limit: 10 })).map((row) => row.resource.urn)).toEqual(['urn:second']);
      await inventory.recordScan({ scanId: `scan-${first.tenant}`, tenantId: first.tenant, environmentId: first.id, trigger: 'timer', outcome: 'completed', startedAt: at.toISOString(), finishedAt: at.toISOString() });
      expect((await inventory.scans(first, 10)).map((s) => s.scanId)).toEqual([`scan-${first.tenant}`]);
      expect(await inventory.scans(second, 10)).toEqual([]);
    }
  });

  it('when Table storage does not answer, then reading the inventory fails as unavailable (a 503), not as an unexpected error', async () => {
    const unreachable = createObservedInventory(createTableStore(server.connectionString.replace(/TableEndpoint=http:\/\/127\.0\.0\.1:\d+/, 'TableEndpoint=http://127.0.0.1:9')));
    await expect(unreachable.listPage(env('env-any'), { limit: 10 })).rejects.toMatchObject({ code: 'INVENTORY.TABLES_UNAVAILABLE', kind: 'unavailable' });
  }, 30_000);

  it('when scans are recorded, then they are listed newest first, as many as asked', async () => {
    for (let i = 0; i < 5; i++) {
      const startedAt = new Date(Date.UTC(2026, 5, 1, 0, i)).toISOString();
      await inventory.recordScan({ scanId: `scan-${i}`, tenantId: 'tenant-a', environmentId: 'env-scans', trigger: 'timer', outcome: 'completed', startedAt, finishedAt: startedAt });
    }
    expect((await inventory.scans(env('env-scans'), 3)).map((s) => s.scanId)).toEqual(['scan-4', 'scan-3', 'scan-2']);
  });
});
