import { describe, expect, it } from 'vitest';
import { field, inventory, runInfra, TARGET_SUBSCRIPTIONS, validConfig } from './infra-mocks';

// A file of its own: the program runs once per process (./infra-mocks.ts).
describe('infra runner names', () => {
  it("when one target's id and tenant read like another's (a + b-c, a-b + c), then each tenant still gets its own container, key and pool, and the program declares no name twice", async () => {
    const targets = [
      { id: 'a', kind: 'azure-subscription', name: 'A', scope: { subscriptionId: TARGET_SUBSCRIPTIONS.a, resourceGroup: 'rg-a' }, tenants: ['b-c'] },
      { id: 'a-b', kind: 'azure-subscription', name: 'A-B', scope: { subscriptionId: TARGET_SUBSCRIPTIONS.b, resourceGroup: 'rg-a-b' }, tenants: ['c'] },
    ];

    const { declared } = await runInfra({ ...validConfig(), targets: JSON.stringify(targets) });

    // Under the mocks a second resource of the same type and name is not refused as `pulumi up` would refuse it.
    const urns = declared.map((r) => `${r.type}::${r.logicalName}`);
    expect(urns.filter((urn, i) => urns.indexOf(urn) !== i)).toEqual([]);
    const { all } = inventory(declared);
    expect(all('storage:BlobContainer').map((c) => c.name).sort()).toEqual(['state-b-c', 'state-c']);
    // The tenants' state keys; the host's own lease certificate key is nobody's.
    expect(all('keyvault:Key').map((k) => k.name).filter((name) => name !== 'lease-certificates').sort()).toEqual(['pulumi-b-c', 'pulumi-c']);
    const pools = all('app:Job').map((j) => (field(j, 'template.containers.0.env') as { name: string; value: string }[]).find((e) => e.name === 'RuntimeCloud__Runner__Pool')?.value);
    expect(pools.sort()).toEqual(['a-b.c', 'a.b-c']);
  });
});
