import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Observer, ObserverName } from '../../shared/inventory/observer';
import { observersByTarget } from '../../shared/inventory/target-observers';
import { parseConfig } from '../../shared/platform/config/config';

/**
 * What the observer adapters cost a host that does not use them. Each adapter has its own tests on what its peer
 * really says: inventory-arm-observer.test.ts (Microsoft's published REST examples and SDK recordings) and
 * inventory-kubernetes-observer.test.ts (API server objects published upstream).
 */
describe('observer adapters: start-up cost', () => {
  it('when the adapter modules are loaded, then neither SDK is: a host observing the local cloud never pays for them', () => {
    // A fresh process, because this one has loaded both SDKs for the tests above.
    const adapters = ['shared/inventory/arm-observer.adapter', 'shared/inventory/kubernetes-observer.adapter', 'local/cloud/local-cloud-observer.adapter'].map((name) => join(__dirname, '../..', `${name}.ts`));
    const script = `
      for (const adapter of ${JSON.stringify(adapters)}) require(adapter);
      // A dot stands for either path separator.
      const sdks = () => Object.keys(require.cache).filter((k) => /node_modules.(@azure.(arm-resources|identity)|@kubernetes.client-node)./.test(k)).length;
      const before = sdks();
      require('@azure/arm-resources');
      console.log(JSON.stringify({ before, after: sdks() }));`;
    const output = execFileSync(process.execPath, ['--import', 'tsx', '-e', script], { cwd: join(__dirname, '../..'), encoding: 'utf8' });
    const { before, after } = JSON.parse(output) as { before: number; after: number };
    expect(before).toBe(0);
    // The check sees an SDK once something loads it.
    expect(after).toBeGreaterThan(0);
  });
});

describe('observers by target', () => {
  const backend = { url: 'azblob://state-{tenant}' };
  const targets = parseConfig({
    RuntimeCloud__Targets: JSON.stringify([
      { id: 'local', kind: 'local-cloud', name: 'Local' },
      { id: 'azure-we', kind: 'azure-subscription', name: 'Azure WE', backend },
      { id: 'azure-ne', kind: 'azure-subscription', name: 'Azure NE', backend },
      { id: 'aks-we', kind: 'aks-cluster', name: 'AKS', backend },
      { id: 'dc', kind: 'on-prem', name: 'Datacenter', backend },
    ]),
  }).targets;
  const adapters = (made: ObserverName[]) => {
    const make = (name: ObserverName) => (): Observer => {
      made.push(name);
      return { name, observe: async () => [] };
    };
    return { 'local-cloud': make('local-cloud'), 'azure-resource-manager': make('azure-resource-manager'), kubernetes: make('kubernetes') };
  };

  it('when targets of every kind are configured, then each is read by its kind\'s observer, one adapter per kind', () => {
    const made: ObserverName[] = [];

    const observers = observersByTarget(targets, adapters(made));

    expect(Object.fromEntries([...observers].map(([id, observer]) => [id, observer.name]))).toEqual({
      local: 'local-cloud',
      'azure-we': 'azure-resource-manager',
      'azure-ne': 'azure-resource-manager',
      'aks-we': 'kubernetes',
      dc: 'kubernetes',
    });
    expect(observers.get('azure-we')).toBe(observers.get('azure-ne'));
    expect(made.sort()).toEqual(['azure-resource-manager', 'kubernetes', 'local-cloud']);
  });

  it('when no target is of a kind, then its adapter is never made', () => {
    const made: ObserverName[] = [];

    observersByTarget(targets.filter((t) => t.kind === 'azure-subscription'), adapters(made));

    expect(made).toEqual(['azure-resource-manager']);
  });
});
